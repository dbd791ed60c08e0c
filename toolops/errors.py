"""The one application-error class; the DRF exception handler maps it to RFC 9457 problems."""
from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """An expected error of the API itself, with a stable ``code`` (docs/reference/errors.md)."""

    status = 400
    code = "bad_request"
    title = "Bad request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.extra = extra or {}


class NotFound(ApplicationError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(ApplicationError):
    status, code, title = 409, "conflict", "Conflict"


class BudgetExhausted(ApplicationError):
    status, code, title = 429, "budget_exhausted", "Run budget exhausted"


class UnknownTool(ApplicationError):
    status, code, title = 400, "unknown_tool", "Unknown tool"
