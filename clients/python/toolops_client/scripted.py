"""Stand-in models for tests and examples without an API key: each call answers the next scripted
turn as the real API would (a Chat Completions, Responses or Anthropic Messages response, as a dict
the SDK types load), and records what it was given.

A turn is a list of tool calls ``(name, arguments)`` — the model-facing name and a dict, or a string
to send as the raw argument text — or a str: the model's final text (it stops calling tools)."""
from __future__ import annotations

import json
from typing import Any

Turn = list[tuple[str, Any]] | str


class _Scripted:
    def __init__(self, turns: list[Turn]):
        self.turns = list(turns)
        self.seen: list[dict[str, Any]] = []

    def __call__(self, **request: Any) -> dict[str, Any]:
        self.seen.append(request)
        if not self.turns:
            raise AssertionError("the scripted model ran out of turns")
        turn = self.turns.pop(0)
        n = len(self.seen)
        if isinstance(turn, str):
            return self._text(turn)
        return self._calls([(f"{n}_{i}", name, args) for i, (name, args) in enumerate(turn)])

    def _text(self, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def _calls(self, calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _raw(args: Any) -> str:
        return args if isinstance(args, str) else json.dumps(args)


class ScriptedChat(_Scripted):
    """``model(messages=…, tools=…)`` → an OpenAI Chat Completions response."""

    def _answer(self, message: dict[str, Any], reason: str) -> dict[str, Any]:
        return {"id": f"chatcmpl-{len(self.seen)}", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "finish_reason": reason, "message": message}]}

    def _text(self, text: str) -> dict[str, Any]:
        return self._answer({"role": "assistant", "content": text}, "stop")

    def _calls(self, calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
        return self._answer({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{cid}", "type": "function", "function": {"name": name, "arguments": self._raw(args)}}
            for cid, name, args in calls]}, "tool_calls")


class ScriptedResponses(_Scripted):
    """``model(input=…, tools=…)`` → an OpenAI Responses response."""

    def _answer(self, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": f"resp_{len(self.seen)}", "object": "response", "created_at": 0, "model": "scripted",
                "status": "completed", "output": output, "tools": [], "parallel_tool_calls": True,
                "tool_choice": "auto"}

    def _text(self, text: str) -> dict[str, Any]:
        return self._answer([{"type": "message", "id": f"msg_{len(self.seen)}", "role": "assistant",
                              "status": "completed", "content": [{"type": "output_text", "text": text,
                                                                  "annotations": []}]}])

    def _calls(self, calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
        return self._answer([{"type": "function_call", "id": f"fc_{cid}", "call_id": f"call_{cid}", "name": name,
                              "arguments": self._raw(args), "status": "completed"} for cid, name, args in calls])


class ScriptedAnthropic(_Scripted):
    """``model(messages=…, tools=…)`` → an Anthropic Messages response (arguments as dicts)."""

    def _answer(self, content: list[dict[str, Any]], reason: str) -> dict[str, Any]:
        return {"id": f"msg_{len(self.seen)}", "type": "message", "role": "assistant", "model": "scripted",
                "content": content, "stop_reason": reason, "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0}}

    def _text(self, text: str) -> dict[str, Any]:
        return self._answer([{"type": "text", "text": text}], "end_turn")

    def _calls(self, calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
        return self._answer([{"type": "tool_use", "id": f"toolu_{cid}", "name": name,
                              "input": args if not isinstance(args, str) else json.loads(args)}
                             for cid, name, args in calls], "tool_use")
