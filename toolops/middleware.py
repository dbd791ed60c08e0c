"""W3C trace context on every request: accept ``traceparent``, always answer with one."""
from __future__ import annotations

from toolops.runtime.tracecontext import new_span_id, new_trace_id, parse_traceparent
from toolops.tracelog import trace_scope


class TraceContextMiddleware:
    """Sets ``request.trace`` (a TraceContext or None); views may set ``request.trace_id``
    to the resource's trace (e.g. the Run's) so the response continues it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.trace = parse_traceparent(request.headers.get("traceparent"), request.headers.get("tracestate"))
        request.trace_id = request.trace.trace_id if request.trace else None
        with trace_scope(request.trace_id, request.trace.parent_span_id if request.trace else None):
            response = self.get_response(request)
        trace_id = request.trace_id or new_trace_id()
        flags = request.trace.flags if request.trace else "01"
        response["traceparent"] = f"00-{trace_id}-{new_span_id()}-{flags}"
        if request.trace and request.trace.tracestate:
            response["tracestate"] = request.trace.tracestate
        return response
