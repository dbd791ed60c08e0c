"""W3C Trace Context (traceparent) parsing and id generation."""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

_TRACEPARENT_RE = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def new_trace_id() -> str:
    return secrets.token_hex(16)


def new_span_id() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    parent_span_id: str | None = None
    flags: str = "01"
    tracestate: str = ""

    def traceparent(self, span_id: str) -> str:
        """The header value for a child span ``span_id`` of this trace."""
        return f"00-{self.trace_id}-{span_id}-{self.flags}"


def parse_traceparent(value: str | None, tracestate: str | None = None) -> TraceContext | None:
    """A TraceContext from a ``traceparent`` header, or None when absent or invalid.

    Per the W3C spec an invalid header is ignored (a new trace starts), never an error;
    all-zero ids and version ``ff`` are invalid.
    """
    if not value:
        return None
    m = _TRACEPARENT_RE.match(value.strip().lower())
    if not m:
        return None
    version, trace_id, span_id, flags = m.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceContext(trace_id=trace_id, parent_span_id=span_id, flags=flags, tracestate=tracestate or "")
