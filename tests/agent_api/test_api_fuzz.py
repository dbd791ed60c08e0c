"""Fuzzing the proposals endpoint: arbitrary bytes, text, names and body shapes never make a 5xx.

Every example posts to the same model call (the function-scoped fixtures run once per test, not
once per example), with a fresh ``proposal_id``; rows accumulate inside the test's transaction.
The oracle for argument bytes is the pure strict parser: the API must agree with it exactly and
must store the bytes exactly as sent.
"""
from __future__ import annotations

import base64
import itertools
import json

import pytest
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invocations_app.models import Invocation, Proposal
from agent_api.serializers import MAX_COUNT_BUDGET, MAX_RESULT_BYTES_BUDGET, MAX_WALL_SECONDS
from toolops.runtime.parser import ParseRejected, parse_strict

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Where admission of a read-only tool settles (docs/concepts/lifecycle.md): a rejection terminal, or AUTHORIZED.
ADMISSION_OUTCOMES = {"PARSE_REJECTED", "VALIDATION_REJECTED", "AUTHORIZED", "AUTHORIZATION_REJECTED"}
VISIBLE_NAMES = {"weather.get_forecast@1", "weather-get_forecast_v1"}
GOOD_ARGS = '{"city": "Paris", "date": "2026-07-20"}'

_ids = itertools.count(1)


def _pid(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


@pytest.fixture
def call(agent, weather):
    """One model call that sees weather.get_forecast@1; the agent holds weather.read on any city."""
    # A client that answers 500 instead of raising, so a server error is an assertion, not a crash.
    agent.client.raise_request_exception = False
    run = agent.run()
    return agent.model_call(run["id"])["id"]


def _post_raw(agent, call_id: str, raw: bytes | str, **headers):
    return agent.client.post(
        f"/api/v1/model-calls/{call_id}/proposals", raw, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agent.token}", **headers,
    )


def _post(agent, call_id: str, body, **headers):
    return _post_raw(agent, call_id, json.dumps(body), **headers)


def _stored_bytes(call_id: str, proposal_id: str) -> bytes:
    """Read back from the database, not from the response (which is built from memory)."""
    return bytes(Proposal.objects.get(model_call_id=call_id, proposal_id=proposal_id).arguments_bytes)


def _expected_parse(raw: bytes) -> str | None:
    """The strict parser's verdict: the rejection reason, or None when it accepts."""
    try:
        parse_strict(raw)
    except ParseRejected as exc:
        return exc.reason
    return None


def _assert_problem(resp) -> None:
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.content[:300])
    assert resp["Content-Type"] == "application/problem+json"
    body = resp.json()
    assert isinstance(body.get("code"), str) and body["code"]
    assert body["status"] == resp.status_code


# --------------------------------------------------------------------------- strategies

