"""Request middleware: probes (/healthz, /readyz) and request metrics; W3C trace context on every
request; problem+json for everything under /api/; no NUL in a page's query string."""
from __future__ import annotations

import logging
import sys
import time

import psycopg
import redis.exceptions
from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from kombu.exceptions import OperationalError as BrokerOperationalError

from toolops import health, metrics
from toolops.problems import PROBLEM_CONTENT_TYPE, problem_body
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


# --------------------------------------------------------------------------------------------
# /api/: every answer is JSON, every error a problem document a client can act on.

logger = logging.getLogger("toolops.api")

API_PREFIX = "/api/"
# A dependency that is down or saturated (database server, pool exhausted, broker, Redis): the
# request may succeed later, so the client gets 503 + Retry-After, never a 500.
OUTAGE_ERRORS = (
    OperationalError, InterfaceError,  # Django's wrappers (a pool timeout arrives as OperationalError)
    psycopg.OperationalError, psycopg.InterfaceError,  # raw driver errors (toolops.sql, the pool)
    BrokerOperationalError,  # kombu: publishing to the Celery broker failed
    redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,  # grant counters, caches
)
_JSON_TYPES = ("application/json", PROBLEM_CONTENT_TYPE, "application/vnd.oai.openapi+json")
_TITLES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
           413: "Payload too large", 429: "Too many requests", 500: "Internal server error", 503: "Service unavailable"}
_CODES = {400: "malformed_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 413: "payload_too_large", 429: "rate_limited", 503: "service_unavailable"}


def problem_response(status: int, code: str, detail: str, **extra) -> JsonResponse:
    body = problem_body(status, code, _TITLES.get(status, "Error"), detail, **extra)
    return JsonResponse(body, status=status, content_type=PROBLEM_CONTENT_TYPE, json_dumps_params={"ensure_ascii": False})


def _remember_exception(sender, request=None, **kwargs) -> None:
    """Django turns an exception raised inside an inner middleware into a 500 page before it
    reaches us; keep the exception on the request so the answer can still say 503."""
    if request is not None:
        request.toolops_exception = sys.exc_info()[1]


got_request_exception.connect(_remember_exception, dispatch_uid="toolops.api.remember_exception")


class ApiProblemMiddleware:
    """Under ``/api/``: outages → 503 ``service_unavailable`` + Retry-After; an oversized body
    → 413; any other unhandled error → 500 with the trace id (logged with its traceback); any
    other non-JSON error page (Django's 400/403/404/405) → the same status as problem+json.
    The schema and the docs page keep their own (non-error) content types."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not request.path_info.startswith(API_PREFIX) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").split(";")[0].strip() in _JSON_TYPES:
            return response
        exc = getattr(request, "toolops_exception", None)
        if exc is not None:
            return self._for_exception(request, exc, logged=True)
        status = response.status_code
        return problem_response(status, _CODES.get(status, "error"), _TITLES.get(status, "request failed"))

    def process_exception(self, request, exc):
        if not request.path_info.startswith(API_PREFIX):
            return None
        if isinstance(exc, (Http404, PermissionDenied)) or (
            isinstance(exc, SuspiciousOperation) and not isinstance(exc, RequestDataTooBig)
        ):
            return None  # Django answers these with their 4xx; __call__ makes that a problem
        return self._for_exception(request, exc, logged=False)

    def _for_exception(self, request, exc, *, logged: bool):
        if isinstance(exc, RequestDataTooBig):
            return problem_response(413, "payload_too_large", f"the request body exceeds {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
        if isinstance(exc, OUTAGE_ERRORS):
            logger.warning("service unavailable on %s %s: %s: %s", request.method, request.path_info,
                           type(exc).__name__, exc)
            response = problem_response(
                503, "service_unavailable", "a backing service (database or broker) is unavailable; retry later",
            )
            response["Retry-After"] = str(settings.TOOLOPS_OUTAGE_RETRY_AFTER)
            return response
        request.trace_id = request.trace_id or new_trace_id()
        if not logged:
            logger.error("unhandled error on %s %s trace_id=%s", request.method, request.path_info, request.trace_id,
                         exc_info=(type(exc), exc, exc.__traceback__))
        return problem_response(500, "internal_error", "an unexpected error occurred; quote the trace id when reporting it",
                                trace_id=request.trace_id)


class NulQueryMiddleware:
    """Outside /api/, a query string holding a NUL (``%00``) is answered 400 before any view
    runs. PostgreSQL's text cannot hold or be compared with a NUL, so every page that filters by
    a parameter — the console's ``?tenant=``, each admin list filter (``?state__exact=``) —
    failed with a 500 on one, and no page here has a use for it. The API parses each of its
    parameters itself (an enum, a number, a cursor pattern) and answers its own problem codes."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = request.META.get("QUERY_STRING", "")
        if ("%00" in query or "\x00" in query) and not request.path_info.startswith(API_PREFIX) and any(
                "\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()):
            return HttpResponseBadRequest("A query parameter holds a NUL character.", content_type="text/plain")
        return self.get_response(request)


class RequestMetricsMiddleware:
    """``toolops_http_request_duration_seconds`` by method, route *pattern* (never the path: its
    ids would make a series per object) and status class (toolops/metrics.py)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        method = request.method if request.method in _METHODS else "other"
        metrics.http_request(method=method, route=match.route if match else "unmatched",
                             status=response.status_code, seconds=time.perf_counter() - started)
        return response


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ProbeMiddleware:
    """``GET /healthz`` and ``GET /readyz`` (toolops/health.py), answered first: before the host
    check (an orchestrator probes by the pod's address), the HTTPS redirect, sessions, CSRF and
    the login redirect — a probe carries no credentials and reads nothing private."""

    PATHS = {"/healthz": "live", "/readyz": "ready"}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = self.PATHS.get(request.path_info)
        if probe is None or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        status, body = (200, health.liveness()) if probe == "live" else health.readiness()
        response = JsonResponse(body, status=status)
        response["Cache-Control"] = "no-store"
        response._has_been_logged = True  # health.readiness logged the failing check; no 503 ERROR line per probe
        return response
