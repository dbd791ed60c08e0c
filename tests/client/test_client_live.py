"""toolops-client against a live ``make run``: the model's responses as the OpenAI and Anthropic SDKs
type them, tool messages back in each API's shape, people deciding through the Approvals API, errors
as exceptions, and retries that never make a second invocation."""
from __future__ import annotations

import threading

import anyio
import pytest
from anthropic.types import Message, MessageParam, ToolUseBlock, Usage
from openai.types.chat import ChatCompletion, ChatCompletionToolMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from tests.client.proxy import Proxy, problem_answer
from toolops.runtime.states import TERMINAL
from toolops_client import (
    FINAL_STATES, AsyncToolOps, BudgetExhausted, DigestMismatch, NotFound, RetryPolicy, ToolOps, Unauthenticated,
)

WEATHER = "weather-get_forecast_v1"
CALENDAR = "calendar-create_event_v1"
FORECAST = '{"city": "Paris", "date": "tomorrow"}'
EVENT = '{"calendar_id": "primary", "title": "Bring passport", "start": "tomorrow 09:00", "duration_minutes": 10}'


def chat_completion(*calls: tuple[str, str, str]) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "stand-in",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                           for cid, name, args in calls]}}],
    })


def anthropic_message(*blocks: ToolUseBlock) -> Message:
    return Message(id="msg_1", type="message", role="assistant", model="stand-in", content=list(blocks),
                   stop_reason="tool_use", stop_sequence=None, usage=Usage(input_tokens=1, output_tokens=1))


def test_the_final_states_are_toolops_terminal_states():
    assert FINAL_STATES == {str(s) for s in TERMINAL}


def test_an_openai_chat_completion_goes_through_and_answers_tool_messages(client):
    with client.run(budgets={"tool_calls": 5}, timezone="Europe/Paris") as run:
        tools = run.tools(format="openai")
        assert WEATHER in {t["function"]["name"] for t in tools}
        messages = run.submit(chat_completion(("call_w", WEATHER, FORECAST)))
        (message,) = messages
        TypeAdapter(ChatCompletionToolMessageParam).validate_python(message)
        assert message["tool_call_id"] == "call_w" and '"ok":true' in message["content"]
        (outcome,) = messages.calls
        assert outcome.state == "OBSERVED" and outcome.waiting_for is None
        assert client.invocation(outcome.invocation_id).state == "OBSERVED"
        assert [e["to_state"] for e in client.invocation(outcome.invocation_id).events()][-1] == "OBSERVED"
    assert run.data["state"] == "finished"  # leaving the block finished the run


def test_an_openai_responses_response_answers_function_call_outputs(client):
    with client.run() as run:
        tools = run.tools(format="openai-responses")
        assert all(t["type"] == "function" and "name" in t for t in tools)
        response = {"id": "resp_1", "object": "response", "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "call_r", "name": WEATHER, "arguments": FORECAST},
        ]}
        (item,) = run.submit(response)
        TypeAdapter(ResponseInputItemParam).validate_python(item)
        assert item["type"] == "function_call_output" and item["call_id"] == "call_r"


def test_an_anthropic_message_answers_one_user_turn_of_tool_results(client):
    with client.run() as run:
        tools = run.tools(format="anthropic")
        assert WEATHER in {t["name"] for t in tools}
        message = anthropic_message(
            ToolUseBlock(type="tool_use", id="toolu_1", name=WEATHER, input={"city": "Paris", "date": "tomorrow"}),
            ToolUseBlock(type="tool_use", id="toolu_2", name=WEATHER, input={"city": 7}),
        )
        answered = run.submit(message)
        (turn,) = answered
        TypeAdapter(MessageParam).validate_python(turn)
        assert turn["role"] == "user" and [b["tool_use_id"] for b in turn["content"]] == ["toolu_1", "toolu_2"]
        assert [c.state for c in answered.calls] == ["OBSERVED", "VALIDATION_REJECTED"]
        assert turn["content"][1]["is_error"] is True