# JSON text the weather schema may or may not accept, so fuzzing also reaches the later layers.
_FIELD_VALUES = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(["2026-07-20", "tomorrow", "today", "next monday", "in 3 days", "2026-02-30", "Paris", " Paris "]),
    st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.booleans(),
)
_WEATHERISH = st.dictionaries(
    st.sampled_from(["city", "date", "units", "role", ""]), _FIELD_VALUES, max_size=4
).map(lambda d: json.dumps(d, ensure_ascii=False))
_MUTATED = st.tuples(_WEATHERISH, st.integers(min_value=0, max_value=60), st.binary(min_size=1, max_size=4)).map(
    lambda t: (t[0].encode("utf-8")[: t[1]] + t[2] + t[0].encode("utf-8")[t[1]:])
)
ARGUMENT_BYTES = st.one_of(
    st.binary(max_size=600),
    _WEATHERISH.map(lambda s: s.encode("utf-8")),
    _MUTATED,
)
# Any text at all, NUL and lone surrogates included: the raw string is evidence, kept as sent.
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()))
ARGUMENT_TEXT = st.one_of(ANY_TEXT, _WEATHERISH)
NAMES = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=500),
    st.sampled_from(sorted(VISIBLE_NAMES)),
    st.sampled_from(sorted(VISIBLE_NAMES)).flatmap(
        lambda n: st.sampled_from([n.upper(), n + " ", " " + n, n + "\n", n.replace("1", "01"), n[:-1], n + "0"])
    ),
)
_JSON_LEAVES = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
_JSON_ANY = st.recursive(
    _JSON_LEAVES,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(["proposal_id", "name", "arguments", "arguments_b64", "tool_calls", "id", "type", "function"])
        | st.text(max_size=8),
        children,
        max_size=5,
    ),
    max_leaves=15,
)
_TOOL_CALL = st.fixed_dictionaries(
    {"id": st.one_of(st.text(max_size=10), st.integers(), st.none())},
    optional={
        "type": st.sampled_from(["function", "tool", ""]) | _JSON_LEAVES,
        "function": st.fixed_dictionaries(
            {},
            optional={"name": st.sampled_from(sorted(VISIBLE_NAMES)) | _JSON_ANY, "arguments": ARGUMENT_TEXT | _JSON_ANY},
        )
        | _JSON_ANY,
    },
)
BODIES = st.one_of(
    _JSON_ANY,
    st.fixed_dictionaries(
        {},
        optional={
            "proposal_id": st.text(max_size=30) | _JSON_LEAVES,
            "name": st.sampled_from(sorted(VISIBLE_NAMES)) | _JSON_LEAVES,
            "arguments": ARGUMENT_TEXT | _JSON_ANY,
            "arguments_b64": ARGUMENT_BYTES.map(lambda b: base64.b64encode(b).decode()) | st.text(max_size=20),
        },
    ),
    st.fixed_dictionaries({"tool_calls": st.lists(_TOOL_CALL, max_size=3) | _JSON_ANY}),
)


# --------------------------------------------------------------------------- argument bytes


@FUZZ
@given(raw=ARGUMENT_BYTES)
def test_it_records_arbitrary_argument_bytes_exactly_and_settles_them(agent, call, raw):
    pid = _pid("b64")
    resp = _post(agent, call, {"proposal_id": pid, "name": "weather.get_forecast@1", "arguments_b64": base64.b64encode(raw).decode()})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    inv = resp.json()
    assert inv["state"] in ADMISSION_OUTCOMES
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == raw
    assert _stored_bytes(call, pid) == raw


@FUZZ
@given(raw=ARGUMENT_BYTES)
def test_it_agrees_with_the_strict_parser_on_every_byte_string(agent, call, raw):
    pid = _pid("parse")
    inv = _post(agent, call, {"proposal_id": pid, "name": "weather-get_forecast_v1", "arguments_b64": base64.b64encode(raw).decode()}).json()
    reason = _expected_parse(raw)
    if reason is None:
        assert inv["state"] != "PARSE_REJECTED"
        assert inv["proposal"]["parsed"] == parse_strict(raw)
    else:
        assert inv["state"] == "PARSE_REJECTED"
        assert inv["error"]["code"] == "parse_rejected"
        assert inv["error"]["detail"]["reason"] == reason
        assert inv["digest"] is None and inv["normalized_arguments"] is None


@FUZZ
@given(text=ARGUMENT_TEXT)
def test_it_records_arbitrary_argument_text_as_its_utf8_bytes(agent, call, text):
    """Lone surrogates become their (invalid) UTF-8 bytes and the parser rejects them: recorded, not a 400."""
    pid = _pid("text")
    expected = text.encode("utf-8", "surrogatepass")
    resp = _post(agent, call, {"proposal_id": pid, "name": "weather.get_forecast@1", "arguments": text})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    inv = resp.json()
    assert inv["state"] in ADMISSION_OUTCOMES
    assert base64.b64decode(inv["proposal"]["arguments_bytes_b64"]) == expected
    assert _stored_bytes(call, pid) == expected
    if _expected_parse(expected) is not None:
        assert inv["state"] == "PARSE_REJECTED"


