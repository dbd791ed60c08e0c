"""JSONTestSuite through the whole API (docs/concepts/admission.md layer 1), on a sample: n_ files are recorded
PARSE_REJECTED, y_ files get past the parser — except the two duplicate-key files, which are
must-reject for us — and i_ files are decided as the parser decides them.

Every corpus file goes through the pure parser in tests/runtime/test_jsontestsuite.py. Here the
point is that the bytes survive HTTP + base64 + the database exactly and that the recorded state
and error agree with the parser; that does not depend on which syntax error a file holds, so a
sample is posted: at least one file of every (prefix, parser outcome) pair the corpus has —
``test_the_sample_spans_every_outcome_of_the_corpus`` fails if the corpus grows a new one — plus
the files that stress the storage path (U+0000 in a string and a key, non-ASCII, a 100 000-byte
body, a lone value instead of an object).
"""
from __future__ import annotations

import base64

import pytest

from invocations_app import runs
from invocations_app.models import Proposal
from tests.conftest import CORPORA, require_corpus
from toolops.runtime.parser import ParseRejected, parse_strict

pytestmark = pytest.mark.django_db

CORPUS_DIR = CORPORA / "jsontestsuite" / "test_parsing"
FILES = sorted(p.name for p in CORPUS_DIR.iterdir()) if CORPUS_DIR.is_dir() else []
Y_DUPLICATE_KEYS = {"y_object_duplicated_key.json", "y_object_duplicated_key_and_value.json"}

N_SAMPLE = [
    "n_array_comma_after_close.json",  # trailing_data
    "n_array_double_comma.json",  # syntax_error
    "n_array_invalid_utf8.json",  # invalid_utf8
    "n_number_NaN.json",  # non_finite_number
    "n_object_trailing_comment.json",  # trailing_data
    "n_object_unquoted_key.json",  # syntax_error
    "n_single_space.json",  # empty
    "n_string_unescaped_ctrl_char.json",  # syntax_error (a raw U+0000 inside a string)
    "n_structure_100000_opening_arrays.json",  # too_deep, a 100 000-byte body
    "n_structure_UTF8_BOM_no_data.json",  # bom
]
Y_SAMPLE = [
    "y_array_empty.json",
    "y_number_real_capital_e.json",
    "y_object_basic.json",
    "y_object_escaped_null_in_key.json",  # U+0000 must survive PostgreSQL too
    "y_string_accepted_surrogate_pair.json",
    "y_string_null_escape.json",
    "y_string_utf8.json",
    "y_structure_lonely_null.json",
]
I_SAMPLE = [
    "i_number_huge_exp.json",  # number_out_of_range
    "i_number_real_underflow.json",  # accepted
    "i_number_too_big_pos_int.json",  # accepted
    "i_string_UTF-16LE_with_BOM.json",  # invalid_utf8
    "i_string_invalid_lonely_surrogate.json",  # invalid_unicode_escape
    "i_structure_500_nested_arrays.json",  # too_deep
    "i_structure_UTF-8_BOM_empty_object.json",  # bom
]


def _outcome(name: str) -> str:
    """The strict parser's decision on one corpus file: "accept" or its rejection reason."""
    try:
        parse_strict((CORPUS_DIR / name).read_bytes())
    except ParseRejected as exc:
        return exc.reason
    return "accept"


def _reason(raw: bytes) -> str:
    try:
        parse_strict(raw)
    except ParseRejected as exc:
        return exc.reason
    raise AssertionError("the strict parser accepted it")


