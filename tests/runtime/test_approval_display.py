"""The approver's words: values by what the ToolSpec says they mean, limits in the call's units,
the risk line, the interpretation trail and the edit form (pure; no database)."""
from __future__ import annotations

import pytest

from devtools.demo import DEMO_TOOLSPECS
from toolops.decisions import approval_display as words

PAYMENT = next(d for d in DEMO_TOOLSPECS if d["name"] == "payments.transfer")
CALENDAR = next(d for d in DEMO_TOOLSPECS if d["name"] == "calendar.create_event")
PAYMENT_KINDS = words.field_kinds(input_schema=PAYMENT["input_schema"], normalizers=PAYMENT["normalizers"])
CALENDAR_KINDS = words.field_kinds(input_schema=CALENDAR["input_schema"], normalizers=CALENDAR["normalizers"])
PAYMENT_ARGS = {"to_account": "acct_42", "amount": {"amount_minor": 1250, "currency": "EUR"}}


def test_it_shows_the_demo_payment_amount_in_major_units_with_its_currency():
    lines = {line["field"]: line for line in words.arguments_display(PAYMENT_ARGS, PAYMENT_KINDS)}
    assert lines["amount"]["text"] == "12.50 EUR" and lines["amount"]["kind"] == "money"
    assert lines["to_account"]["text"] == "acct_42" and lines["to_account"]["kind"] == ""


def test_it_takes_meaning_from_the_toolspec_never_from_a_field_name():
    # Same value under a field called "amount", but the ToolSpec declares no money there.
    lines = words.arguments_display({"amount": {"amount_minor": 1250, "currency": "EUR"}}, {})
    assert lines[0]["text"] == '{"amount_minor": 1250, "currency": "EUR"}'


@pytest.mark.parametrize("minor, currency, text", [
    (1250, "EUR", "12.50 EUR"), (50_000, "EUR", "500.00 EUR"), (5, "USD", "0.05 USD"),
    (5_000_000, "JPY", "5,000,000 JPY"), (1234, "KWD", "1.234 KWD"), (123_456_789, "USD", "1,234,567.89 USD"),
])
def test_it_formats_money_with_the_currencys_minor_units(minor, currency, text):
    assert words.format_money(minor, currency) == text


def test_it_reads_a_fixed_currency_normalizer_and_a_schema_annotation():
    kinds = words.field_kinds(
        input_schema={"properties": {"fee": {"type": "object", "x-toolops-kind": "money"},
                                     "due": {"type": "string", "x-toolops-kind": "date"}}},
        normalizers=[{"pointer": "/price", "normalizer": "currency_minor_units", "options": {"currency": "GBP"}}],
    )
    lines = {l["field"]: l["text"] for l in words.arguments_display(
        {"price": 999, "fee": {"amount_minor": 250, "currency": "CHF"}, "due": "2026-12-02"}, kinds)}
    assert lines == {"price": "9.99 GBP", "fee": "2.50 CHF", "due": "2026-12-02 (Wednesday)"}


def test_it_names_the_zone_of_a_time_only_when_the_offset_is_that_zones():
    assert words.format_datetime("2026-12-02T09:00:00+08:00", "Asia/Shanghai") == "2026-12-02 09:00 +08:00 (Asia/Shanghai)"
    assert words.format_datetime("2026-12-02T09:00:00+01:00", "Asia/Shanghai") == "2026-12-02 09:00 +01:00"
    assert words.format_datetime("tomorrow", "Asia/Shanghai") == "tomorrow"
    start = {l["field"]: l["text"] for l in words.arguments_display(
        {"start": "2026-07-20T09:00:00+08:00"}, CALENDAR_KINDS, zone_name="Asia/Shanghai")}["start"]
    assert start == "2026-07-20 09:00 +08:00 (Asia/Shanghai)"


def test_it_states_why_with_the_grant_limit_in_its_own_currency():
    authorization = {"decision": "confirm", "capabilities": [{
        "grant_id": "fb4296b8-59b1-4aef-9c10-9af6bb4fe559", "capability": "payments.transfer", "scope_kind": "any",
        "scope_values": [], "effect": "confirm", "limits": {"currency": "EUR", "max_amount_per_call": 50_000}}]}
    why = words.why_display(authorization=authorization, confirmation_policy=PAYMENT["confirmation_policy"], currency="EUR")
    assert why["grants"][0]["limits"] == ["max 500.00 EUR per call"]
    assert "grant fb4296b8 on payments.transfer (any resource) requires a person's confirmation; max 500.00 EUR per call" in why["reasons"]
    assert "the tool's ToolSpec requires a person to confirm every call" in why["reasons"]
    assert "50000" not in why["text"]


def test_it_words_every_limit_kind():
    assert words.limits_display({"max_amount_per_window": 200_000, "amount_window_seconds": 86400, "calls_per_minute": 5,
                                 "calls_per_run": 3, "time_range_min_seconds": 0, "time_range_max_seconds": 604800},
                                currency="USD") == [
        "max 2,000.00 USD (no currency stated: read in the call's) per 1 d", "at most 5 calls a minute",
        "at most 3 calls per run", "times between now and now + 7 d"]
    assert words.limits_display({"max_amount_per_call": 100}, currency=None) == ["max 100 minor units (no currency stated) per call"]