@FUZZ
@given(raw=ARGUMENT_BYTES)
def test_it_replays_the_same_bytes_with_200_and_the_same_invocation(agent, call, raw):
    body = {"proposal_id": _pid("replay"), "name": "weather.get_forecast@1", "arguments_b64": base64.b64encode(raw).decode()}
    first, again = _post(agent, call, body), _post(agent, call, body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert first.json()["state"] == again.json()["state"]


# --------------------------------------------------------------------------- names


@FUZZ
@given(name=NAMES)
def test_it_resolves_only_exact_visible_names_and_records_the_name_as_written(agent, call, name):
    pid = _pid("name")
    resp = _post(agent, call, {"proposal_id": pid, "name": name, "arguments": GOOD_ARGS})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    inv = resp.json()
    assert inv["proposal"]["name"] == name
    assert Proposal.objects.get(model_call_id=call, proposal_id=pid).name == name
    if name in VISIBLE_NAMES:
        assert (inv["state"], inv["tool"]) == ("AUTHORIZED", "weather.get_forecast@1")
    else:
        assert (inv["state"], inv["tool"]) == ("VALIDATION_REJECTED", None)
        assert inv["error"]["code"] == "unknown_tool"
        assert inv["error"]["detail"]["visible"] == ["weather.get_forecast@1"]


@pytest.mark.parametrize("name", ["", "weather\x00", "weather\ud800", "n" * 501])
def test_it_refuses_an_unstorable_name_as_problem_json(agent, call, name):
    """Blank, NUL, lone surrogate, over 500 chars: a malformed body (4xx), never a 500."""
    resp = _post(agent, call, {"proposal_id": _pid("badname"), "name": name, "arguments": GOOD_ARGS})
    _assert_problem(resp)
    assert resp.json()["code"] == "malformed_request"


# --------------------------------------------------------------------------- body shapes


@FUZZ
@given(body=BODIES)
def test_it_answers_any_json_body_with_201_200_or_a_problem(agent, call, body):
    resp = _post(agent, call, body)
    assert resp.status_code < 500, (resp.status_code, resp.content[:300])
    if resp.status_code in (200, 201):
        data = resp.json()
        invocations = data["invocations"] if "invocations" in data else [data]
        assert invocations and all(inv["state"] in ADMISSION_OUTCOMES for inv in invocations)
    else:
        _assert_problem(resp)


@FUZZ
@given(raw=st.binary(max_size=300) | st.text(max_size=300))
def test_it_answers_any_request_body_bytes_with_a_problem_or_a_proposal(agent, call, raw):
    resp = _post_raw(agent, call, raw)
    assert resp.status_code < 500, (resp.status_code, resp.content[:300])
    if resp.status_code not in (200, 201):
        _assert_problem(resp)


# --------------------------------------------------------------------------- edges found while fuzzing (regressions)


@pytest.mark.parametrize("raw", ["[" * 100_000 + "]" * 100_000, '{"a":' * 5_000 + "1" + "}" * 5_000])
def test_it_answers_a_hostile_deeply_nested_body_with_a_problem(agent, call, raw):
    resp = _post_raw(agent, call, raw)
    _assert_problem(resp)


@pytest.mark.parametrize("arguments", ['{"city": "\\u0000", "date": "2026-07-20"}', '["\\u0000"]', '{"\\u0000": 1}'])
def test_it_records_arguments_with_an_escaped_nul(agent, call, arguments):
    pid = _pid("nul_escape")
    resp = _post(agent, call, {"proposal_id": pid, "name": "weather.get_forecast@1", "arguments": arguments})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    assert resp.json()["state"] in ADMISSION_OUTCOMES
    assert _stored_bytes(call, pid) == arguments.encode()


def test_it_answers_an_over_long_idempotency_key_with_a_problem(agent, call):
    """Invocation.idempotency_key is varchar(255): a longer header is a 4xx, never a DataError 500."""
    resp = _post(
        agent, call, {"proposal_id": _pid("longkey"), "name": "weather.get_forecast@1", "arguments": GOOD_ARGS},
        HTTP_IDEMPOTENCY_KEY="k" * 256,
    )
    _assert_problem(resp)


def test_it_keeps_an_idempotency_key_of_255_characters_exactly(agent, call):
    key = "k" * 254 + "!"
    resp = _post(
        agent, call, {"proposal_id": _pid("key255"), "name": "weather.get_forecast@1", "arguments": GOOD_ARGS},
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert resp.status_code == 201, resp.content[:300]
    assert resp.json()["idempotency_key"] == key


def test_it_records_a_lone_surrogate_in_argument_text_as_parse_rejected(agent, call):
    pid = _pid("surrogate")
    resp = _post(agent, call, {"proposal_id": pid, "name": "weather.get_forecast@1", "arguments": '{"city": "\ud800"}'})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    inv = resp.json()
    assert inv["state"] == "PARSE_REJECTED"
    assert inv["error"]["detail"]["reason"] == "invalid_utf8"
    assert _stored_bytes(call, pid) == '{"city": "\ud800"}'.encode("utf-8", "surrogatepass")


def test_it_records_a_raw_nul_in_argument_text_as_parse_rejected(agent, call):
    pid = _pid("raw_nul")
    resp = _post(agent, call, {"proposal_id": pid, "name": "weather.get_forecast@1", "arguments": '{"city": "a\x00"}'})
    assert resp.status_code == 201, (resp.status_code, resp.content[:300])
    assert resp.json()["state"] == "PARSE_REJECTED"
    assert _stored_bytes(call, pid) == b'{"city": "a\x00"}'


# --------------------------------------------------------------------------- every other POST (issue 12 item 4)

# Any JSON value, text with NUL and lone surrogates included, numbers far outside every bound.
_HOSTILE_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["\x00", "\ud800", "a\udfffb", "UTC", "America", "Etc", "localtime", "../../etc/passwd", "Europe/Paris", "x" * 300]
)
_HOSTILE_NUMBERS = st.integers() | st.sampled_from([2**40, 2**63, -(2**63), 2**31, 10**30, -1, 0]) | st.floats()
_HOSTILE_LEAF = st.none() | st.booleans() | _HOSTILE_NUMBERS | _HOSTILE_TEXT
_HOSTILE_JSON = st.recursive(
    _HOSTILE_LEAF,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_HOSTILE_TEXT, children, max_size=3),
    max_leaves=10,
)
_BUDGET_VALUE = _HOSTILE_NUMBERS | _HOSTILE_TEXT | st.none() | st.sampled_from(["1e400", "NaN", "-0", "1.5"])
RUN_BODIES = st.fixed_dictionaries({}, optional={
    "budgets": st.fixed_dictionaries({}, optional={
        k: _BUDGET_VALUE for k in ("model_calls", "tool_calls", "wall_seconds", "result_bytes", "cost")
    }) | _HOSTILE_JSON,
    "timezone": _HOSTILE_TEXT | _HOSTILE_JSON,
    "locale": _HOSTILE_TEXT | _HOSTILE_JSON,
    "metadata": st.dictionaries(_HOSTILE_TEXT, _HOSTILE_JSON, max_size=4) | _HOSTILE_JSON,
})
MODEL_CALL_BODIES = st.fixed_dictionaries({}, optional={
    "tools": st.lists(_HOSTILE_TEXT | st.sampled_from(sorted(VISIBLE_NAMES)), max_size=4) | _HOSTILE_JSON,
    "format": st.sampled_from(["openai", "anthropic", "mcp", "\ud800", "\x00"]) | _HOSTILE_JSON,
    "context": st.lists(st.uuids().map(str) | _HOSTILE_TEXT, max_size=3) | _HOSTILE_JSON,
})
CANCEL_BODIES = st.fixed_dictionaries({}, optional={"reason": _HOSTILE_TEXT | _HOSTILE_JSON}) | _HOSTILE_JSON


