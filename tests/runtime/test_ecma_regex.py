"""ECMA-262 patterns on the `regex` package: the meaning differences from Python's `re`."""
from __future__ import annotations

import pytest

from toolops.runtime.ecma_regex import EcmaRegexError, compile_pattern, is_ecma_regex, translate
from toolops.runtime.validation import SchemaRefused, check_schema, compile_validator


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        (r"^\d$", "5", True), (r"^\d$", "\u0665", False),  # ARABIC-INDIC FIVE: a digit in `re`
        (r"^\D$", "\u0665", True),
        (r"^\w$", "é", False), (r"^\W$", "é", True),
        (r"^\s$", "\ufeff", True), (r"^\s$", "\u2003", True), (r"^\s$", "\u200b", False),
        (r"^\S$", "\ufeff", False),
        (r"^\p{Letter}+$", "Straße", True), (r"^\p{L}+$", "123", False), (r"^\P{L}$", "1", True),
        (r"^\p{Script=Greek}+$", "αβγ", True),
        (r"^abc$", "abc\n", False),  # `re`'s $ matches before a trailing newline
        (r"^.$", "\u2028", False), (r"^.$", "\n", False), (r"^.$", "😀", True),
        (r"^\cJ$", "\n", True), (r"^\u{1F600}$", "😀", True), (r"^\uD83D\uDE00$", "😀", True),
        (r"^\x41$", "A", True), (r"^\0$", "\x00", True),
        (r"\bfoo\b", "é foo", True), (r"\bfoo", "éfoo", True),  # ECMA \b: ASCII word characters
        (r"^[\d-]+$", "1-2", True), (r"^[^\s]+$", "a\ufeffb", False), (r"^[\S]+$", "ab", True),
        (r"^[\w.]+$", "a.b", True), (r"^[a-z\u00e9]+$", "é", True), (r"^[\b]$", "\x08", True),
        (r"^[]$", "", False), (r"^[^]$", "\n", True),
        (r"(?<y>\d{4})-\k<y>", "2024-2024", True), (r"(?<=a+)b", "aaab", True),
        (r"^(a)\1$", "aa", True),
        (r"^[a-zA-Z0-9\-\_]+$", "a_b-c", True),  # Annex B identity escapes (lenient pattern)
        (r"^a{2}$", "aa", True), (r"^a{2,}?$", "aaa", True), (r"{", "{", True),
    ],
)
def test_it_matches_with_ecma_262_meaning(pattern, text, matches):
    assert (compile_pattern(pattern).search(text) is not None) is matches


@pytest.mark.parametrize(
    "pattern",
    [r"\a", r"\e", "(?P<n>x)", "(?P<n>a)(?P=n)", "(?#c)a", "(?i)abc", "a**", "a*+", "(", ")",
     "[a", r"\1", r"\k<n>", "(?<n>a)(?<n>b)", "a{2,1}", r"[z-a]", r"\p{", r"\c1", "\\"],
)
def test_it_refuses_what_is_not_ecma_262(pattern):
    assert not is_ecma_regex(pattern)
    with pytest.raises(EcmaRegexError):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", [r"\_", r"\-", "a{", "}", "]", r"[\d-z]"])
def test_it_accepts_annex_b_leniencies_in_patterns_but_not_in_the_regex_format(pattern):
    compile_pattern(pattern)  # lenient: what `pattern` runs
    assert not is_ecma_regex(pattern)  # strict u-mode: what format "regex" asserts


def test_it_refuses_an_unknown_unicode_property_at_publish():
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": r"\p{NoSuchProperty}"}}}
    with pytest.raises(SchemaRefused) as caught:
        check_schema(schema)
    assert caught.value.reason == "invalid_schema"


def test_it_uses_ecma_patterns_for_additional_and_unevaluated_properties():
    schema = {
        "type": "object",
        "patternProperties": {r"^\d+$": {"type": "integer"}},
        "additionalProperties": False,
    }
    validator = compile_validator(schema)
    assert validator.validate({"42": 1}) == []
    assert [i.keyword for i in validator.validate({"\u0664\u0662": 1})] == ["additionalProperties"]
    unevaluated = {
        "type": "object",
        "allOf": [{"patternProperties": {r"^\p{Lu}": {"type": "string"}}}],
        "unevaluatedProperties": False,
    }
    validator = compile_validator(unevaluated)
    assert validator.validate({"Ä": "x"}) == []
    assert [i.keyword for i in validator.validate({"ä": "x"})] == ["unevaluatedProperties"]


def test_it_translates_deterministically():
    assert translate(r"^\d+$") == translate(r"^\d+$")
    assert "\\p{Letter}" in translate(r"\p{Letter}")
