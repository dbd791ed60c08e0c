"""The API's problem+json answers as exceptions: one class per HTTP status family, and a subclass for
each code an agent or an approver handles differently. ``code``, ``status`` and the whole ``problem``
are on every instance, so a code without its own class is still told apart by ``exc.code``."""
from __future__ import annotations

from typing import Any


class ToolOpsError(Exception):
    """Any error of this client."""


class ConnectionFailed(ToolOpsError):
    """ToolOps could not be reached, or the connection broke before an answer (after the retries)."""


class APIError(ToolOpsError):
    """An RFC 9457 problem answered by ToolOps."""

    status: int = 0

    def __init__(self, problem: dict[str, Any], status: int, headers: dict[str, str] | None = None):
        self.problem = problem
        self.status = status
        self.code: str = str(problem.get("code") or "error")
        self.title: str = str(problem.get("title") or "")
        self.detail: str = str(problem.get("detail") or "")
        self.headers = headers or {}
        super().__init__(f"{status} {self.code}: {self.detail or self.title}")


class BadRequest(APIError):
    status = 400


class MalformedRequest(BadRequest):
    """``malformed_request``: the body is not what the operation takes (``problem['errors']`` / ``['expected']``)."""


class Unauthenticated(APIError):
    status = 401


class Forbidden(APIError):
    status = 403


class SeparationOfDuties(Forbidden):
    """``separation_of_duties``: the person a run acts for may not approve its calls."""


class NotFound(APIError):
    status = 404


class Conflict(APIError):
    status = 409


class RunEnded(Conflict):
    """``run_ended``: the run is over (finished, out of budget or past its deadline)."""


class DigestMismatch(Conflict):
    """``digest_mismatch``: the call changed since the approver saw it; nothing was approved."""


class AlreadyDecided(Conflict):
    """``already_decided``: someone decided this confirmation first."""


class ProposalConflict(Conflict):
    """``proposal_conflict``: the same proposal id was posted before with other bytes."""


class Gone(APIError):
    status = 410


class PayloadTooLarge(APIError):
    status = 413


class Unprocessable(APIError):
    status = 422


class TooManyRequests(APIError):
    status = 429


class BudgetExhausted(TooManyRequests):
    """``budget_exhausted``: a run budget refused this (``problem['budget']`` names it); never retried."""


class RateLimited(TooManyRequests):
    """``rate_limited``: retried after ``Retry-After`` until the retries run out."""


class ServerError(APIError):
    status = 500


class ServiceUnavailable(ServerError):
    status = 503


_BY_CODE: dict[str, type[APIError]] = {
    "malformed_request": MalformedRequest, "separation_of_duties": SeparationOfDuties, "run_ended": RunEnded,
    "digest_mismatch": DigestMismatch, "already_decided": AlreadyDecided, "proposal_conflict": ProposalConflict,
    "budget_exhausted": BudgetExhausted, "rate_limited": RateLimited, "service_unavailable": ServiceUnavailable,
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    413: PayloadTooLarge, 422: Unprocessable, 429: TooManyRequests, 503: ServiceUnavailable,
}


def error_for(status: int, problem: dict[str, Any], headers: dict[str, str] | None = None) -> APIError:
    """The exception for an answer: by its code, else by its status (any other 5xx: ``ServerError``)."""
    cls = _BY_CODE.get(str(problem.get("code"))) or _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(problem, status, headers)