def _post_json_text(agent, path: str, body) -> object:
    # json.dumps writes a lone surrogate as an escape and a float infinity as `Infinity`
    # (refused by the strict API parser); both reach the server exactly as a hostile client sends them.
    return agent.client.post(path, json.dumps(body), content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {agent.token}")


def _answer_ok_or_problem(resp, ok: tuple[int, ...]) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.content[:300])
    if resp.status_code not in ok:
        _assert_problem(resp)


@FUZZ
@given(body=RUN_BODIES)
def test_a_run_body_of_any_shape_is_created_or_refused_never_a_server_error(agent, weather, body):
    agent.client.raise_request_exception = False
    resp = _post_json_text(agent, "/api/v1/runs", body)
    _answer_ok_or_problem(resp, (201,))
    if resp.status_code == 201:
        run = resp.json()
        # What is stored must read back and keep working: the run, a model call on it.
        assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 200
        assert _post_json_text(agent, f"/api/v1/runs/{run['id']}/model-calls", {}).status_code in (201, 429)


@FUZZ
@given(body=MODEL_CALL_BODIES)
def test_a_model_call_body_of_any_shape_is_created_or_refused_never_a_server_error(agent, weather, body):
    agent.client.raise_request_exception = False
    run = agent.run()
    _answer_ok_or_problem(_post_json_text(agent, f"/api/v1/runs/{run['id']}/model-calls", body), (201,))


