"""Optional OpenTelemetry export (OTLP/HTTP) of the spans ToolOps already records.

Off by default. Switched on by the standard variables: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``; the exporter reads the rest (headers, timeout, protocol) itself.

ToolOps owns its ids — the Run's trace id, and the span ids of Proposal, Invocation and
Attempt stored in the database and sent as ``traceparent`` — so spans are built as finished
``ReadableSpan`` objects with exactly those ids and handed to the span processor, instead of
letting the SDK invent new ones.
"""
from __future__ import annotations

import logging
import os
import threading
from datetime import datetime

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_processor = None
_resource = None


def enabled() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def active() -> bool:
    """Spans are being exported (configured here, or by the standard variables)."""
    return _processor is not None or enabled()


def configure(*, processor=None) -> None:
    """Set up the exporter once per process (tests may pass their own processor)."""
    global _processor, _resource
    from opentelemetry.sdk.resources import Resource

    with _lock:
        if processor is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            processor = BatchSpanProcessor(OTLPSpanExporter())
        _resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "toolops")})
        _processor = processor


def reset() -> None:
    global _processor
    with _lock:
        if _processor is not None:
            _processor.shutdown()
        _processor = None


def tool_call_attributes(*, tool: str, call_id: str, error_type: str | None) -> dict:
    """OpenTelemetry's GenAI semantic conventions for executing a tool, so a tracing backend
    groups these spans with the model's calls and shows a failed call as an error:
    ``gen_ai.operation.name=execute_tool``, the tool's name, the model's tool-call id (the
    proposal id) and, on failure, ``error.type`` (a failure class or error code, never text)."""
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
            "error.type": error_type or None}


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def export_span(
    *, name: str, trace_id: str, span_id: str, parent_span_id: str | None, start: datetime, end: datetime,
    attributes: dict | None = None, error: bool = False,
) -> None:
    """Export one finished span with ToolOps' own ids; a no-op when export is off."""
    if _processor is None:
        if not enabled():
            return
        configure()
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    context = SpanContext(trace_id=int(trace_id, 16), span_id=int(span_id, 16), is_remote=False, trace_flags=TraceFlags(1))
    parent = (
        SpanContext(trace_id=int(trace_id, 16), span_id=int(parent_span_id, 16), is_remote=True, trace_flags=TraceFlags(1))
        if parent_span_id else None
    )
    span = ReadableSpan(
        name=name, context=context, parent=parent, resource=_resource, kind=SpanKind.INTERNAL,
        attributes={k: v for k, v in (attributes or {}).items() if v is not None},
        start_time=_ns(start), end_time=_ns(end),
        status=Status(StatusCode.ERROR if error else StatusCode.OK),
    )
    try:
        _processor.on_end(span)
    except Exception:  # noqa: BLE001 - telemetry must never break a call
        logger.warning("span export failed", exc_info=True)
