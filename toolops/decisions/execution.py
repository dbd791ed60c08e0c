"""What an executor reports about one attempt, and how an HTTP status maps onto it (pure).

The commit boundary belongs to the tool's protocol (docs/concepts/lifecycle.md): a 2xx from a write API means the
effect exists; a refusal before processing (429, 4xx) means it does not; anything where the
request may have reached the tool but no answer came back (timeouts, dropped connections,
5xx for writes) is *unknown* — never "not executed".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from toolops.model_io.media import BinaryBody

# A Retry-After beyond a day is a remote's mistake or a trap: the floor is capped here (the
# call's deadline usually ends things much earlier).
MAX_RETRY_AFTER_SECONDS = 86_400.0


class Commit:
    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "not_applicable"  # read-only tools


@dataclass(frozen=True)
class ExecutionOutcome:
    """The result of one attempt as the executor saw it."""

    commit: str  # one of Commit.*
    value: Any = None
    error: dict | None = None  # {"code", "message", ...}
    external_resource_id: str | None = None
    failure_class: str | None = None  # not_reached | rate_limited | transient | timeout_unknown | business_rejected | permanent
    retry_after_seconds: float | None = None
    # What the tool reported this attempt cost (e.g. the HTTP executor's ``cost_header``);
    # None: it said nothing, and the ToolSpec's declared ``executor.cost`` is charged instead.
    cost: str | None = None
    http_status: int | None = None
    untrusted_text_pointers: tuple[str, ...] = ()
    detail: dict = field(default_factory=dict)
    binary: BinaryBody | None = None  # a body that is bytes, not text: kept as bytes, never decoded

    @property
    def ok(self) -> bool:
        return self.failure_class is None and self.commit in (Commit.COMMITTED, Commit.NOT_APPLICABLE)

    def to_dict(self) -> dict:
        return {
            "commit": self.commit, "error": self.error, "external_resource_id": self.external_resource_id,
            "failure_class": self.failure_class, "retry_after_seconds": self.retry_after_seconds,
            "http_status": self.http_status, "detail": self.detail, "cost": self.cost,
            **({"binary": {"media_type": self.binary.media_type, "size_bytes": self.binary.size,
                           "sha256": self.binary.sha256, "truncated": self.binary.truncated}} if self.binary else {}),
        }


@dataclass(frozen=True)
class LookupOutcome:
    """Reconciliation: did the effect happen? ``None`` means the service could not tell."""

    committed: bool | None
    external_resource_id: str | None = None
    value: Any = None
    detail: dict = field(default_factory=dict)


DEFAULT_STATUS_MAP = {
    "2xx": "ok",
    "408": "timeout_unknown",
    "409": "transient",  # e.g. idempotent request still in progress: try again with the same key
    "422": "business_rejected",
    "429": "rate_limited",
    "4xx": "permanent",
    "5xx": "transient",
}


KNOWN_KINDS = frozenset({"ok", "not_reached", "rate_limited", "transient", "timeout_unknown", "business_rejected", "permanent"})


def classify_status(status: int, status_map: dict[str, str] | None = None) -> str:
    """``ok`` or a failure class for an HTTP status: exact code first, then ``Nxx``.

    Anything else — a 3xx not followed, a 1xx or 6xx from a hostile server, a status map entry
    naming no known class — is ``permanent``: classified, never a crash and never retried.
    """
    mapping = {**DEFAULT_STATUS_MAP, **(status_map if isinstance(status_map, dict) else {})}
    if isinstance(status, bool) or not isinstance(status, int):
        return "permanent"
    kind = mapping.get(str(status)) or mapping.get(f"{status // 100}xx")
    return kind if kind in KNOWN_KINDS else "permanent"


def outcome_for_status(*, status: int, side_effect_class: str, status_map: dict | None = None) -> tuple[str, str | None]:
    """``(commit, failure_class)`` for a response that did arrive.

    A 5xx from a write may have committed before failing: its commit status is unknown. Every
    other refusal is an answer from the tool that nothing was done.
    """
    kind = classify_status(status, status_map)
    read_only = side_effect_class == "read_only"
    if kind == "ok":
        return (Commit.NOT_APPLICABLE if read_only else Commit.COMMITTED), None
    if read_only:
        return Commit.NOT_APPLICABLE, kind
    if kind in ("transient", "timeout_unknown") and status >= 500 or kind == "timeout_unknown":
        return Commit.UNKNOWN, kind
    return Commit.NOT_COMMITTED, kind


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 §10.2.3), or None when unusable.

    Either form: ``delay-seconds`` (digits only) or an HTTP-date (IMF-fixdate, or the obsolete
    RFC 850 / asctime forms every recipient must accept). A date in the past means 0; anything
    else (a sign, a fraction, garbage, a naive ``now``) gives None — no floor. Capped at
    ``MAX_RETRY_AFTER_SECONDS``.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():
        return min(float(int(text)), MAX_RETRY_AFTER_SECONDS)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.utcoffset() is None or now.utcoffset() is None:
        return None  # HTTP-dates are always GMT; one without a zone is not an HTTP-date
    return min(max(0.0, (when - now).total_seconds()), MAX_RETRY_AFTER_SECONDS)
