"""JSONTestSuite through the whole API (SPEC §3 layer 1): n_ files are recorded PARSE_REJECTED,
y_ files get past the parser — except the two duplicate-key files, which are must-reject for us.

The pure parser is covered file by file in tests/runtime/test_jsontestsuite.py; here the point
is that the bytes survive HTTP + base64 + the database exactly and that the recorded state and
error agree with the parser.
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

N_FILES = [f for f in FILES if f.startswith("n_")] or ["<missing>"]
# Includes y_string_null_escape / y_object_escaped_null_in_key: U+0000 must survive PostgreSQL too.
Y_FILES = [f for f in FILES if f.startswith("y_") and f not in Y_DUPLICATE_KEYS] or ["<missing>"]


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


def _reason(raw: bytes) -> str:
    try:
        parse_strict(raw)
    except ParseRejected as exc:
        return exc.reason
    raise AssertionError("the strict parser accepted it")


def test_it_sees_the_whole_corpus():
    require_corpus("jsontestsuite")
    assert (len([f for f in FILES if f.startswith("n_")]), len([f for f in FILES if f.startswith("y_")])) == (188, 95)


@pytest.mark.parametrize("name", N_FILES)
def test_it_records_every_n_file_as_parse_rejected_with_its_exact_bytes(post_file, name):
    inv, raw = post_file(name)
    assert inv["state"] == "PARSE_REJECTED"
    assert inv["error"]["code"] == "parse_rejected"
    assert inv["error"]["detail"]["reason"] == _reason(raw)
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw
    assert inv["proposal"]["parsed"] is None and inv["digest"] is None


@pytest.mark.parametrize("name", Y_FILES)
def test_it_gets_every_y_file_past_the_parser(post_file, name):
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
