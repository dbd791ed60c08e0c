"""Anthropic ``tool_use`` content blocks as proposals, with each ``input`` kept as the bytes that arrived.

The Messages API answers an assistant message whose ``content`` is a list of blocks; a tool call is a
``{"type": "tool_use", "id", "name", "input": {...}}`` block, and ``input`` is a JSON *value*, not a
string as OpenAI's ``arguments`` is. Parsing the request body into Python objects would silently merge
duplicate keys inside ``input`` (last wins), so the proposal's bytes are cut out of the raw body
(``jsonrpc_raw``, as the MCP front door does for ``params.arguments``) and the strict parser judges them:
duplicate keys become a recorded ``parse_rejected``, exactly as over OpenAI.

Accepted bodies (``EXPECTED_SHAPES``): one ``tool_use`` block, the list of content blocks, or the whole
Message (any object with a ``content`` list, such as ``message.model_dump()``). Blocks of other types
(``text``, ``thinking``, server tools) are not the client's to run and are skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolops.model_io.jsonrpc_raw import RawJSONError, member_bytes

EXPECTED_SHAPES = (
    'Anthropic tool_use content blocks as the Messages API returns them: one block '
    '{"type": "tool_use", "id", "name", "input"}, the list of content blocks, or the whole Message '
    '{"content": [...]} (blocks of other types are ignored)'
)


# The limits of a proposal's id and name on every other shape (agent_api.serializers.ProposalIn).
MAX_LENGTHS = {"id": 200, "name": 500}


class ToolUseShapeError(ValueError):
    """The body is not one of ``EXPECTED_SHAPES`` (the message says what is wrong and what is expected)."""


@dataclass(frozen=True)
class ToolUse:
    proposal_id: str
    name: str
    arguments_bytes: bytes


def is_tool_use_body(data: Any) -> bool:
    """Whether a parsed proposals body is meant as Anthropic content (not one of the proposal shapes)."""
    if isinstance(data, list):
        return True
    return isinstance(data, dict) and (data.get("type") == "tool_use" or "content" in data)


def tool_uses(data: Any, body: bytes) -> list[ToolUse]:
    """The ``tool_use`` blocks of a parsed body ``data``, in order, each ``input`` as its raw bytes in ``body``."""
    if isinstance(data, dict) and data.get("type") == "tool_use":
        blocks, prefix = [data], None
    elif isinstance(data, dict) and isinstance(data.get("content"), list):
        blocks, prefix = data["content"], ("content",)
    elif isinstance(data, list):
        blocks, prefix = data, ()
    else:
        raise ToolUseShapeError(f"expected {EXPECTED_SHAPES}")
    found = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ToolUseShapeError(f"content[{index}] is not a content block (an object with a 'type'); expected {EXPECTED_SHAPES}")
        if block.get("type") != "tool_use":
            continue
        for member, limit in MAX_LENGTHS.items():
            if not isinstance(block.get(member), str) or not 0 < len(block[member]) <= limit:
                raise ToolUseShapeError(f"tool_use block content[{index}] needs a string '{member}' of 1–{limit} characters")
        if "input" not in block:
            raise ToolUseShapeError(f"tool_use block content[{index}] has no 'input' (the tool's arguments, a JSON object)")
        path = ("input",) if prefix is None else (*prefix, index, "input")
        try:
            raw = member_bytes(body, path)
        except RawJSONError:
            raw = None
        if raw is None:  # the scanner and the JSON parser disagree: never guess the model's bytes
            raise ToolUseShapeError(f"could not locate the bytes of content[{index}].input in the request body")
        found.append(ToolUse(proposal_id=block["id"], name=block["name"], arguments_bytes=raw))
    if not found:
        raise ToolUseShapeError(f"no tool_use block in the body; expected {EXPECTED_SHAPES}")
    return found
