"""One DRF exception handler: every API error becomes RFC 9457 problem+json with a stable code."""
from __future__ import annotations

from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from toolops.errors import ApplicationError

PROBLEM_CONTENT_TYPE = "application/problem+json"

_DRF_CODES = {
    exceptions.ParseError: "malformed_request",
    exceptions.ValidationError: "malformed_request",
    exceptions.AuthenticationFailed: "unauthenticated",
    exceptions.NotAuthenticated: "unauthenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def problem(status: int, code: str, title: str, detail: str, **extra) -> Response:
    body = {"type": f"https://toolops.dev/problems/{code}", "title": title, "status": status, "code": code, "detail": detail}
    body.update(extra)
    return Response(body, status=status, content_type=PROBLEM_CONTENT_TYPE)


def problem_exception_handler(exc, context):
    """Map ``ApplicationError`` and DRF's own errors to problems; anything else stays a 500."""
    if isinstance(exc, ApplicationError):
        return problem(exc.status, exc.code, exc.title, exc.message, **exc.extra)
    response = exception_handler(exc, context)
    if response is None:
        return None  # an unexpected error: let it surface as a real 500 so it gets fixed
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        detail, extra = "the request body is not valid", {"errors": data}
    else:
        detail, extra = str(data.get("detail", data)) if isinstance(data, dict) else str(data), {}
    resp = problem(response.status_code, code, response.status_text, detail, **extra)
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            resp[header] = response[header]
    return resp