@pytest.fixture
def post_file(agent, weather):
    """POST one corpus file as ``arguments_b64`` to a fresh model call; returns (invocation, raw bytes)."""
    corpus = require_corpus("jsontestsuite") / "test_parsing"
    # Run and model call straight from the services (two fewer HTTP round trips per file);
    # the proposal itself goes through the API.
    run = runs.run_create(
        subject=agent.subject, budgets={}, timezone_name="Asia/Shanghai", locale="en-US", metadata={}, trace=None
    )
    call_id = str(runs.model_call_create(run=run, tool_refs=["weather.get_forecast@1"], fmt="openai", context=[]).pk)

    def post(name: str):
        raw = (corpus / name).read_bytes()
        resp = agent.post(
            f"/api/v1/model-calls/{call_id}/proposals",
            {"proposal_id": name, "name": "weather.get_forecast@1", "arguments_b64": base64.b64encode(raw).decode()},
        )
        assert resp.status_code == 201, (resp.status_code, resp.content[:300])
        stored = bytes(Proposal.objects.get(model_call_id=call_id, proposal_id=name).arguments_bytes)
        assert stored == raw
        return resp.json(), raw

    return post


def test_it_sees_the_whole_corpus():
    require_corpus("jsontestsuite")
    assert (len([f for f in FILES if f.startswith("n_")]), len([f for f in FILES if f.startswith("y_")])) == (188, 95)


def test_the_sample_spans_every_outcome_of_the_corpus():
    """Every (prefix, outcome) pair the parser produces on the corpus is posted at least once."""
    require_corpus("jsontestsuite")
    sample = N_SAMPLE + Y_SAMPLE + sorted(Y_DUPLICATE_KEYS) + I_SAMPLE
    assert set(sample) <= set(FILES)
    assert all(name.startswith(prefix) for prefix, names in (("n_", N_SAMPLE), ("y_", Y_SAMPLE), ("i_", I_SAMPLE))
               for name in names)
    assert not Y_DUPLICATE_KEYS & set(Y_SAMPLE)
    everywhere = {(name[:2], _outcome(name)) for name in FILES}
    sampled = {(name[:2], _outcome(name)) for name in sample}
    assert sampled == everywhere


@pytest.mark.parametrize("name", N_SAMPLE)
def test_it_records_an_n_file_as_parse_rejected_with_its_exact_bytes(post_file, name):
    inv, raw = post_file(name)
    assert inv["state"] == "PARSE_REJECTED"
    assert inv["error"]["code"] == "parse_rejected"
    assert inv["error"]["detail"]["reason"] == _reason(raw)
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw
    assert inv["proposal"]["parsed"] is None and inv["digest"] is None


@pytest.mark.parametrize("name", Y_SAMPLE)
def test_it_gets_a_y_file_past_the_parser(post_file, name):
    inv, raw = post_file(name)
    assert inv["state"] != "PARSE_REJECTED", inv["error"]
    # Mostly VALIDATION_REJECTED by the weather schema; the parsed value is recorded either way.
    assert inv["state"] in {"VALIDATION_REJECTED", "AUTHORIZED"}
    assert inv["proposal"]["parsed"] == parse_strict(raw)
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw


@pytest.mark.parametrize("name", sorted(Y_DUPLICATE_KEYS))
def test_it_rejects_the_duplicate_key_y_files_as_spec_3_requires(post_file, name):
    inv, raw = post_file(name)
    assert inv["state"] == "PARSE_REJECTED"
    assert inv["error"]["code"] == "parse_rejected"
    assert inv["error"]["detail"]["reason"] == "duplicate_key"
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw


@pytest.mark.parametrize("name", I_SAMPLE)
def test_it_records_an_i_file_as_the_parser_decides_it(post_file, name):
    inv, raw = post_file(name)
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw
    if _outcome(name) == "accept":
        assert inv["state"] in {"VALIDATION_REJECTED", "AUTHORIZED"}, inv["error"]
        assert inv["proposal"]["parsed"] == parse_strict(raw)
    else:
        assert inv["state"] == "PARSE_REJECTED"
        assert inv["error"]["code"] == "parse_rejected"
        assert inv["error"]["detail"]["reason"] == _outcome(name)
        assert inv["proposal"]["parsed"] is None and inv["digest"] is None
