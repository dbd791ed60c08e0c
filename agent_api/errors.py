"""One DRF exception handler: every API error becomes RFC 9457 problem+json with a stable code."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from toolops.errors import ApplicationError
from toolops.problems import PROBLEM_CONTENT_TYPE, problem_body

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
    exceptions.Throttled: "rate_limited",
    # Django's own, raised by shared selectors (console scope) and get_object_or_404; DRF maps their status.
    DjangoPermissionDenied: "forbidden",
    Http404: "not_found",
}


def problem(status: int, code: str, title: str, detail: str, **extra) -> Response:
    return Response(problem_body(status, code, title, detail, **extra), status=status, content_type=PROBLEM_CONTENT_TYPE)


def problem_exception_handler(exc, context):
    """Map ``ApplicationError`` and DRF's own errors to problems. Anything else is raised on to
    ``toolops.middleware.ApiProblemMiddleware``: 503 for an outage, else a logged 500 problem."""
    if isinstance(exc, ApplicationError):
        return problem(exc.status, exc.code, exc.title, exc.message, **exc.extra)
    response = exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), None) or getattr(exc, "default_code", "error")
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
