"""JSONTestSuite through the strict parser: y_ accepted, n_ rejected cleanly, i_ decided below."""
from __future__ import annotations

import pytest

from tests.conftest import CORPORA, require_corpus
from toolops.runtime.parser import ParseRejected, parse_strict

CORPUS_DIR = CORPORA / "jsontestsuite" / "test_parsing"
FILES = sorted(p.name for p in CORPUS_DIR.iterdir()) if CORPUS_DIR.is_dir() else []

# docs/concepts/admission.md: duplicate member names are must-reject for ToolOps, though RFC 8259 tolerates them.
Y_REJECTED = {"y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"}

# Our decision for every implementation-defined file, and why:
# - invalid UTF-8, UTF-16 and Latin-1 input: reject (invalid_utf8) — arguments are UTF-8 text;
# - \u escapes leaving a lone surrogate: reject (invalid_unicode_escape) — not encodable as UTF-8,
#   so neither storable as text nor canonicalizable (RFC 8785);
# - numbers overflowing a double, or integer literals no double holds exactly: reject
#   (number_out_of_range) — RFC 8785 needs IEEE-754 doubles and the digest must not silently
#   round; 1e20 written out in digits is exactly a double, so i_number_too_big_pos_int is accepted;
# - underflow to 0.0 (1e-400 style): accept — the value is a finite double, as every JSON peer reads it;
# - 500 nested arrays: reject (too_deep) under the default limit of 64;
# - a UTF-8 BOM: reject (bom) — RFC 8259 §8.1 forbids emitting one.
I_DECISIONS = {
    "i_number_double_huge_neg_exp.json": "accept",
    "i_number_huge_exp.json": "reject:number_out_of_range",
    "i_number_neg_int_huge_exp.json": "reject:number_out_of_range",
    "i_number_pos_double_huge_exp.json": "reject:number_out_of_range",
    "i_number_real_neg_overflow.json": "reject:number_out_of_range",
    "i_number_real_pos_overflow.json": "reject:number_out_of_range",
    "i_number_real_underflow.json": "accept",
    "i_number_too_big_neg_int.json": "reject:number_out_of_range",
    "i_number_too_big_pos_int.json": "accept",
    "i_number_very_big_negative_int.json": "reject:number_out_of_range",
    "i_object_key_lone_2nd_surrogate.json": "reject:invalid_unicode_escape",
    "i_string_1st_surrogate_but_2nd_missing.json": "reject:invalid_unicode_escape",
    "i_string_1st_valid_surrogate_2nd_invalid.json": "reject:invalid_unicode_escape",
    "i_string_UTF-16LE_with_BOM.json": "reject:invalid_utf8",
    "i_string_UTF-8_invalid_sequence.json": "reject:invalid_utf8",
    "i_string_UTF8_surrogate_U+D800.json": "reject:invalid_utf8",
    "i_string_incomplete_surrogate_and_escape_valid.json": "reject:invalid_unicode_escape",
    "i_string_incomplete_surrogate_pair.json": "reject:invalid_unicode_escape",
    "i_string_incomplete_surrogates_escape_valid.json": "reject:invalid_unicode_escape",
    "i_string_invalid_lonely_surrogate.json": "reject:invalid_unicode_escape",
    "i_string_invalid_surrogate.json": "reject:invalid_unicode_escape",
    "i_string_invalid_utf-8.json": "reject:invalid_utf8",
    "i_string_inverted_surrogates_U+1D11E.json": "reject:invalid_unicode_escape",
    "i_string_iso_latin_1.json": "reject:invalid_utf8",
    "i_string_lone_second_surrogate.json": "reject:invalid_unicode_escape",
    "i_string_lone_utf8_continuation_byte.json": "reject:invalid_utf8",
    "i_string_not_in_unicode_range.json": "reject:invalid_utf8",
    "i_string_overlong_sequence_2_bytes.json": "reject:invalid_utf8",
    "i_string_overlong_sequence_6_bytes.json": "reject:invalid_utf8",
    "i_string_overlong_sequence_6_bytes_null.json": "reject:invalid_utf8",
    "i_string_truncated-utf-8.json": "reject:invalid_utf8",
    "i_string_utf16BE_no_BOM.json": "reject:invalid_utf8",
    "i_string_utf16LE_no_BOM.json": "reject:invalid_utf8",
    "i_structure_500_nested_arrays.json": "reject:too_deep",
    "i_structure_UTF-8_BOM_empty_object.json": "reject:bom",
}


def _outcome(name: str) -> str:
    try:
        parse_strict((CORPUS_DIR / name).read_bytes())
    except ParseRejected as exc:
        return f"reject:{exc.reason}"
    return "accept"


def test_it_sees_the_whole_corpus():
    require_corpus("jsontestsuite")
    counts = {p: sum(f.startswith(p) for f in FILES) for p in ("y_", "n_", "i_")}
    assert counts == {"y_": 95, "n_": 188, "i_": 35}
    assert set(I_DECISIONS) == {f for f in FILES if f.startswith("i_")}


@pytest.mark.parametrize("name", [f for f in FILES if f.startswith("y_")] or ["<missing>"])
def test_it_accepts_every_y_file_except_duplicate_keys(name):
    require_corpus("jsontestsuite")
    expected = "reject:duplicate_key" if name in Y_REJECTED else "accept"
    assert _outcome(name) == expected


@pytest.mark.parametrize("name", [f for f in FILES if f.startswith("n_")] or ["<missing>"])
def test_it_rejects_every_n_file_with_its_own_error(name):
    require_corpus("jsontestsuite")
    assert _outcome(name).startswith("reject:")


@pytest.mark.parametrize("name", sorted(I_DECISIONS))
def test_it_decides_every_i_file_as_documented(name):
    require_corpus("jsontestsuite")
    assert _outcome(name) == I_DECISIONS[name]
