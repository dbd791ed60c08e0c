"""The grant form people can read and the grant list in words (issue 32)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from guardian.shortcuts import assign_perm

from invocations_app.models import Invocation
from specs_app.models import Capability, Grant, GrantChange
from tests.builders import admit_proposal, make_demo_spec, make_staff, make_subject, make_tenant, payment_args

pytestmark = pytest.mark.django_db

NEW = "/console/tenants/acme/grants/new"
LIST = "/console/tenants/acme/grants/"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    payments = make_demo_spec(name="payments.transfer")
    calendar = make_demo_spec(name="calendar.create_event")
    weather = make_demo_spec(name="weather.get_forecast")
    acme = make_tenant(slug="acme")
    finance = make_subject(tenant=acme, name="finance-bot")
    planner = make_subject(tenant=acme, name="planner")
    Group.objects.create(name="payments-leads")
    admin = make_staff(username="ada")
    assign_perm("specs_app.manage_grants_tenant", admin, acme)
    return {"payments": payments, "calendar": calendar, "weather": weather, "acme": acme, "finance": finance,
            "planner": planner, "admin": admin}


def tiers(*rows) -> dict:
    """The policy builder's formset fields: ``(up_to, decision)`` per tier, three rows."""
    rows = list(rows) + [("", "")] * (3 - len(rows))
    data = {"tier-TOTAL_FORMS": "3", "tier-INITIAL_FORMS": "0", "tier-MIN_NUM_FORMS": "0", "tier-MAX_NUM_FORMS": "6"}
    for n, (up_to, decision) in enumerate(rows):
        data[f"tier-{n}-up_to"], data[f"tier-{n}-decision"] = up_to, decision
    return data


def payments_form(world, **overrides) -> dict:
    return {"capability": Capability.objects.get(name="payments.transfer").pk, "subject": world["finance"].pk,
            "effect": "allow", "scope_kind": "any", "scope_values": "", "calls_per_minute": "5", "currency": "EUR",
            "max_amount_per_call": "100.00", "tool_refs": [world["payments"].ref],
            "escalate_after_minutes": "10", "escalation_group": "payments-leads",
            "reason": "supplier payments", **tiers(("10.00", "allow"), ("", "one")), **overrides}


def test_a_two_tier_eur_grant_is_previewed_in_words_and_stored_as_the_json_form_would_store_it(client, world):
    client.force_login(world["admin"])
    preview = client.post(NEW, {**payments_form(world), "preview": "1"})
    assert preview.status_code == 200, preview.context["form"].errors
    words = preview.context["preview"]
    assert words[0] == "finance-bot may create with payments.transfer on any resource"
    assert "max 100.00 EUR per call" in words and "at most 5 calls a minute" in words
    assert "up to 10.00 EUR: runs without a person" in words and "above 10.00 EUR: 1 approver(s)" in words
    assert "undecided after 10 min: the group payments-leads is told" in words
    assert not Grant.objects.exists()  # a preview saves nothing

    saved = client.post(NEW, {**payments_form(world), "save": "1"})
    assert saved.status_code == 302
    grant = Grant.objects.get()
    # The same grant through the JSON form (the admin's add page, minor units typed by hand).
    root = make_staff(username="root", superuser=True)
    client.force_login(root)
    json_form = client.post("/specs_app/grant/add/", {
        "capability": grant.capability_id, "tenant": world["acme"].pk, "subject": world["finance"].pk, "effect": "allow",
        "scope_kind": "any", "scope_values": "[]", "tool_refs": f'["{world["payments"].ref}"]',
        "limits": '{"calls_per_minute": 5, "currency": "EUR", "max_amount_per_call": 10000}',
        "approval_policy": '{"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, '
                           '{"effect": "confirm", "approvals": 1}], "escalate_after_seconds": 600, '
                           '"escalation_group": "payments-leads"}',
        "reason": "the same, typed as JSON", "_save": "Save"})
    assert json_form.status_code == 302
    by_json = Grant.objects.exclude(pk=grant.pk).get()
    assert grant.approval_policy == by_json.approval_policy
    assert grant.limits == by_json.limits == {"calls_per_minute": 5, "currency": "EUR", "max_amount_per_call": 10000}
    assert (grant.scope_kind, grant.scope_values, grant.tool_refs) == (by_json.scope_kind, by_json.scope_values, by_json.tool_refs)
    assert GrantChange.objects.get(grant=grant).actor == world["admin"]
    # And it decides as written: 100.00 EUR is covered, 100.01 EUR is over the per-call limit.
    within = admit_proposal(subject=world["finance"], spec=world["payments"], arguments=payment_args(10000))
    over = admit_proposal(subject=world["finance"], spec=world["payments"], arguments=payment_args(10001))
    assert within.state == "AUTHORIZED" and over.state == "AUTHORIZATION_REJECTED"


@pytest.mark.parametrize("currency, typed, minor", [("EUR", "100.00", 10000), ("EUR", "0.1", 10), ("JPY", "5000", 5000),
                                                     ("BHD", "1.234", 1234), ("KWD", "20", 20000)])
def test_major_units_become_minor_units_exactly_by_the_currency_exponent(client, world, currency, typed, minor):
    client.force_login(world["admin"])
    answer = client.post(NEW, {**payments_form(world, currency=currency, max_amount_per_call=typed, **tiers()), "save": "1"})
    assert answer.status_code == 302, answer.context["form"].errors
    assert Grant.objects.get().limits["max_amount_per_call"] == minor


