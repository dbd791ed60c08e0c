"""Semantic normalizers (docs/concepts/admission.md layer 3): fixed-context, deterministic, never guessing."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolops.runtime.normalizers import (
    NORMALIZERS_VERSION,
    REGISTRY,
    FieldRule,
    NormalizationContext,
    NormalizationRejected,
    cached_rules,
    check_rules,
    normalize_arguments,
)

SHANGHAI = "Asia/Shanghai"
# Sunday 2026-07-19, 14:00 in Shanghai (the docs/concepts/admission.md example clock).
SPEC_CLOCK = datetime.fromisoformat("2026-07-19T14:00:00+08:00")


def ctx(clock: datetime = SPEC_CLOCK, zone: str = SHANGHAI, **kw) -> NormalizationContext:
    return NormalizationContext(clock=clock, timezone=zone, **kw)


def run(name: str, value, context: NormalizationContext | None = None, **options):
    return REGISTRY[name](value, context or ctx(), options)


def rejected(name: str, value, context: NormalizationContext | None = None, **options) -> dict:
    with pytest.raises(NormalizationRejected) as info:
        run(name, value, context, **options)
    details = info.value.as_dict()
    assert details["code"] == "normalization_rejected"
    assert details["normalizer"] == name
    return details


class TestDate:
    def test_it_normalizes_the_spec_example(self):
        assert run("date", "tomorrow") == "2026-07-20"

    def test_it_takes_today_from_the_run_zone_not_the_clock_offset(self):
        late_utc = datetime(2026, 7, 19, 20, 0, tzinfo=timezone.utc)
        assert run("date", "today", ctx(late_utc, SHANGHAI)) == "2026-07-20"
        assert run("date", "today", ctx(late_utc, "UTC")) == "2026-07-19"
        assert run("date", "today", ctx(late_utc, "America/Los_Angeles")) == "2026-07-19"

    @pytest.mark.parametrize(
        "expression, expected",
        [
            ("today", "2026-07-19"),
            ("tomorrow", "2026-07-20"),
            ("yesterday", "2026-07-18"),
            ("in 0 days", "2026-07-19"),
            ("in 1 day", "2026-07-20"),
            ("in 3 days", "2026-07-22"),
            ("in 2 weeks", "2026-08-02"),
            ("in 3660 days", "2036-07-26"),
            ("3 days ago", "2026-07-16"),
            ("1 week ago", "2026-07-12"),
            ("2026-02-28", "2026-02-28"),
            ("2028-02-29", "2028-02-29"),
        ],
    )
    def test_it_resolves_each_relative_expression_against_the_fixed_clock(self, expression, expected):
        assert run("date", expression) == expected

    def test_it_is_case_and_whitespace_insensitive(self):
        assert run("date", "  In   3\tDAYS \n") == "2026-07-22"
        assert run("date", "TOMORROW") == "2026-07-20"
        assert run("date", "Next  Monday") == "2026-07-20"

    @pytest.mark.parametrize(
        "expression, expected",
        [
            ("sunday", "2026-07-19"),  # today is Sunday: a bare weekday means today
            ("monday", "2026-07-20"),
            ("saturday", "2026-07-25"),
            ("next sunday", "2026-07-26"),  # "next" is strictly after today
            ("next monday", "2026-07-20"),
            ("next saturday", "2026-07-25"),
        ],
    )
    def test_it_applies_the_documented_weekday_rules(self, expression, expected):
        assert run("date", expression) == expected

    @pytest.mark.parametrize(
        "value",
        [
            "2026-02-30", "2026-13-01", "2026-00-10", "0000-01-01", "2026-7-20", "20260720",
            "2026-07-20T09:00", "next fortnight", "soonish", "", "   ", "in 3661 days",
            "in -1 days", "in 1.5 days", "next next monday", "this monday", "mon", "tomorow",
            "\uff12\uff10\uff12\uff16-07-20", "in 2 wee\u212as", 20260720, None, ["today"],
        ],
    )
    def test_it_rejects_what_it_does_not_recognize(self, value):
        details = rejected("date", value)
        assert details["reason"] == "unrecognized_date"


class TestDatetime:
    def test_it_combines_a_date_expression_with_a_time_in_the_run_zone(self):
        assert run("datetime", "tomorrow 09:00") == "2026-07-20T09:00:00+08:00"

    @pytest.mark.parametrize(
        "expression, expected",
        [
            ("tomorrow at 09:00", "2026-07-20T09:00:00+08:00"),
            ("tomorrow 9am", "2026-07-20T09:00:00+08:00"),
            ("tomorrow 9:30 PM", "2026-07-20T21:30:00+08:00"),
            ("today 12am", "2026-07-19T00:00:00+08:00"),
            ("today 12pm", "2026-07-19T12:00:00+08:00"),
            ("next monday at 17:45", "2026-07-20T17:45:00+08:00"),
            ("2026-07-20 at 9am", "2026-07-20T09:00:00+08:00"),
            ("2026-07-20T09:00", "2026-07-20T09:00:00+08:00"),
            ("2026-07-20 09:00", "2026-07-20T09:00:00+08:00"),
            ("2026-07-20T09:00:15", "2026-07-20T09:00:15+08:00"),
            ("2026-07-20T01:00:00Z", "2026-07-20T09:00:00+08:00"),
            ("2026-07-19T21:00:00-04:00", "2026-07-20T09:00:00+08:00"),
            ("2026-07-20T09:00:00.999+08:00", "2026-07-20T09:00:00+08:00"),
        ],
    )
    def test_it_accepts_the_documented_forms(self, expression, expected):
        assert run("datetime", expression) == expected

    @pytest.mark.parametrize(
        "value",
        [
            "tomorrow", "09:00", "tomorrow 24:00", "tomorrow 13pm", "tomorrow 0am",
            "tomorrow 9", "soonish 09:00", "2026-02-30T09:00", "2026-07-20T09:00+25:00",
            "2026-07-20T09:60", "next fortnight at 9am", "", 1784509200,
        ],
    )
    def test_it_rejects_unrecognized_datetimes(self, value):
        assert rejected("datetime", value)["reason"] == "unrecognized_datetime"

    def test_it_shifts_a_new_york_spring_forward_gap_forward_by_default(self):
        ny = ctx(zone="America/New_York")
        assert run("datetime", "2026-03-08T02:30", ny) == "2026-03-08T03:30:00-04:00"
        assert run("datetime", "2026-03-08T01:59", ny) == "2026-03-08T01:59:00-05:00"
        assert run("datetime", "2026-03-08T03:00", ny) == "2026-03-08T03:00:00-04:00"

    def test_it_rejects_a_gap_time_when_asked_to(self):
        ny = ctx(zone="America/New_York")
        details = rejected("datetime", "2026-03-08 02:30", ny, dst_gap="reject")
        assert details["reason"] == "nonexistent_local_time"

    def test_it_resolves_a_new_york_fall_back_fold_by_option(self):
        ny = ctx(zone="America/New_York")
        assert run("datetime", "2026-11-01T01:30", ny) == "2026-11-01T01:30:00-04:00"
        assert run("datetime", "2026-11-01T01:30", ny, dst_fold="earlier") == "2026-11-01T01:30:00-04:00"
        assert run("datetime", "2026-11-01T01:30", ny, dst_fold="later") == "2026-11-01T01:30:00-05:00"
        details = rejected("datetime", "2026-11-01T01:30", ny, dst_fold="reject")
        assert details["reason"] == "ambiguous_local_time"

    def test_it_applies_the_same_rules_in_berlin(self):
        berlin = ctx(zone="Europe/Berlin")
        assert run("datetime", "2026-03-29 02:30", berlin) == "2026-03-29T03:30:00+02:00"
        assert rejected("datetime", "2026-03-29 02:30", berlin, dst_gap="reject")["reason"] == (
            "nonexistent_local_time"
        )
        assert run("datetime", "2026-10-25 02:30", berlin) == "2026-10-25T02:30:00+02:00"
        assert run("datetime", "2026-10-25 02:30", berlin, dst_fold="later") == "2026-10-25T02:30:00+01:00"
        assert rejected("datetime", "2026-10-25 02:30", berlin, dst_fold="reject")["reason"] == (
            "ambiguous_local_time"
        )

    def test_it_keeps_an_explicit_instant_even_inside_a_fold(self):
        ny = ctx(zone="America/New_York")
        # 06:30Z is the second 01:30 in New York; the offset already says which one it is.
        assert run("datetime", "2026-11-01T06:30:00Z", ny, dst_fold="reject") == "2026-11-01T01:30:00-05:00"

    def test_it_rejects_offsets_rfc3339_cannot_spell(self):
        # Shanghai local mean time before 1901 was +08:05:43.
        assert rejected("datetime", "1890-01-01T00:00", ctx())["reason"] == "unrepresentable_offset"


class TestStrings:
    def test_it_trims_identifiers_by_default(self):
        assert run("identifier", "  primary \n") == "primary"
        assert run("identifier", "  primary ", trim=False) == "  primary "

    def test_it_casefolds_and_collapses_identifiers_on_request(self):
        assert run("identifier", " Straße  Main ", casefold=True) == "strasse  main"
        assert run("identifier", " A \t b ", collapse_whitespace=True) == "A b"

    def test_it_rejects_empty_and_non_string_identifiers(self):
        assert rejected("identifier", "   ")["reason"] == "empty"
        assert rejected("identifier", "")["reason"] == "empty"
        assert rejected("identifier", 42)["reason"] == "not_a_string"
        assert rejected("identifier", None)["reason"] == "not_a_string"

    def test_it_trims_and_casefolds_plain_strings(self):
        assert run("trim", "  x y  ") == "x y"
        assert run("casefold", "ÉCOLE") == "école"
        assert rejected("trim", 3)["reason"] == "not_a_string"
        assert rejected("casefold", [])["reason"] == "not_a_string"


class TestCurrency:
    @pytest.mark.parametrize(
        "value, currency, expected",
        [
            ("12.50", "USD", 1250),
            ("12.5", "EUR", 1250),
            (12.5, "USD", 1250),
            (12, "GBP", 1200),
            ("0.01", "CNY", 1),
            ("1500", "JPY", 1500),
            ("12.00", "JPY", 12),  # trailing zeros carry no extra value
            (12.0, "JPY", 12),
            ("1.234", "KWD", 1234),
            ("0.5", "BHD", 500),
            ("99.95", "CHF", 9995),
            ("100", "INR", 10000),
        ],
    )
    def test_it_converts_amounts_to_minor_units(self, value, currency, expected):
        result = run("currency_minor_units", value, currency=currency)
        assert result == expected and type(result) is int

    @pytest.mark.parametrize(
        "value, currency",
        [("12.505", "USD"), ("12.5", "JPY"), (0.5, "JPY"), ("1.2345", "KWD"), (0.1 + 0.2, "USD")],
    )
    def test_it_rejects_too_many_decimals(self, value, currency):
        assert rejected("currency_minor_units", value, currency=currency)["reason"] == "too_many_decimals"

    @pytest.mark.parametrize(
        "value",
        ["1,234.56", "12.", ".5", "1e3", "12.50 USD", " 12.50", "+12", "１２", True, None,
         float("nan"), float("inf"), {"amount": "1"}, "9" * 100],
    )
    def test_it_rejects_ambiguous_or_malformed_amounts(self, value):
        assert rejected("currency_minor_units", value, currency="USD")["reason"] == "invalid_amount"

    def test_it_rejects_negative_amounts_unless_allowed(self):
        assert rejected("currency_minor_units", "-5.00", currency="USD")["reason"] == "negative"
        assert run("currency_minor_units", "-5.00", currency="USD", allow_negative=True) == -500

    def test_it_rejects_amounts_beyond_exact_json_integers(self):
        assert rejected("currency_minor_units", 10**17, currency="USD")["reason"] == "out_of_range"

    def test_it_normalizes_the_object_form_with_currency_from_value(self):
        result = run("currency_minor_units", {"amount": "12.50", "currency": "USD"}, currency="from_value")
        assert result == {"amount_minor": 1250, "currency": "USD"}
        result = run("currency_minor_units", {"amount": 700, "currency": "jpy"}, currency="from_value")
        assert result == {"amount_minor": 700, "currency": "JPY"}

    def test_it_rejects_bad_object_forms(self):
        reason = lambda v: rejected("currency_minor_units", v, currency="from_value")["reason"]  # noqa: E731
        assert reason({"amount": "1", "currency": "XXX"}) == "unknown_currency"
        assert reason({"amount": "1", "currency": 840}) == "unknown_currency"
        assert reason({"amount": "1.001", "currency": "USD"}) == "too_many_decimals"
        assert reason({"amount": "1"}) == "invalid_amount_object"
        assert reason({"amount": "1", "currency": "USD", "note": "x"}) == "invalid_amount_object"
        assert reason("12.50") == "invalid_amount_object"


class TestRules:
    def test_it_checks_rules_at_publish_time(self):
        check_rules([
            {"pointer": "/date", "normalizer": "date"},
            {"pointer": "/price", "normalizer": "currency_minor_units", "options": {"currency": "USD"}},
            {"pointer": "/a~1b/0", "normalizer": "trim", "options": {}},
        ])

    @pytest.mark.parametrize(
        "rule, fragment",
        [
            ({"pointer": "/x", "normalizer": "fuzzy_date"}, "unknown normalizer"),
            ({"pointer": "x", "normalizer": "date"}, "must be empty or start with '/'"),
            ({"pointer": "/a~2", "normalizer": "date"}, "'~'"),
            ({"pointer": "/x", "normalizer": "datetime", "options": {"dst_gap": "guess"}}, "dst_gap"),
            ({"pointer": "/x", "normalizer": "date", "options": {"lenient": True}}, "no option"),
            ({"pointer": "/x", "normalizer": "identifier", "options": {"trim": 1}}, "trim"),
            ({"pointer": "/x", "normalizer": "currency_minor_units"}, "requires option 'currency'"),
            ({"pointer": "/x", "normalizer": "currency_minor_units", "options": {"currency": "XYZ"}}, "currency"),
            ({"pointer": "/x", "normalizer": "date", "extra": 1}, "unknown keys"),
            ({"normalizer": "date"}, "pointer"),
            ("date", "must be an object"),
        ],
    )
    def test_it_rejects_bad_rules_with_a_clear_message(self, rule, fragment):
        with pytest.raises(ValueError, match="rule #1") as info:
            check_rules([{"pointer": "/ok", "normalizer": "trim"}, rule])
        assert fragment in str(info.value)

    def test_it_normalizes_by_pointer_and_traces_in_rule_order(self):
        args = {"when": " Tomorrow ", "recipient": {"id": " Bob "}, "items": [{"p": "1.50"}]}
        rules = [
            {"pointer": "/when", "normalizer": "trim"},
            {"pointer": "/when", "normalizer": "date"},
            {"pointer": "/recipient/id", "normalizer": "identifier", "options": {"casefold": True}},
            FieldRule(pointer="/items/0/p", normalizer="currency_minor_units", options={"currency": "USD"}),
        ]
        out, trace = normalize_arguments(args, rules, ctx())
        assert out == {"when": "2026-07-20", "recipient": {"id": "bob"}, "items": [{"p": 150}]}
        assert trace == [
            {"pointer": "/when", "normalizer": "trim", "input": " Tomorrow ", "output": "Tomorrow"},
            {"pointer": "/when", "normalizer": "date", "input": "Tomorrow", "output": "2026-07-20"},
            {"pointer": "/recipient/id", "normalizer": "identifier", "input": " Bob ", "output": "bob"},
            {"pointer": "/items/0/p", "normalizer": "currency_minor_units", "input": "1.50", "output": 150},
        ]
        json.dumps(trace)  # the trace is stored as JSON

    def test_it_never_mutates_the_input(self):
        args = {"money": {"amount": "1.00", "currency": "EUR"}, "tags": [" a "]}
        before = copy.deepcopy(args)
        out, _ = normalize_arguments(
            args,
            [
                {"pointer": "/money", "normalizer": "currency_minor_units", "options": {"currency": "from_value"}},
                {"pointer": "/tags/0", "normalizer": "trim"},
            ],
            ctx(defaults={"calendar_id": "primary"}),
        )
        assert args == before
        assert out == {"money": {"amount_minor": 100, "currency": "EUR"}, "tags": ["a"], "calendar_id": "primary"}

    def test_a_compiled_rule_resolves_its_options_once_and_read_only(self):
        rule = FieldRule.from_dict({"pointer": "/a~1b/0", "normalizer": "identifier", "options": {"casefold": True}})
        assert rule.tokens == ("a/b", "0")
        assert rule.resolved["casefold"] is True and "trim" in rule.resolved  # defaults filled in
        with pytest.raises(TypeError):
            rule.resolved["casefold"] = False  # one rule serves every call: nobody may change it
        assert rule == FieldRule(pointer="/a~1b/0", normalizer="identifier", options={"casefold": True})

    def test_cached_rules_compile_once_per_key(self):
        rules = [{"pointer": "/when", "normalizer": "date"}]
        first = cached_rules(("tests.cached", 1), rules)
        assert cached_rules(("tests.cached", 1), rules) is first
        assert normalize_arguments({"when": "tomorrow"}, first, ctx())[0] == {"when": "2026-07-20"}
        assert cached_rules(("tests.cached", 2), []) == ()

    def test_a_rejection_names_the_rule_and_the_normalizer(self):
        with pytest.raises(NormalizationRejected) as info:
            normalize_arguments({"when": "someday"}, [{"pointer": "/when", "normalizer": "date"}], ctx())
        assert (info.value.pointer, info.value.normalizer) == ("/when", "date")

    def test_it_skips_rules_whose_pointer_is_absent(self):
        rules = [{"pointer": p, "normalizer": "date"} for p in ("/missing", "/a/b", "/list/5", "/list/-", "/s/x")]
        out, trace = normalize_arguments({"a": {}, "list": [], "s": "str"}, rules, ctx())
        assert out == {"a": {}, "list": [], "s": "str"} and trace == []

    def test_it_applies_and_records_defaults_before_the_rules(self):
        context = ctx(defaults={"start": "tomorrow 09:00", "duration_minutes": 10, "a/b": "x"})
        rules = [{"pointer": "/start", "normalizer": "datetime"}]
        out, trace = normalize_arguments({"duration_minutes": 30}, rules, context)
        assert out == {"duration_minutes": 30, "start": "2026-07-20T09:00:00+08:00", "a/b": "x"}
        assert trace == [
            {"pointer": "/a~1b", "normalizer": "default", "input": None, "output": "x"},
            {"pointer": "/start", "normalizer": "default", "input": None, "output": "tomorrow 09:00"},
            {"pointer": "/start", "normalizer": "datetime", "input": "tomorrow 09:00",
             "output": "2026-07-20T09:00:00+08:00"},
        ]

    def test_it_reports_the_rule_pointer_when_rejecting(self):
        with pytest.raises(NormalizationRejected) as info:
            normalize_arguments({"r": {"d": "soonish"}}, [{"pointer": "/r/d", "normalizer": "date"}], ctx())
        assert info.value.as_dict() == {
            "code": "normalization_rejected",
            "pointer": "/r/d",
            "normalizer": "date",
            "reason": "unrecognized_date",
            "message": "'soonish' is not a recognized date",
        }

    def test_it_normalizes_the_worked_example(self):
        raw = {"calendar_id": " primary ", "title": "带护照", "start": "tomorrow 09:00", "duration_minutes": 10}
        rules = [
            {"pointer": "/calendar_id", "normalizer": "identifier"},
            {"pointer": "/start", "normalizer": "datetime"},
        ]
        out, _ = normalize_arguments(raw, rules, ctx())
        assert out == {
            "calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10,
        }


class TestContext:
    def test_it_round_trips_through_its_record_with_identical_output(self):
        original = ctx(
            clock=datetime(2026, 11, 1, 5, 59, 59, 123456, tzinfo=timezone.utc),
            zone="America/New_York",
            locale="zh-CN",
            defaults={"when": "tomorrow 1:30am", "n": [1, {"x": None}]},
        )
        record = json.loads(json.dumps(original.to_record()))
        assert record["normalizers_version"] == NORMALIZERS_VERSION
        assert record["clock"] == "2026-11-01T05:59:59.123456+00:00"
        restored = NormalizationContext.from_record(record)
        assert restored == original
        rules = [{"pointer": "/when", "normalizer": "datetime", "options": {"dst_fold": "later"}}]
        assert normalize_arguments({}, rules, restored) == normalize_arguments({}, rules, original)

    def test_it_refuses_a_record_from_another_normalizers_version(self):
        record = ctx().to_record() | {"normalizers_version": "0"}
        with pytest.raises(ValueError, match="version"):
            NormalizationContext.from_record(record)

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"clock": datetime(2026, 7, 19, 14, 0), "timezone": SHANGHAI},
            {"clock": SPEC_CLOCK, "timezone": "Mars/Olympus_Mons"},
            {"clock": SPEC_CLOCK, "timezone": ""},
            {"clock": SPEC_CLOCK, "timezone": SHANGHAI, "defaults": {"x": float("nan")}},
            {"clock": SPEC_CLOCK, "timezone": SHANGHAI, "defaults": {"x": object()}},
        ],
    )
    def test_it_refuses_an_incomplete_context(self, kwargs):
        with pytest.raises(ValueError):
            NormalizationContext(**kwargs)

    def test_it_does_not_follow_later_changes_to_the_defaults_dict(self):
        defaults = {"a": 1}
        context = ctx(defaults=defaults)
        defaults["a"] = 2
        assert context.to_record()["defaults"] == {"a": 1}


# ----------------------------------------------------------------------------------------------
# Property: deterministic and idempotent over the whole grammar.
# ----------------------------------------------------------------------------------------------

# Offsets in whole minutes from 1929 on (the grammar reaches ~70 years around 2000..2100).
ZONES = [
    "UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Sydney",
    "Asia/Kolkata", "Asia/Kathmandu", "Pacific/Chatham", "Pacific/Apia", "America/Sao_Paulo",
]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
N = st.integers(min_value=0, max_value=3660).map(str)
UNIT = st.sampled_from(["day", "days", "week", "weeks"])

date_expressions = st.one_of(
    st.sampled_from(["today", "tomorrow", "yesterday"]),
    st.sampled_from(WEEKDAYS),
    st.sampled_from(WEEKDAYS).map("next {}".format),
    st.tuples(N, UNIT).map(lambda t: f"in {t[0]} {t[1]}"),
    st.tuples(N, UNIT).map(lambda t: f"{t[0]} {t[1]} ago"),
    st.dates(min_value=datetime(1950, 1, 1).date(), max_value=datetime(2150, 12, 31).date()).map(str),
)
times = st.one_of(
    st.tuples(st.integers(0, 23), st.integers(0, 59)).map(lambda t: f"{t[0]:02d}:{t[1]:02d}"),
    st.tuples(st.integers(1, 12), st.sampled_from(["am", "pm"])).map(lambda t: f"{t[0]}{t[1]}"),
)
datetime_expressions = st.tuples(date_expressions, st.sampled_from([" ", " at "]), times).map("".join)
clocks = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 12, 31), timezones=st.just(timezone.utc)
)


@settings(max_examples=300, deadline=None)
@given(
    clock=clocks,
    zone=st.sampled_from(ZONES),
    case=st.one_of(
        st.tuples(st.just("date"), date_expressions, st.just({})),
        st.tuples(
            st.just("datetime"),
            datetime_expressions,
            st.fixed_dictionaries(
                {"dst_gap": st.just("shift_forward"), "dst_fold": st.sampled_from(["earlier", "later"])}
            ),
        ),
    ),
)
def test_it_is_deterministic_and_idempotent_over_the_grammar(clock, zone, case):
    name, expression, options = case
    context = ctx(clock, zone)
    first = REGISTRY[name](expression, context, options)
    assert REGISTRY[name](expression, context, options) == first
    assert REGISTRY[name](first, context, options) == first
    # The recorded context reproduces the output, and so does an unrelated later clock for
    # the already-explicit value.
    assert REGISTRY[name](expression, NormalizationContext.from_record(context.to_record()), options) == first
    assert REGISTRY[name](first, ctx(clock + timedelta(days=400), zone), options) == first
