"""toolops_client.loop against a live ``make run`` with scripted stand-in models: it ends when the
model stops, when the run's budgets (enforced by ToolOps) end it, or when a person denies a call —
one progress line per step — and the conversation it leaves loads into the SDKs' types."""
from __future__ import annotations

import threading
import time

import anyio
from anthropic.types import Message, MessageParam
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.responses import Response, ResponseInputItemParam
from pydantic import TypeAdapter

from toolops_client import AsyncToolOps, aloop, loop
from toolops_client.scripted import ScriptedAnthropic, ScriptedChat, ScriptedResponses

WEATHER = "weather-get_forecast_v1"
CALENDAR = "calendar-create_event_v1"
PARIS = {"city": "Paris", "date": "tomorrow"}
EVENT = {"calendar_id": "primary", "title": "Loop event", "start": "tomorrow 10:00", "duration_minutes": 15}


def test_an_openai_loop_runs_until_the_model_stops(client):
    model = ScriptedChat([[(WEATHER, PARIS), (WEATHER, {"city": "Oslo", "date": "tomorrow"})], "Paris is sunnier."])
    lines: list[str] = []
    with client.run(budgets={"tool_calls": 5, "model_calls": 5}) as run:
        result = loop(model=model, messages=[{"role": "user", "content": "Weather?"}], tools=run, progress=lines.append)
    assert (result.stop_reason, result.text, result.turns) == ("model_stopped", "Paris is sunnier.", 2)
    assert [c.state for c in result.calls] == ["OBSERVED", "OBSERVED"]
    ChatCompletion.model_validate(ScriptedChat(["x"])())  # the stand-in answers what the SDK types load
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(result.messages)
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    # The second model turn saw the tool messages of the first.
    assert [m["role"] for m in model.seen[1]["messages"]] == ["user", "assistant", "tool", "tool"]
    assert lines[0].startswith("model turn 1: ") and lines[0].endswith("tools offered")
    assert sum("→ invocation" in line for line in lines) == 2 and "the model stopped" in lines[-1]


def test_an_anthropic_loop_is_ended_by_the_runs_tool_call_budget(client):
    model = ScriptedAnthropic([[(WEATHER, PARIS)], [(WEATHER, PARIS)], [(WEATHER, PARIS)], "never reached"])
    with client.run(budgets={"tool_calls": 1}) as run:
        result = loop(model=model, messages=[{"role": "user", "content": "Weather, again and again"}], tools=run,
                      format="anthropic", progress=None)
        assert run.refresh()["used"]["tool_calls"] == 1
    assert result.stop_reason == "budget" and "tool_calls" in result.detail
    Message.model_validate(ScriptedAnthropic(["x"])())
    TypeAdapter(list[MessageParam]).validate_python(result.messages)


def test_a_responses_loop_is_ended_by_the_runs_model_call_budget(client):
    model = ScriptedResponses([[(WEATHER, PARIS)], [(WEATHER, PARIS)], "never reached"])
    with client.run(budgets={"model_calls": 2}) as run:
        result = loop(model=model, messages=[{"role": "user", "content": "hi"}], tools=run,
                      format="openai-responses", progress=None)
    assert (result.stop_reason, result.turns) == ("budget", 2)
    Response.model_validate(ScriptedResponses(["x"])())
    TypeAdapter(list[ResponseInputItemParam]).validate_python(result.messages)


def test_a_loop_stops_when_a_person_denies_a_call(client, approver):
    model = ScriptedChat([[(CALENDAR, EVENT)], "never reached"])
    lines: list[str] = []
    out: dict = {}
    with client.run() as run:
        driver = threading.Thread(target=lambda: out.update(result=loop(
            model=model, messages=[{"role": "user", "content": "book it"}], tools=run, progress=lines.append)))
        driver.start()
        for _ in range(300):
            pending = [c for c in approver.confirmations.pending() if "Loop event" in str(c["arguments_display"])]
            if pending:
                break
            time.sleep(0.1)
        approver.confirmations.deny(pending[0]["id"], reason="not on a Sunday")
        driver.join(120)
    result = out["result"]
    assert result.stop_reason == "denied" and result.calls[0].error_code == "confirmation_denied"
    assert "not on a Sunday" in result.messages[-1]["content"]  # the model would read the reason
    assert any("waits for an approver" in line for line in lines) and "denied" in lines[-1]


def test_the_async_loop_takes_a_coroutine_model(server):
    scripted = ScriptedChat([[(WEATHER, PARIS)], "done"])

    async def model(**request):
        return scripted(**request)

    async def main():
        async with AsyncToolOps(server.url, server.token()) as client, client.run() as run:
            return await aloop(model=model, messages=[{"role": "user", "content": "hi"}], tools=run, progress=None)

    result = anyio.run(main)
    assert (result.stop_reason, [c.state for c in result.calls]) == ("model_stopped", ["OBSERVED"])
