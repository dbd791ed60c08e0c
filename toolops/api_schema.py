"""OpenAPI pieces shared by every API view: the problem document and its responses.

Each operation lists the problem responses it can give, with the stable ``code`` values a
client can branch on (API.md); the media type is ``application/problem+json``.
"""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from toolops.problems import PROBLEM_CONTENT_TYPE


class ProblemOut(serializers.Serializer):
    """RFC 9457 problem details; extra members (``errors``, ``trace_id``, ``state``, …) may follow."""

    type = serializers.URLField(help_text="https://toolops.dev/problems/<code>")
    title = serializers.CharField()
    status = serializers.IntegerField(min_value=400, max_value=599)
    code = serializers.CharField(help_text="stable machine-readable reason")
    detail = serializers.CharField()
    errors = serializers.JSONField(required=False, help_text="field errors of a malformed request (400)")
    trace_id = serializers.CharField(required=False, help_text="present on 500: quote it when reporting the error")

    class Meta:
        ref_name = "Problem"


_TITLES = {
    400: "Malformed or invalid request", 401: "Missing, unknown or revoked API token", 404: "Not found for this subject",
    409: "Conflict with the resource's state", 413: "Request too large", 415: "Body is not JSON",
    410: "Gone: the resource expired",
    422: "Idempotency key reused with other arguments or expired", 429: "Rate limit or run budget reached (see Retry-After)",
    500: "Unexpected error (the body carries the trace id)",
    503: "Database or broker unavailable; retry after Retry-After seconds",
}
# On every authenticated operation.
COMMON = {401: ["unauthenticated"], 429: ["rate_limited"], 500: ["internal_error"], 503: ["service_unavailable"]}
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
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            ProblemOut, description=f"{_TITLES.get(status, 'Error')}. code: {', '.join(f'`{n}`' for n in names)}",
        )
        for status, names in sorted(merged.items())
    }
