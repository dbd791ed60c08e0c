"""Log lines as JSON objects, one per line (``TOOLOPS_LOG_FORMAT=json``; issue 31).

Every process keeps stdlib ``logging`` (Django, Celery, gunicorn, uvicorn and our own modules all
log through it); only the formatter changes. structlog's ``ProcessorFormatter`` renders a stdlib
record through a small chain of processors, so each line carries the same fields whichever
library wrote it:

    timestamp  ISO 8601, UTC             level    info, warning…        logger   the logger's name
    message    the (redacted) message    role     web, worker, beat, mcp, demo (TOOLOPS_PROCESS_ROLE)
    trace_id, span_id   the current trace (toolops.tracelog, else the current OpenTelemetry span)
    invocation_id       when the line is written inside an attempt (``invocation_scope``) or
                        passed as ``extra={"invocation_id": ...}``
    exception           the formatted traceback, when there is one

Nothing else from the record is copied: a caller's ``extra={...}`` (arguments, headers) never
reaches a line. Secrets are removed from the message and the traceback by the handler's
``SecretRedactionFilter`` before this formatter runs. Imports no Django (gunicorn uses it too).
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os

import structlog
from opentelemetry import trace

_invocation: contextvars.ContextVar[str | None] = contextvars.ContextVar("toolops_invocation", default=None)

# The keys a JSON line may hold; anything else a processor or a caller adds is dropped.
FIELDS = ("timestamp", "level", "logger", "message", "role", "trace_id", "span_id", "invocation_id", "exception")


@contextlib.contextmanager
def invocation_scope(invocation_id: object):
    """Lines logged inside carry ``invocation_id`` (the worker wraps each attempt in it)."""
    token = _invocation.set(str(invocation_id))
    try:
        yield
    finally:
        _invocation.reset(token)


def process_role() -> str:
    """The launcher's ``TOOLOPS_PROCESS_ROLE`` (validated by toolops/settings_table.py), else ``cli``."""
    return os.environ.get("TOOLOPS_PROCESS_ROLE") or "cli"


def _context(logger, method_name, event_dict):
    record: logging.LogRecord = event_dict["_record"]
    event_dict["role"] = process_role()
    trace_id, span_id = getattr(record, "trace_id", "-"), getattr(record, "span_id", "-")
    if trace_id in (None, "-"):
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            trace_id, span_id = format(span.trace_id, "032x"), format(span.span_id, "016x")
    if trace_id not in (None, "-"):
        event_dict["trace_id"], event_dict["span_id"] = trace_id, span_id
    invocation_id = getattr(record, "invocation_id", None) or _invocation.get()
    if invocation_id:
        event_dict["invocation_id"] = str(invocation_id)
    if record.exc_text:  # the traceback as SecretRedactionFilter left it, not formatted again
        event_dict["exception"] = record.exc_text
        event_dict.pop("exc_info", None)
    return event_dict


def _only_fields(logger, method_name, event_dict):
    return {key: event_dict[key] for key in FIELDS if key in event_dict}


class JsonFormatter(structlog.stdlib.ProcessorFormatter):
    """The ``json`` formatter of settings.LOGGING (and of gunicorn's loggers, gunicorn_conf.py)."""

    def __init__(self, *args, **kwargs):
        super().__init__(
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
                _context,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.EventRenamer("message"),
                _only_fields,
                structlog.processors.JSONRenderer(),
            ],
        )


def route_to_root(*names: str) -> None:
    """Send a library's own loggers (uvicorn's) through the root handler, so its lines get the
    process's format and the secret filter instead of the library's own handler."""
    for name in names:
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