def test_a_call_waiting_for_a_person_answers_at_once_or_waits_until_approved(client, approver):
    with client.run() as run:
        run.tools(format="openai")
        (pending,) = run.submit(chat_completion(("call_c1", CALENDAR, EVENT))).calls
        assert pending.waiting_for == "approver" and pending.state == "AUTHORIZED"
        assert "confirm" in pending.message["content"].lower()
        approver.confirmations.deny(_confirmation_of(approver, pending.invocation_id)["id"], reason="not this one")

        lines: list[str] = []
        answer: dict = {}
        waiter = threading.Thread(target=lambda: answer.update(messages=run.submit(
            chat_completion(("call_c2", CALENDAR, EVENT.replace("Bring", "Pack"))), wait=120, progress=lines.append)))
        waiter.start()
        confirmation = _wait_for_confirmation(approver, "Pack passport")
        with pytest.raises(DigestMismatch):
            approver.confirmations.approve(confirmation["id"], digest="0" * 64)
        approver.confirmations.approve(confirmation["id"], digest=confirmation["digest"])
        waiter.join(120)
        (decided,) = answer["messages"].calls
        assert decided.state == "OBSERVED" and decided.waiting_for is None and '"ok":true' in decided.message["content"]
        assert any("waits for an approver" in line for line in lines) and "OBSERVED" in lines[-1]
        denied = client.invocation(pending.invocation_id)
        assert denied.data["error"]["code"] == "confirmation_denied"


def _confirmation_of(approver: ToolOps, invocation_id: str) -> dict:
    return next(c for c in approver.confirmations.pending() if c["invocation_id"] == invocation_id)


def _wait_for_confirmation(approver: ToolOps, title: str) -> dict:
    import time
    for _ in range(200):
        found = [c for c in approver.confirmations.pending() if title in str(c["arguments_display"])]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no pending confirmation for {title}")


def test_problems_are_exceptions(server, client):
    with pytest.raises(NotFound) as missing:
        client.invocation("00000000-0000-0000-0000-000000000000")
    assert missing.value.code == "not_found" and missing.value.status == 404
    with ToolOps(server.url, "tko_wrong") as stranger, pytest.raises(Unauthenticated):
        stranger.run()
    with client.run(budgets={"tool_calls": 1}) as run:
        run.tools(format="openai")
        run.submit(chat_completion(("call_1", WEATHER, FORECAST)))
        with pytest.raises(BudgetExhausted) as spent:
            run.submit(chat_completion(("call_2", WEATHER, FORECAST)))
        assert spent.value.problem["budget"] == "tool_calls"


def test_the_async_client_does_the_same(server):
    async def main():
        async with AsyncToolOps(server.url, server.token()) as client:
            async with client.run(budgets={"tool_calls": 3}) as run:
                await run.tools(format="anthropic")
                answered = await run.submit(anthropic_message(
                    ToolUseBlock(type="tool_use", id="toolu_a", name=WEATHER, input={"city": "Oslo", "date": "tomorrow"})))
                invocation = await client.invocation(answered.calls[0].invocation_id)
                return answered, invocation

    answered, invocation = anyio.run(main)
    assert answered[0]["content"][0]["tool_use_id"] == "toolu_a" and invocation.state == "OBSERVED"


def test_a_connection_dropped_after_the_server_committed_is_retried_with_the_same_key_into_one_invocation(server):
    proxy = Proxy(server.port, rule=lambda seen, before: "drop_after_forward"
                  if seen.method == "POST" and "/proposals" in seen.path and before == 0 else "forward")
    try:
        with ToolOps(proxy.url, server.token(), retry=RetryPolicy(backoff=0.05)) as client, client.run() as run:
            run.tools(format="openai")
            (outcome,) = run.submit(chat_completion(("call_d", WEATHER, FORECAST))).calls
            posts = [s for s in proxy.seen if s.method == "POST" and "/proposals" in s.path]
            assert [s.action for s in posts] == ["drop_after_forward", "forward"]
            assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
            assert run.refresh()["used"]["tool_calls"] == 1  # the server saw two requests, made one invocation
            assert outcome.state == "OBSERVED"
    finally:
        proxy.close()


def test_503_and_429_are_retried_after_retry_after_with_the_same_key(server):
    answers = {0: problem_answer(503, "service_unavailable", 1), 1: problem_answer(429, "rate_limited", 1)}
    proxy = Proxy(server.port, rule=lambda seen, before: answers.get(before, "forward")
                  if seen.method == "POST" and "/proposals" in seen.path else "forward")
    try:
        with ToolOps(proxy.url, server.token()) as client, client.run() as run:
            run.tools(format="openai")
            (outcome,) = run.submit(chat_completion(("call_r", WEATHER, FORECAST))).calls
        posts = [s for s in proxy.seen if s.method == "POST" and "/proposals" in s.path]
        assert [s.action for s in posts] == ["answered", "answered", "forward"]
        assert len({s.headers["idempotency-key"] for s in posts}) == 1
        assert all(later.at - earlier.at >= 0.9 for earlier, later in zip(posts, posts[1:]))  # Retry-After: 1 honoured
        assert outcome.state == "OBSERVED"
    finally:
        proxy.close()
