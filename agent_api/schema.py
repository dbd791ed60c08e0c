"""OpenAPI pieces shared by every API view: the problem document and its responses.

Each operation lists the problem responses it can give, with the stable ``code`` values a
client can branch on (docs/reference/errors.md) as an enum per status; the media type is
``application/problem+json``. Every code must be one of ``toolops.error_codes.HTTP`` (with that
status): a code listed here but missing there fails at import, so the lists cannot drift.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from drf_spectacular.views import SpectacularAPIView
from rest_framework.negotiation import DefaultContentNegotiation

from toolops import error_codes
from toolops.problems import PROBLEM_CONTENT_TYPE


_TITLES = {
    400: "Malformed or invalid request", 401: "Missing, unknown or revoked API token", 404: "Not found for this subject",
    405: "Method not allowed on this path (see Allow)", 406: "The Accept header excludes JSON",
    409: "Conflict with the resource's state", 413: "Request too large", 415: "Body is not JSON",
    410: "Gone: the resource expired",
    422: "Idempotency key reused with other arguments or expired", 429: "Rate limit or run budget reached (see Retry-After)",
    500: "Unexpected error (the body carries the trace id)",
    503: "Database or broker unavailable; retry after Retry-After seconds",
}
# On every authenticated operation.
COMMON = {401: ["unauthenticated"], 406: ["not_acceptable"], 429: ["rate_limited"],
          500: ["internal_error"], 503: ["service_unavailable"]}
# On every operation that reads a JSON body.
WITH_BODY = {400: ["malformed_request"], 413: ["payload_too_large"], 415: ["unsupported_media_type"]}


def problem_responses(codes: dict[int, list[str]] | None = None, *, body: bool = False) -> dict:
    """``{(status, "application/problem+json"): OpenApiResponse}`` for drf-spectacular's
    ``extend_schema(responses=…)``: COMMON, plus WITH_BODY when the operation reads a body,
    plus ``codes`` (merged per status)."""
    merged: dict[int, list[str]] = {}
    for table in (COMMON, WITH_BODY if body else {}, codes or {}):
        for status, names in table.items():
            merged.setdefault(status, [])
            merged[status] += [n for n in names if n not in merged[status]]
    for status, names in merged.items():
        wrong = [n for n in names if n not in error_codes.HTTP or error_codes.HTTP[n].status != status]
        if wrong:
            raise ValueError(f"problem codes {wrong} are not registered for HTTP {status} in toolops.error_codes")
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            _problem_schema(names), description=f"{_TITLES.get(status, 'Error')}. code: {', '.join(f'`{n}`' for n in names)}",
        )
        for status, names in sorted(merged.items())
    }


def _problem_schema(codes: list[str]) -> dict:
    """The Problem document narrowed to this response's codes."""
    return {"allOf": [{"$ref": "#/components/schemas/Problem"},
                      {"type": "object", "properties": {"code": {"type": "string", "enum": list(codes)}}}]}


class SchemaView(SpectacularAPIView):
    """``/api/schema/``: ``?format=json`` (or ``yaml``) picks the schema's encoding.

    The API turns DRF's ``?format=`` override off (there it means openai, anthropic or mcp), so
    this view reads it itself; without it, the ``Accept`` header decides (YAML for ``*/*``)."""

    class content_negotiation_class(DefaultContentNegotiation):
        def select_renderer(self, request, renderers, format_suffix=None):
            return super().select_renderer(request, renderers, format_suffix or request.query_params.get("format"))