def test_an_amount_finer_than_its_currency_is_refused_not_rounded(client, world):
    client.force_login(world["admin"])
    answer = client.post(NEW, {**payments_form(world, max_amount_per_call="10.005"), "save": "1"})
    assert answer.status_code == 400
    assert "more than 2 decimals for EUR" in str(answer.context["form"].errors["max_amount_per_call"])
    answer = client.post(NEW, {**payments_form(world, **tiers(("10.001", "allow"), ("", "two"))), "save": "1"})
    assert list(answer.context["form"].non_field_errors()) == [
        "tier 1: '10.001' has more than 2 decimals for EUR (type an amount in EUR, e.g. 100.00)"]
    assert not Grant.objects.exists()


def test_scope_values_one_per_line_and_checks_against_the_capability(client, world):
    client.force_login(world["admin"])
    calendar_write = Capability.objects.get(name="calendar.write")
    form = {"capability": calendar_write.pk, "subject": world["planner"].pk, "effect": "allow", "scope_kind": "exact",
            "scope_values": "primary\n\n  work  \n", "calls_per_minute": "5", "reason": "the planner books meetings", **tiers()}
    answer = client.post(NEW, {**form, "preview": "1"})
    assert answer.context["preview"][0] == "planner may create with calendar.write on exact: primary, work"
    # The calendar's ToolSpec requires a person for every call: the form says "allow" cannot change that.
    assert [t.ref for t in answer.context["own_rule"]] == [world["calendar"].ref]
    assert "requires a person to confirm every call" in answer.content.decode()
    # Calendar calls carry no amount; weather versions do not need calendar.write.
    refused = client.post(NEW, {**form, "currency": "EUR", "max_amount_per_call": "5", "tool_refs": [world["weather"].ref],
                                "save": "1"})
    errors = refused.context["form"].errors
    assert "carry no amount" in str(errors["currency"]) and "do not need calendar.write" in str(errors["tool_refs"])
    assert client.post(NEW, {**form, "scope_values": "", "save": "1"}).status_code == 400  # exact needs a value
    assert client.post(NEW, {**form, "save": "1"}).status_code == 302
    assert Grant.objects.get().scope_values == ["primary", "work"]


def test_the_grant_list_says_each_grant_in_words_and_filters_by_agent_and_capability(client, world):
    client.force_login(world["admin"])
    for currency in ("EUR", "USD"):
        client.post(NEW, {**payments_form(world, currency=currency), "save": "1"})
    client.post(NEW, {"capability": Capability.objects.get(name="weather.read").pk, "subject": world["planner"].pk,
                      "effect": "allow", "scope_kind": "any", "reason": "forecasts", **tiers(), "save": "1"})
    page = client.get(LIST)
    body = page.content.decode()
    assert "max 100.00 EUR per call" in body and "max 100.00 USD per call" in body  # EUR and USD grants differ on sight
    assert "up to 10.00 EUR: runs without a person" in body
    only_planner = client.get(LIST, {"subject": str(world["planner"].pk)}).context["rows"]
    assert [r["grant"].capability.name for r in only_planner] == ["weather.read"]
    payments = Capability.objects.get(name="payments.transfer")
    assert len(client.get(LIST, {"capability": str(payments.pk)}).context["rows"]) == 2
    assert client.get(LIST, {"subject": "not-a-uuid"}).context["rows"] == []


def test_another_tenants_grant_pages_are_404(client, world):
    make_tenant(slug="globex")
    client.force_login(world["admin"])
    assert client.get("/console/tenants/globex/grants/").status_code == 404
    assert client.post("/console/tenants/globex/grants/new", {"save": "1"}).status_code == 404
    client.force_login(make_staff(username="viewer"))
    assert client.get(LIST).status_code == 404
    assert Invocation.objects.count() == 0


def test_a_calls_record_puts_the_matching_grants_reasons_first_and_folds_the_others(client, world):
    from tests.builders import CALENDAR_ARGS, make_grant
    planner = world["planner"]
    work_only = make_grant(subject=planner, capability="calendar.write", operation_class="create", scope_kind="exact",
                           scope_values=["work"])
    make_grant(subject=planner, capability="calendar.write", operation_class="create", scope_kind="exact",
               scope_values=["primary"])
    call = admit_proposal(subject=planner, spec=world["calendar"], arguments=CALENDAR_ARGS)
    assert call.state == "AUTHORIZED", call.error_message
    client.force_login(make_staff(username="root", superuser=True))
    page = client.get(f"/console/calls/{call.pk}/")
    other = page.context["reasons_other"]
    assert [(r["code"], r["grant_id"]) for r in other] == [("scope_mismatch", str(work_only.pk))]
    assert all(r["grant_id"] != str(work_only.pk) for r in page.context["reasons_matching"])
    body = page.content.decode()
    assert body.index('data-testid="reasons-other"') > body.find('data-testid="reasons-matching"')
    assert "Other grants considered (1): not used for this call" in body


def test_the_admins_grant_list_also_tells_eur_from_usd(client, world):
    client.force_login(world["admin"])
    for currency in ("EUR", "USD"):
        assert client.post(NEW, {**payments_form(world, currency=currency), "save": "1"}).status_code == 302
    body = client.get("/specs_app/grant/").content.decode()
    assert "max 100.00 EUR per call" in body and "max 100.00 USD per call" in body