@FUZZ
@given(body=CANCEL_BODIES)
def test_a_cancel_or_finish_body_of_any_shape_never_makes_a_server_error(agent, call, body):
    call = agent.model_call(agent.run()["id"])["id"]  # a live run each time: finish ends it
    inv = _post(agent, call, {"proposal_id": _pid("cancel"), "name": "weather.get_forecast@1", "arguments": GOOD_ARGS}).json()
    _answer_ok_or_problem(_post_json_text(agent, f"/api/v1/invocations/{inv['id']}/cancel", body), (200,))
    _answer_ok_or_problem(_post_json_text(agent, f"/api/v1/runs/{inv['run_id']}/finish", body), (200,))


@pytest.mark.parametrize("raw", [
    '{"metadata": {"note": "a\\u0000b"}}',
    '{"metadata": {"a\\u0000": 1}}',
    '{"metadata": {"note": "\\ud800"}}',
    '{"metadata": {"\\udc00": "x"}}',
    '{"metadata": {"n": 1e400}}',
    '{"metadata": {"deep": [[{"n": -1e999}]]}}',
    '{"budgets": {"wall_seconds": 1099511627776}}',
    '{"budgets": {"tool_calls": 9223372036854775808}}',
    '{"budgets": {"model_calls": -1}}',
    '{"budgets": {"result_bytes": 1e400}}',
    '{"budgets": {"cost": "1e400"}}',
    '{"timezone": "America"}',
    '{"timezone": "localtime"}',
    '{"timezone": "\\ud800"}',
])
def test_it_refuses_unsafe_run_input_with_a_400_problem(agent, raw):
    agent.client.raise_request_exception = False
    resp = agent.client.post("/api/v1/runs", raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert resp.status_code == 400, (resp.status_code, resp.content[:300])
    _assert_problem(resp)


def test_a_lone_surrogate_echoed_in_a_validation_error_is_encodable(agent, call):
    """DRF quotes the bad choice in its message; the problem must still encode as UTF-8."""
    run = agent.run()
    resp = agent.client.post(f"/api/v1/runs/{run['id']}/model-calls", '{"format": "\\ud800x"}',
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    _assert_problem(resp)
    assert "\ufffdx" in resp.content.decode("utf-8")


def test_a_run_at_the_bounds_is_accepted_and_keeps_working(agent, weather):
    run = agent.run(budgets={"wall_seconds": MAX_WALL_SECONDS, "tool_calls": MAX_COUNT_BUDGET,
                             "model_calls": MAX_COUNT_BUDGET, "result_bytes": MAX_RESULT_BYTES_BUDGET, "cost": "999999999999.999999"},
                    metadata={"nested": {"list": [1, 2.5, None, True, "é"]}, "big": 2**70})
    assert agent.model_call(run["id"])["id"]


# --------------------------------------------------------------------------- tool_calls per request (issue 11 item 7)


def _tool_calls(n: int, prefix: str) -> dict:
    return {"tool_calls": [{"id": f"{prefix}_{i}", "type": "function",
                            "function": {"name": "weather.get_forecast@1", "arguments": GOOD_ARGS}} for i in range(n)]}


def test_a_batch_over_the_tool_calls_cap_is_a_413_and_creates_nothing(agent, call, settings):
    settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST = 5
    before = Invocation.objects.count()
    resp = _post(agent, call, _tool_calls(6, "over"))
    assert resp.status_code == 413
    body = resp.json()
    assert (body["code"], body["max_tool_calls"]) == ("too_many_tool_calls", 5)
    assert Invocation.objects.count() == before
    ok = _post(agent, call, _tool_calls(5, "at"))
    assert ok.status_code == 201 and len(ok.json()["invocations"]) == 5


def test_the_default_tool_calls_cap_refuses_2000_calls(agent, call):
    resp = _post(agent, call, _tool_calls(2000, "flood"))
    assert resp.status_code == 413 and resp.json()["max_tool_calls"] == django_settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST
