"""The strict parser: one distinct reason per rejection, limits, never another exception."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolops.runtime.parser import DEFAULT_LIMITS, ParseRejected, ParserLimits, parse_strict, parser_record

REASONS = [
    (b"\xef\xbb\xbf{}", "bom"),
    (b'{"a": "\xff"}', "invalid_utf8"),
    (b"   ", "empty"),
    (b"", "empty"),
    (b"[" * 65 + b"]" * 65, "too_deep"),
    (b'{"a": {"b": 1, "b": 2}}', "duplicate_key"),
    (b'{"a": NaN}', "non_finite_number"),
    (b"[-Infinity]", "non_finite_number"),
    (b"[1e999]", "number_out_of_range"),
    (b"[9007199254740993]", "number_out_of_range"),  # 2**53 + 1: no double holds it
    (b'["\\ud800"]', "invalid_unicode_escape"),
    (b"{} x", "trailing_data"),
    (b"{'a': 1}", "syntax_error"),
    (b'["a\x01"]', "syntax_error"),
]


@pytest.mark.parametrize("raw,reason", REASONS)
def test_it_rejects_with_a_distinct_stable_reason(raw, reason):
    with pytest.raises(ParseRejected) as info:
        parse_strict(raw)
    assert info.value.reason == reason
    assert info.value.as_dict()["code"] == "parse_rejected"


def test_it_checks_size_before_anything_else():
    with pytest.raises(ParseRejected) as info:
        parse_strict(b"\xff" * 11, ParserLimits(max_bytes=10))
    assert info.value.reason == "too_large"


def test_it_accepts_exactly_the_configured_depth():
    assert parse_strict(b"[[[1]]]", ParserLimits(max_depth=3)) == [[[1]]]
    with pytest.raises(ParseRejected) as info:
        parse_strict(b"[[[[1]]]]", ParserLimits(max_depth=3))
    assert info.value.reason == "too_deep"


def test_it_ignores_brackets_inside_strings_when_measuring_depth():
    raw = json.dumps({"a": "[" * 500 + '\\"{' * 50}).encode()
    assert parse_strict(raw)["a"].startswith("[[[")


def test_it_rejects_a_hundred_thousand_open_arrays_without_recursion():
    with pytest.raises(ParseRejected) as info:
        parse_strict(b"[" * 100_000)
    assert info.value.reason == "too_deep"


def test_it_rejects_a_duplicate_key_deep_inside_arrays():
    with pytest.raises(ParseRejected) as info:
        parse_strict(b'[[{"x": [{"k": 1, "k": 1}]}]]')
    assert info.value.reason == "duplicate_key"


def test_it_keeps_a_large_integer_a_double_holds_exactly_as_that_double():
    assert parse_strict(b"[10000000000000000, 1e16]") == [1e16, 1e16]
    assert parse_strict(b"[9007199254740992]") == [float(2**53)]


def test_it_allows_the_largest_safe_integers_and_underflow():
    assert parse_strict(b"[9007199254740991, -9007199254740991, 1e-400]") == [2**53 - 1, -(2**53 - 1), 0.0]


def test_it_records_its_name_version_and_limits():
    assert parser_record() == {"name": "toolops.strict_json", "version": "1", "max_bytes": 1_048_576, "max_depth": 64}
    assert parser_record(ParserLimits(max_bytes=5, max_depth=2))["max_depth"] == 2
    assert DEFAULT_LIMITS == ParserLimits()


@settings(max_examples=400)
@given(st.binary(max_size=2000))
def test_it_never_raises_anything_but_its_own_rejection(raw):
    try:
        parse_strict(raw)
    except ParseRejected:
        pass


@settings(max_examples=200)
@given(st.text(alphabet='[]{}",:0123456789.eE-+ \\ntrufalsn', max_size=300))
def test_it_never_raises_on_json_like_noise(text):
    try:
        parse_strict(text.encode())
    except ParseRejected:
        pass


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_it_round_trips_every_json_value(value):
    assert parse_strict(json.dumps(value).encode()) == value
