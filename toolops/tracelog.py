"""Trace/span ids on every log line: a context variable set by requests and tasks, and a filter."""
from __future__ import annotations

import contextlib
import contextvars
import logging

_current: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("toolops_trace", default=("-", "-"))


@contextlib.contextmanager
def trace_scope(trace_id: str | None, span_id: str | None):
    """Log lines inside carry ``trace_id``/``span_id`` (W3C ids, or '-' outside any trace)."""
    token = _current.set((trace_id or "-", span_id or "-"))
    try:
        yield
    finally:
        _current.reset(token)


class TraceIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        trace_id, span_id = _current.get()
        # An explicit extra={"trace_id": ...} on the call wins over the ambient context.
        record.trace_id = getattr(record, "trace_id", trace_id)
        record.span_id = getattr(record, "span_id", span_id)
        return True
