"""The loop driver: model turn, tool calls through ToolOps, their messages back — until the model stops,
the run's budgets end it (ToolOps enforces them; the driver only stops when told), or a person denies
a call. One progress line per step."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from toolops_client._transport import Invoke, Op
from toolops_client.client import AsyncRun, Progress, Run, ToolMessages, Wait
from toolops_client.errors import BudgetExhausted, RunEnded
from toolops_client.formats import TOOL_FORMATS, assistant_turn, final_text, tool_calls

StopReason = Literal["model_stopped", "budget", "denied"]


@dataclass
class LoopResult:
    """How the loop ended: ``stop_reason``, the model's last text, the whole conversation."""

    stop_reason: StopReason
    messages: list[Any]
    text: str = ""
    detail: str = ""
    turns: int = 0
    calls: list[Any] = field(default_factory=list)


def _loop(run: Run | AsyncRun, model: Callable[..., Any], messages: list[Any], fmt: str, wait: Wait,
          progress: Progress | None) -> Op[LoopResult]:
    say = progress or (lambda line: None)
    api = TOOL_FORMATS[fmt][1]
    conversation = list(messages)
    calls: list[Any] = []
    turn = 0
    while True:
        try:
            tools = yield from run._tools(fmt)
        except (BudgetExhausted, RunEnded) as exc:
            say(f"stopped before model turn {turn + 1}: {exc.detail or exc.code}")
            return LoopResult("budget", conversation, detail=exc.detail or exc.code, turns=turn, calls=calls)
        turn += 1
        say(f"model turn {turn}: {len(tools)} tools offered")
        key = "input" if api == "responses" else "messages"
        response = yield Invoke(model, {key: list(conversation), "tools": tools})
        conversation.extend(assistant_turn(response))
        _, proposed = tool_calls(response)
        if not proposed:
            text = final_text(response)
            say(f"model turn {turn}: the model stopped" + (f" — {text[:120]!r}" if text else ""))
            return LoopResult("model_stopped", conversation, text=text, turns=turn, calls=calls)
        say(f"model turn {turn}: {len(proposed)} tool call(s): " + ", ".join(c.name for c in proposed))
        try:
            answered: ToolMessages = yield from run._submit(response, wait=wait, progress=say)
        except BudgetExhausted as exc:
            say(f"stopped: {exc.detail or exc.code}")
            return LoopResult("budget", conversation, detail=exc.detail or exc.code, turns=turn, calls=calls)
        conversation.extend(answered)
        calls.extend(answered.calls)
        denied = [c for c in answered.calls if c.denied]
        if denied:
            say(f"stopped: a person denied {denied[0].name} ({denied[0].invocation_id})")
            return LoopResult("denied", conversation, detail=f"{denied[0].name} denied", turns=turn, calls=calls)


def loop(*, model: Callable[..., Any], messages: list[Any], tools: Run, format: str = "openai",  # noqa: A002
         wait: Wait = True, progress: Progress | None = print) -> LoopResult:
    """Drive ``model`` (called as ``model(messages=…, tools=…)``, or ``input=`` for the Responses API: an
    SDK method such as ``functools.partial(client.chat.completions.create, model="…")``) with the tools of
    the ToolOps run ``tools``, until the model stops, the run's budgets end it, or a person denies a call.
    Calls waiting for a person are waited for (``wait``: True, or at most that many seconds each)."""
    return tools._drive(_loop(tools, model, messages, format, wait, progress))


async def aloop(*, model: Callable[..., Any], messages: list[Any], tools: AsyncRun, format: str = "openai",  # noqa: A002
                wait: Wait = True, progress: Progress | None = print) -> LoopResult:
    """``loop`` on the async client; ``model`` may be a coroutine function (an ``AsyncOpenAI`` method)."""
    return await tools._drive(_loop(tools, model, messages, format, wait, progress))
