"""The exact bytes of one member of a JSON-RPC message, as they arrived (docs/concepts/index.md: a proposal's
``arguments_bytes`` are what the model produced, never a re-serialization).

An MCP ``tools/call`` carries the model's arguments as a JSON *value* inside the JSON-RPC body
(``params.arguments``), not as a string as OpenAI does. The MCP SDK parses the body into Python
objects before a handler runs, which silently drops duplicate keys (last wins) and normalizes
numbers and whitespace. So the front door keeps the raw body and cuts the member's byte span out
of it with this scanner; the strict parser (``toolops.runtime.parser``) then judges those bytes
exactly as it judges a REST proposal — duplicate keys inside ``arguments`` become a recorded
``parse_rejected``, not a silently merged object.

The scanner only finds spans: it assumes the body is JSON the SDK already accepted, and it
answers ``None`` rather than guessing when the shape is not what it expects. The agent API cuts
an Anthropic ``tool_use`` block's ``input`` out of a proposals body the same way (paths then hold
array indexes too: ``("content", 2, "input")``). Member names are
compared after JSON unescaping (``"\\u0070arams"`` is ``params``); when the envelope repeats a
member, the last one is taken, as the SDK's parser does.
"""
from __future__ import annotations

import json
import re

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_MAX_DEPTH = 512


class RawJSONError(ValueError):
    """The body is not the JSON shape the scanner expects."""


def member_span(body: bytes, path: tuple[str | int, ...]) -> tuple[int, int] | None:
    """``(start, end)`` of the value at ``path`` (object member names, or array indexes, from the
    top), or None when a step on the path is absent or its enclosing value has another type."""
    start, end = _value_span(body, _skip_ws(body, 0))
    for step in path:
        found = _element(body, start, step) if isinstance(step, int) else _member(body, start, end, step)
        if found is None:
            return None
        start, end = found
    return start, end


def member_bytes(body: bytes, path: tuple[str | int, ...]) -> bytes | None:
    """The raw bytes of the value at ``path`` (see ``member_span``)."""
    span = member_span(body, path)
    return None if span is None else body[span[0]:span[1]]


def _skip_ws(body: bytes, i: int) -> int:
    return _WS.match(body, i).end()


def _member(body: bytes, start: int, end: int, name: str) -> tuple[int, int] | None:
    """The span of member ``name`` of the object spanning ``body[start:end]`` (last one wins)."""
    if body[start:start + 1] != b"{":
        return None
    found = None
    i = _skip_ws(body, start + 1)
    if body[i:i + 1] == b"}":
        return None
    while True:
        key = _STRING.match(body, i)
        if key is None:
            raise RawJSONError(f"expected a member name at byte {i}")
        i = _skip_ws(body, key.end())
        if body[i:i + 1] != b":":
            raise RawJSONError(f"expected ':' at byte {i}")
        value_start = _skip_ws(body, i + 1)
        value_start, value_end = _value_span(body, value_start)
        if json.loads(key.group()) == name:
            found = (value_start, value_end)
        i = _skip_ws(body, value_end)
        sep = body[i:i + 1]
        if sep == b",":
            i = _skip_ws(body, i + 1)
        elif sep == b"}":
            return found
        else:
            raise RawJSONError(f"expected ',' or '}}' at byte {i}")


def _element(body: bytes, start: int, index: int) -> tuple[int, int] | None:
    """The span of element ``index`` of the array starting at ``body[start]``."""
    if body[start:start + 1] != b"[":
        return None
    i = _skip_ws(body, start + 1)
    if body[i:i + 1] == b"]":
        return None
    position = 0
    while True:
        value_start, value_end = _value_span(body, i)
        if position == index:
            return value_start, value_end
        i = _skip_ws(body, value_end)
        sep = body[i:i + 1]
        if sep == b",":
            i = _skip_ws(body, i + 1)
            position += 1
        elif sep == b"]":
            return None
        else:
            raise RawJSONError(f"expected ',' or ']' at byte {i}")


def _value_span(body: bytes, i: int) -> tuple[int, int]:
    """The span of the JSON value starting at ``i`` (bracket matching, strings skipped whole)."""
    first = body[i:i + 1]
    if first == b'"':
        m = _STRING.match(body, i)
        if m is None:
            raise RawJSONError(f"unterminated string at byte {i}")
        return i, m.end()
    if first not in (b"{", b"["):
        m = _SCALAR.match(body, i)
        if m is None or m.end() == i:
            raise RawJSONError(f"expected a JSON value at byte {i}")
        return i, m.end()
    depth, j, n = 0, i, len(body)
    while j < n:
        c = body[j]
        if c == 0x22:  # '"'
            m = _STRING.match(body, j)
            if m is None:
                raise RawJSONError(f"unterminated string at byte {j}")
            j = m.end()
            continue
        if c in (0x7B, 0x5B):  # '{' '['
            depth += 1
            if depth > _MAX_DEPTH:
                raise RawJSONError("nesting too deep")
        elif c in (0x7D, 0x5D):  # '}' ']'
            depth -= 1
            if depth == 0:
                return i, j + 1
        j += 1
    raise RawJSONError(f"unterminated value starting at byte {i}")
