"""Model API responses in, tool messages out: OpenAI Chat Completions, OpenAI Responses and Anthropic
Messages, as their SDKs return them (pydantic objects) or as plain dicts. Pure: no I/O."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["chat", "responses", "anthropic"]

# run.tools(format=…): the ToolOps model-call format behind each, and the API the definitions are for.
TOOL_FORMATS: dict[str, tuple[str, Api]] = {
    "openai": ("openai", "chat"),
    "openai-responses": ("openai", "responses"),
    "anthropic": ("anthropic", "anthropic"),
}


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a model response, and the proposals body that carries it to ToolOps."""

    proposal_id: str
    name: str
    body: dict[str, Any]


def as_dict(obj: Any) -> dict[str, Any]:
    """An SDK object (pydantic) or a dict, as a plain dict."""
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"expected an OpenAI or Anthropic response (SDK object or dict), got {type(obj).__name__}")


def api_of(response: dict[str, Any]) -> Api:
    if "choices" in response or (response.get("role") == "assistant" and "tool_calls" in response):
        return "chat"
    if response.get("object") == "response" or isinstance(response.get("output"), list):
        return "responses"
    if isinstance(response.get("content"), list):
        return "anthropic"
    raise TypeError("not an OpenAI Chat Completions or Responses response, nor an Anthropic Message")


def _chat_message(response: dict[str, Any]) -> dict[str, Any]:
    return response["choices"][0]["message"] if "choices" in response else response


def tool_calls(response: Any) -> tuple[Api, list[ToolCall]]:
    """The response's API and its tool calls, in order (none: the model stopped)."""
    data = as_dict(response)
    api = api_of(data)
    if api == "chat":
        calls = [ToolCall(tc["id"], tc["function"]["name"], {"proposal_id": tc["id"], "name": tc["function"]["name"],
                                                             "arguments": tc["function"]["arguments"]})
                 for tc in _chat_message(data).get("tool_calls") or []]
    elif api == "responses":
        calls = [ToolCall(item["call_id"], item["name"], {"proposal_id": item["call_id"], "name": item["name"],
                                                          "arguments": item["arguments"]})
                 for item in data["output"] if item.get("type") == "function_call"]
    else:  # the block itself: ToolOps cuts its input's bytes out of the body
        calls = [ToolCall(block["id"], block["name"], {k: block[k] for k in ("type", "id", "name", "input")})
                 for block in data["content"] if block.get("type") == "tool_use"]
    return api, calls


def assistant_turn(response: Any) -> list[dict[str, Any]]:
    """What to append to the conversation for the model's own turn, in its API's input shape."""
    data = as_dict(response)
    api = api_of(data)
    if api == "chat":
        message = _chat_message(data)
        turn = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            turn["tool_calls"] = [{"id": tc["id"], "type": "function", "function": {
                "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}} for tc in message["tool_calls"]]
        return [turn]
    if api == "responses":
        return [_response_item(item) for item in data["output"]]
    return [{"role": "assistant", "content": [_anthropic_block(b) for b in data["content"]]}]


def _response_item(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "function_call":
        return {k: item[k] for k in ("type", "call_id", "name", "arguments")}
    return {k: v for k, v in item.items() if v is not None}


def _anthropic_block(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") == "tool_use":
        return {k: block[k] for k in ("type", "id", "name", "input")}
    if block.get("type") == "text":
        return {"type": "text", "text": block["text"]}
    return {k: v for k, v in block.items() if v is not None}


def final_text(response: Any) -> str:
    """The model's text in a response (its final answer when it stopped calling tools)."""
    data = as_dict(response)
    api = api_of(data)
    if api == "chat":
        return _chat_message(data).get("content") or ""
    if api == "responses":
        return "".join(part.get("text", "") for item in data["output"] if item.get("type") == "message"
                       for part in item.get("content") or [])
    return "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")


def tool_messages(api: Api, recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded tool messages (ToolOps' openai or anthropic format) in the shape ``api`` takes back."""
    if api == "chat":
        return list(recorded)
    if api == "responses":
        return [{"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]} for m in recorded]
    return [{"role": "user", "content": list(recorded)}] if recorded else []


