"""Anthropic ``tool_use`` blocks on the proposals endpoint of an ``anthropic`` model call (issue 34, item 1):
taken as the Messages API returns them, each ``input`` recorded as the exact bytes that arrived."""
from __future__ import annotations

import base64
import json

import pytest
from anthropic.types import Message, MessageParam, TextBlock, ToolResultBlockParam, ToolUseBlock, Usage
from pydantic import TypeAdapter

pytestmark = pytest.mark.django_db

WEATHER = "weather-get_forecast_v1"


def _anthropic_call(agent) -> dict:
    run = agent.run()
    return agent.model_call(run["id"], format="anthropic")


def _post_raw(agent, call: dict, body: bytes, headers: dict | None = None):
    """Posts ``body`` byte for byte (the test client's JSON helper would re-serialize it)."""
    return agent.client.post(f"/api/v1/model-calls/{call['id']}/proposals", body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {agent.token}", **(headers or {}))


def _message(*blocks) -> Message:
    return Message(id="msg_1", type="message", role="assistant", model="claude-test", content=list(blocks),
                   stop_reason="tool_use", stop_sequence=None, usage=Usage(input_tokens=1, output_tokens=1))


def _arguments(inv: dict) -> bytes:
    return base64.b64decode(inv["proposal"]["arguments_bytes_b64"])


def test_a_whole_message_proposes_its_tool_use_blocks_and_answers_tool_results(agent, weather):
    call = _anthropic_call(agent)
    message = _message(
        TextBlock(type="text", text="Let me check."),
        ToolUseBlock(type="tool_use", id="toolu_a", name=WEATHER, input={"city": "Paris", "date": "2026-07-20"}),
        ToolUseBlock(type="tool_use", id="toolu_b", name=WEATHER, input={"city": "Oslo", "date": "2026-07-20"}),
    )
    # The input members spaced as no serializer would write them: the record keeps these bytes.
    body = message.model_dump_json().replace('{"city":"Oslo"', '{ "city" :  "Oslo"').encode()
    resp = _post_raw(agent, call, body)
    assert resp.status_code == 201, resp.content
    answer = resp.json()
    invocations = answer["invocations"]
    assert [(i["proposal"]["proposal_id"], i["state"]) for i in invocations] == [("toolu_a", "AUTHORIZED"), ("toolu_b", "AUTHORIZED")]
    assert _arguments(invocations[0]) == b'{"city":"Paris","date":"2026-07-20"}'
    assert _arguments(invocations[1]) == b'{ "city" :  "Oslo","date":"2026-07-20"}'
    assert invocations[1]["normalized_arguments"] == {"city": "Oslo", "date": "2026-07-20"}
    assert answer["tool_results"] == [None, None]  # both run: nothing honest to hand the model yet
    replay = _post_raw(agent, call, body)
    assert replay.status_code == 200 and [i["id"] for i in replay.json()["invocations"]] == [i["id"] for i in invocations]


def test_duplicate_keys_in_input_are_recorded_as_parse_rejected_and_answered_as_a_tool_result(agent, weather):
    call = _anthropic_call(agent)
    body = (b'[{"type":"text","text":"hi"},{"type":"tool_use","id":"toolu_dup","name":"' + WEATHER.encode()
            + b'","input":{"city":"Paris","city":"Rome","date":"2026-07-20"}}]')
    resp = _post_raw(agent, call, body)
    assert resp.status_code == 201, resp.content
    (inv,) = resp.json()["invocations"]
    assert inv["state"] == "PARSE_REJECTED"
    assert _arguments(inv) == b'{"city":"Paris","city":"Rome","date":"2026-07-20"}'
    (result,) = resp.json()["tool_results"]
    block = TypeAdapter(ToolResultBlockParam).validate_python(result)
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_dup" and block["is_error"] is True
    # Ready to send back: the next user turn of the conversation, as the SDK types it.
    TypeAdapter(MessageParam).validate_python({"role": "user", "content": resp.json()["tool_results"]})
    assert result == agent.get(f"/api/v1/invocations/{inv['id']}/tool-message", format="anthropic").json()


def test_one_block_is_taken_alone(agent, weather):
    call = _anthropic_call(agent)
    block = ToolUseBlock(type="tool_use", id="toolu_one", name=WEATHER, input={"city": "Paris", "date": "2026-07-20"})
    resp = _post_raw(agent, call, block.model_dump_json().encode())
    assert resp.status_code == 201, resp.content
    assert [i["proposal"]["proposal_id"] for i in resp.json()["invocations"]] == ["toolu_one"]


def test_a_compact_answer_carries_the_tool_results_too(agent, weather):
    call = _anthropic_call(agent)
    body = json.dumps([{"type": "tool_use", "id": "toolu_bad", "name": WEATHER, "input": {"city": 3}}]).encode()
    resp = _post_raw(agent, call, body, {"HTTP_PREFER": "return=minimal"})
    (entry,) = resp.json()["invocations"]
    assert entry["state"] == "VALIDATION_REJECTED"
    assert resp.json()["tool_results"] == [entry["tool_message"]]


@pytest.mark.parametrize("body", [
    {"proposal": "x"},
    {"content": "just text"},
    [{"type": "text", "text": "no tool call here"}],
    [{"type": "tool_use", "id": "toolu_x", "name": WEATHER}],
    [{"type": "tool_use", "name": WEATHER, "input": {}}],
    ["not a block"],
])
def test_a_wrong_shape_says_which_shapes_are_expected(agent, weather, body):
    call = _anthropic_call(agent)
    resp = _post_raw(agent, call, json.dumps(body).encode())
    assert resp.status_code == 400
    assert resp["Content-Type"] == "application/problem+json"
    problem = resp.json()
    assert problem["code"] == "malformed_request"
    assert "tool_use" in problem["expected"] and "content" in problem["expected"]
    assert "proposal_id is required" not in json.dumps(problem)


def test_tool_use_blocks_on_an_openai_model_call_are_refused_naming_the_format(agent, weather):
    run = agent.run()
    call = agent.model_call(run["id"])  # format openai
    block = {"type": "tool_use", "id": "toolu_x", "name": WEATHER, "input": {}}
    resp = _post_raw(agent, call, json.dumps(block).encode())
    assert resp.status_code == 400 and "anthropic" in resp.json()["detail"]


def test_the_proposal_shapes_still_work_on_an_anthropic_model_call(agent, weather):
    call = _anthropic_call(agent)
    resp = agent.propose(call["id"], name=WEATHER, arguments='{"city": "Paris", "date": "2026-07-20"}')
    assert resp.status_code == 201 and resp.json()["state"] == "AUTHORIZED"


def test_more_tool_use_blocks_than_the_cap_create_nothing(agent, weather, settings):
    settings.TOOLOPS_MAX_TOOL_CALLS_PER_REQUEST = 2
    call = _anthropic_call(agent)
    blocks = [{"type": "tool_use", "id": f"toolu_{i}", "name": WEATHER, "input": {}} for i in range(3)]
    resp = _post_raw(agent, call, json.dumps(blocks).encode())
    assert resp.status_code == 413 and resp.json()["code"] == "too_many_tool_calls"