def test_an_amount_limit_is_shown_in_its_currency_whatever_the_call_is_in():
    """50000 minor units of JPY are 50,000 JPY, not 500.00 EUR: the limit's currency decides the
    words, and a call in another currency is told it is not covered."""
    assert words.limits_display({"currency": "JPY", "max_amount_per_call": 50_000}, currency="JPY") == ["max 50,000 JPY per call"]
    assert words.limits_display({"currency": "EUR", "max_amount_per_call": 50_000}, currency="USD") == [
        "max 500.00 EUR per call", "in EUR: this call is in USD, so these amounts cannot cover it"]


def test_it_words_an_approval_policy_in_major_units_of_its_currency():
    policy = {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"},
                                                {"up_to": 50000, "effect": "confirm", "approvals": 1},
                                                {"effect": "confirm", "approvals": 2}]}
    assert words.policy_display(policy, currency="EUR") == [
        "up to 10.00 EUR: runs without a person", "up to 500.00 EUR: 1 approver(s)", "above 500.00 EUR: 2 approver(s)"]
    capped = {"currency": "KWD", "thresholds": [{"up_to": 1500, "effect": "confirm"}]}
    assert words.policy_display(capped, currency="EUR") == [
        "up to 1.500 KWD: 1 approver(s)", "above 1.500 KWD: denied",
        "in KWD: this call is in EUR, so these amounts cannot cover it"]
    authorization = {"decision": "confirm", "capabilities": [{
        "grant_id": "fb4296b8", "capability": "payments.transfer", "scope_kind": "any", "scope_values": [],
        "effect": "confirm", "limits": {}, "approval_policy": policy}]}
    why = words.why_display(authorization=authorization, confirmation_policy=None, currency="EUR")
    assert why["grants"][0]["policy"][0] == "up to 10.00 EUR: runs without a person"
    assert words.policy_display({"edits": "second_person_always"}, currency=None) == [
        "an approver's edit always needs a second approver"]
    assert "policy: up to 10.00 EUR" in why["text"] and "50000" not in why["text"]


@pytest.mark.parametrize("side_effect_class, effect, undo", [
    ("read_only", "reads only", "nothing to undo"),
    ("write_idempotent", "repeatable with its idempotency key", "cannot be undone by ToolOps"),
    ("write_unsafe", "NOT idempotent", "cannot be undone by ToolOps"),
])
def test_it_gives_the_risk_line(side_effect_class, effect, undo):
    risk = words.risk_display(side_effect_class=side_effect_class, idempotency_key="run:call_1", has_lookup=True)
    assert effect in risk["effect"] and undo in risk["undo"]
    assert risk["text"].count("·") == 2


def test_it_shows_the_interpretation_trail_with_clock_zone_and_locale():
    trail = words.interpretation_display(
        raw=b'{"start": "tomorrow 09:00", "bad": "\xff"}',
        context={"clock": "2026-12-01T10:00:00+08:00", "timezone": "Asia/Shanghai", "locale": "zh-CN"},
        trace=[{"pointer": "/start", "normalizer": "datetime", "input": "tomorrow 09:00", "output": "2026-12-02T09:00:00+08:00"}],
        kinds=CALENDAR_KINDS,
    )
    assert trail["raw_text"] == '{"start": "tomorrow 09:00", "bad": "\\xff"}'
    assert trail["steps"][0]["text"] == '/start: "tomorrow 09:00" → 2026-12-02 09:00 +08:00 (Asia/Shanghai)'
    assert trail["steps"][0]["changed"] is True
    assert trail["context_text"] == "clock 2026-12-01 10:00 +08:00 (Asia/Shanghai) · zone Asia/Shanghai · locale zh-CN"


def test_it_lists_the_fields_an_edit_changed():
    after = {**PAYMENT_ARGS, "amount": {"amount_minor": 2500, "currency": "EUR"}}
    assert words.arguments_difference(PAYMENT_ARGS, after, PAYMENT_KINDS) == [
        {"field": "amount", "before": "12.50 EUR", "after": "25.00 EUR"}]


def test_it_builds_the_edit_form_from_the_input_schema_and_reads_it_back():
    start = words.input_shape(PAYMENT_ARGS, PAYMENT_KINDS)
    assert start == {"to_account": "acct_42", "amount": {"amount": "12.50", "currency": "EUR"}}
    fields = {f["name"]: f for f in words.edit_form_fields(input_schema=PAYMENT["input_schema"], kinds=PAYMENT_KINDS, values=start)}
    assert set(fields) == {"/to_account", "/amount/amount", "/amount/currency", "/memo"}
    assert fields["/amount/amount"]["value"] == "12.50" and fields["/amount/amount"]["widget"] == "text"
    assert "money" in fields["/amount/amount"]["help"]
    assert fields["/amount/currency"]["widget"] == "select" and fields["/amount/currency"]["value"] == '"EUR"'
    assert fields["/memo"]["required"] is False
    posted = {"/to_account": "acct_42", "/amount/amount": "25", "/amount/currency": '"EUR"', "/memo": ""}
    assert words.arguments_from_form(list(fields.values()), posted) == {
        "to_account": "acct_42", "amount": {"amount": "25", "currency": "EUR"}}


def test_it_parses_integer_fields_and_names_a_bad_one():
    fields = words.edit_form_fields(input_schema=CALENDAR["input_schema"], kinds=CALENDAR_KINDS,
                                    values={"duration_minutes": 45})
    duration = next(f for f in fields if f["name"] == "/duration_minutes")
    assert duration["widget"] == "integer" and duration["value"] == "45"
    assert words.arguments_from_form([duration], {"/duration_minutes": "30"}) == {"duration_minutes": 30}
    with pytest.raises(words.FormError) as bad:
        words.arguments_from_form([duration], {"/duration_minutes": "half an hour"})
    assert bad.value.field == "/duration_minutes"
