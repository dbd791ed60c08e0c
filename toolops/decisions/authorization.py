"""Authorization (docs/concepts/admission.md): a pure decision over a snapshot of runtime grants.

``authorize(requirements=..., grants=..., ctx=...)`` answers ``allow``, ``confirm`` or ``deny``
and returns every reason behind the answer. It never sees the model's arguments: the caller
resolves the resource / amount / datetime values the ToolSpec points at (from the *normalized*
arguments) into ``Requirement`` objects, and the subject and tenant come from the caller's token
via ``AuthContext``. So an argument such as ``"role": "admin"`` or ``"as_user": "root"`` is data
that cannot reach this function, let alone change its answer (docs/concepts/failures.md).

Rules, in the order they are applied:

* No requirements at all → DENY (``no_requirements``): a ToolSpec must name its capabilities;
  a tool that needs "nothing" is a misconfiguration, not a free pass.
* Grants are evaluated in ``grant_id`` order, so the same inputs always give the same Decision.
* Grants of another tenant are not considered at all: they produce no reason of their own (the
  requirement is reported as ``no_grant`` if nothing else applies), so neither their ids nor
  their scopes can show up anywhere in the Decision.
* Grants of another subject of the same tenant (``subject_id`` set and different) produce only a
  ``wrong_subject`` reason, without evaluating their scope or limits; ``public_reasons()`` drops
  those reasons, so the agent never learns about other people's grants.
* A grant satisfies a requirement when capability and operation class are equal (read, create,
  modify and delete never stand in for each other), it is not revoked (any ``revoked_at``), not
  expired (``expires_at > now``), its ``tool_refs`` are empty or contain ``ctx.tool_ref``, the
  scope matches the resource, and its limits hold for the *next* call given ``ctx.usage``.
* Per requirement: an allow candidate beats a confirm candidate; no candidate → deny.
* Across requirements: deny beats confirm beats allow. A CONFIRM decision carries one
  ``confirmation_required`` reason per requirement that only a confirm grant satisfied.
* A grant's approval policy (``approval_policy.py``) turns its effect into the effect of its
  amount tier (allow / confirm with a quorum / deny) once scope and limits hold; a ``deny`` tier
  is a failure of that grant like a limit. A CONFIRM decision carries the largest quorum
  (``approvals_needed``) and the earliest escalation of the grants it used.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, Mapping, Sequence
from urllib.parse import unquote_to_bytes, urlsplit

from toolops.decisions.approval_policy import ApprovalPolicy, Escalation, apply_policy, earliest_escalation
from toolops.runtime.normalizers import MINOR_UNITS

OPERATION_CLASSES = ("read", "create", "modify", "delete")
SCOPE_KINDS = ("any", "exact", "path_prefix", "domain_suffix", "glob", "url_prefix")
GRANT_EFFECTS = ("allow", "confirm")

# Stable reason codes (callers and stored events match on these strings).
GRANT_MATCHED = "grant_matched"
NO_GRANT = "no_grant"
NO_REQUIREMENTS = "no_requirements"
GRANT_EXPIRED = "grant_expired"
GRANT_REVOKED = "grant_revoked"
WRONG_TENANT = "wrong_tenant"
WRONG_SUBJECT = "wrong_subject"
OPERATION_MISMATCH = "operation_mismatch"
TOOL_VERSION_NOT_PINNED = "tool_version_not_pinned"
SCOPE_MISMATCH = "scope_mismatch"
PATH_ESCAPE = "path_escape"
INVALID_SCOPE = "invalid_scope"
AMOUNT_UNKNOWN = "amount_unknown"
AMOUNT_OVER_CALL_LIMIT = "amount_over_call_limit"
AMOUNT_OVER_WINDOW_LIMIT = "amount_over_window_limit"
AMOUNT_CURRENCY_MISMATCH = "amount_currency_mismatch"
AMOUNT_CURRENCY_UNKNOWN = "amount_currency_unknown"
RATE_LIMITED = "rate_limited"
RUN_CALL_LIMIT = "run_call_limit"
TIME_OUT_OF_RANGE = "time_out_of_range"
CONFIRMATION_REQUIRED = "confirmation_required"

# Reasons that describe somebody else's grant: kept for the audit trail, never shown to the agent.
_PRIVATE_CODES = frozenset({WRONG_TENANT, WRONG_SUBJECT})

# More rounds of percent-decoding than this is an obfuscation attempt, not a real path.
_MAX_DECODE_ROUNDS = 3


class Effect(StrEnum):
    ALLOW = "allow"
    CONFIRM = "confirm"
    DENY = "deny"


def _require_aware(value: datetime | None, name: str) -> None:
    if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
        raise ValueError(f"{name} must be an aware datetime")


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --------------------------------------------------------------------------------------------
# Grants and limits
# --------------------------------------------------------------------------------------------


MONEY_LIMITS = ("max_amount_per_call", "max_amount_per_window")


@dataclass(frozen=True)
class Limits:
    """Per-grant limits; ``None`` means "no limit". Amounts are in minor units of ``currency``.

    Money limits carry their currency: ``{"currency": "EUR", "max_amount_per_call": 50000}`` is
    500.00 EUR a call. A call in another currency, or one whose currency is not known, is not
    covered (``amount_currency_mismatch`` / ``amount_currency_unknown``): amounts of different
    currencies are never compared. ``currency`` is None only in records and rows written before
    limits had one; the shell reads such a row with its legacy currency (``from_dict``), and a
    stored record without one is re-checked as it was decided (no currency check).

    ``amount_window_seconds`` only describes the window the caller sums ``Usage.amount_in_window``
    over; it is required together with ``max_amount_per_window`` so the two can't drift apart.
    Time-range bounds are offsets from ``now`` and may be negative (allow the recent past).
    """

    max_amount_per_call: int | None = None
    max_amount_per_window: int | None = None
    amount_window_seconds: int | None = None
    calls_per_minute: int | None = None
    calls_per_run: int | None = None
    time_range_min_seconds: int | None = None
    time_range_max_seconds: int | None = None
    currency: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "currency":
                continue
            value = getattr(self, f.name)
            # bool is an int subclass; True as a limit is a bug, not "1".
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"limit {f.name} must be an integer or None")
            if value is not None and not f.name.startswith("time_range") and value < 0:
                raise ValueError(f"limit {f.name} must not be negative")
        if (self.max_amount_per_window is None) != (self.amount_window_seconds is None):
            raise ValueError("max_amount_per_window and amount_window_seconds go together")
        if self.amount_window_seconds is not None and self.amount_window_seconds <= 0:
            raise ValueError("amount_window_seconds must be positive")
        lo, hi = self.time_range_min_seconds, self.time_range_max_seconds
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("time_range_min_seconds is after time_range_max_seconds")
        if self.currency is not None:
            if self.currency not in MINOR_UNITS:
                raise ValueError(f"currency must be an ISO 4217 code ToolOps knows ({', '.join(sorted(MINOR_UNITS))})")
            if not self.has_money_limits:
                raise ValueError(f"currency goes with an amount limit ({' or '.join(MONEY_LIMITS)})")

    @property
    def has_money_limits(self) -> bool:
        return any(getattr(self, name) is not None for name in MONEY_LIMITS)

    @classmethod
    def from_dict(cls, d: dict | None, *, legacy_currency: str | None = None) -> "Limits":
        """Build from stored JSON; unknown keys are an error (a typo must not drop a limit).

        ``legacy_currency``: the currency of money limits stored without one (rows saved before
        limits had a currency); ``None`` keeps them currency-less (re-checking an old record)."""
        d = dict(d or {})
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown limit keys: {', '.join(unknown)}")
        if d.get("currency") is None and legacy_currency is not None and any(d.get(n) is not None for n in MONEY_LIMITS):
            d["currency"] = legacy_currency
        return cls(**d)

    def to_dict(self) -> dict:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True)
class GrantSnapshot:
    """One runtime grant as it was when the decision was taken (stored with the invocation)."""

    grant_id: str
    capability: str
    operation_class: str
    tenant: str
    subject_id: str | None
    scope_kind: str
    scope_values: tuple[str, ...]
    effect: str
    tool_refs: tuple[str, ...]
    limits: Limits
    expires_at: datetime | None
    revoked_at: datetime | None
    # The grant's approval policy, or the ToolSpec's for a grant without one (set by the caller).
    policy: ApprovalPolicy | None = None

    def __post_init__(self) -> None:
        # Fail at snapshot time: a malformed grant must never be half-evaluated.
        if self.operation_class not in OPERATION_CLASSES:
            raise ValueError(f"unknown operation_class {self.operation_class!r}")
        if self.scope_kind not in SCOPE_KINDS:
            raise ValueError(f"unknown scope_kind {self.scope_kind!r}")
        if self.effect not in GRANT_EFFECTS:
            raise ValueError(f"grant effect must be one of {GRANT_EFFECTS}, not {self.effect!r}")
        if not isinstance(self.scope_values, tuple) or not isinstance(self.tool_refs, tuple):
            raise ValueError("scope_values and tool_refs must be tuples")
        if not isinstance(self.limits, Limits):
            raise ValueError("limits must be a Limits instance")
        if self.policy is not None and not isinstance(self.policy, ApprovalPolicy):
            raise ValueError("policy must be an ApprovalPolicy or None")
        _require_aware(self.expires_at, "expires_at")
        _require_aware(self.revoked_at, "revoked_at")

    def to_dict(self) -> dict:
        out = {
            "grant_id": self.grant_id,
            "capability": self.capability,
            "operation_class": self.operation_class,
            "tenant": self.tenant,
            "subject_id": self.subject_id,
            "scope_kind": self.scope_kind,
            "scope_values": list(self.scope_values),
            "effect": self.effect,
            "tool_refs": list(self.tool_refs),
            "limits": self.limits.to_dict(),
            "expires_at": _iso(self.expires_at),
            "revoked_at": _iso(self.revoked_at),
        }
        if self.policy is not None:  # absent, not empty, without one: older records stay byte-equal
            out["approval_policy"] = self.policy.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "GrantSnapshot":
        """Inverse of ``to_dict`` (for re-checking a stored snapshot)."""

        def when(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value is not None else None

        return cls(
            grant_id=d["grant_id"],
            capability=d["capability"],
            operation_class=d["operation_class"],
            tenant=d["tenant"],
            subject_id=d.get("subject_id"),
            scope_kind=d["scope_kind"],
            scope_values=tuple(d.get("scope_values") or ()),
            effect=d["effect"],
            tool_refs=tuple(d.get("tool_refs") or ()),
            limits=Limits.from_dict(d.get("limits")),
            expires_at=when(d.get("expires_at")),
            revoked_at=when(d.get("revoked_at")),
            policy=ApprovalPolicy.from_dict(d.get("approval_policy")),
        )


# --------------------------------------------------------------------------------------------
# Request side
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One capability a ToolSpec requires, with the values resolved from normalized arguments."""

    capability: str
    operation_class: str
    resource: str | None
    amount: int | None = None
    datetimes: tuple[datetime, ...] = ()
    currency: str | None = None  # the amount's currency (ISO 4217), when the ToolSpec says where it is

    def __post_init__(self) -> None:
        if self.operation_class not in OPERATION_CLASSES:
            raise ValueError(f"unknown operation_class {self.operation_class!r}")
        if self.amount is not None and (
            not isinstance(self.amount, int) or isinstance(self.amount, bool) or self.amount < 0
        ):
            raise ValueError("amount must be a non-negative integer (minor units) or None")
        if not isinstance(self.datetimes, tuple):
            raise ValueError("datetimes must be a tuple")
        for value in self.datetimes:
            _require_aware(value, "requirement datetime")


@dataclass(frozen=True)
class Usage:
    """Counters for one grant, *before* the call being decided."""

    calls_last_minute: int = 0
    calls_this_run: int = 0
    amount_in_window: int = 0


@dataclass(frozen=True)
class AuthContext:
    """Who is calling (from the token, never from arguments), with what, and when."""

    tenant: str
    subject_id: str
    tool_ref: str
    now: datetime
    usage: Mapping[str, Usage] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.now is None:
            raise ValueError("now is required")
        _require_aware(self.now, "now")


# --------------------------------------------------------------------------------------------
# Decision
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reason:
    code: str
    grant_id: str | None
    capability: str
    message: str

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "grant_id": self.grant_id,
            "capability": self.capability,
            "message": self.message,
        }


@dataclass(frozen=True)
class Decision:
    effect: Effect
    reasons: tuple[Reason, ...]
    used_grants: tuple[GrantSnapshot, ...]
    approvals_needed: int = 0  # distinct approvers a CONFIRM needs (its policies' largest quorum)
    escalation: Escalation | None = None

    def to_dict(self, *, include_grants: bool = True) -> dict:
        """JSON-able record for the invocation; ``include_grants`` adds the full snapshots."""
        out: dict[str, Any] = {
            "effect": str(self.effect),
            "reasons": [r.to_dict() for r in self.reasons],
            "used_grant_ids": [g.grant_id for g in self.used_grants],
        }
        if self.effect == Effect.CONFIRM:
            out["approvals_needed"] = self.approvals_needed
            out["escalation"] = self.escalation.to_dict() if self.escalation else None
        if include_grants:
            out["used_grants"] = [g.to_dict() for g in self.used_grants]
        return out

    def public_reasons(self) -> list[dict]:
        """What the agent may see: code, capability and message — no grant ids, no grants.

        Reasons about other subjects' grants (``wrong_subject``) are dropped; other tenants'
        grants never produced a reason in the first place. Messages never quote scope values
        or another subject's limits. Duplicates are folded so the list does not reveal how
        many grants were looked at.
        """
        seen: set[tuple[str, str, str]] = set()
        out = []
        for r in self.reasons:
            key = (r.code, r.capability, r.message)
            if r.code in _PRIVATE_CODES or key in seen:
                continue
            seen.add(key)
            out.append({"code": r.code, "capability": r.capability, "message": r.message})
        return out


# --------------------------------------------------------------------------------------------
# Scopes
# --------------------------------------------------------------------------------------------


def _percent_decode(value: str) -> str | None:
    """Decode %XX until stable; None if invalid UTF-8 or still encoded after 3 rounds."""
    current = value
    for _ in range(_MAX_DECODE_ROUNDS + 1):
        try:
            decoded = unquote_to_bytes(current).decode("utf-8")
        except UnicodeError:
            return None
        if decoded == current:
            return current
        current = decoded
    # A fourth layer of encoding has no legitimate use: refuse rather than guess.
    return None


def normalize_path(path: str) -> str | None:
    """Canonical absolute POSIX form of ``path``, or None when it cannot be trusted.

    Percent-decodes until stable (at most 3 rounds, so ``%252e`` → ``%2e`` → ``.``), treats
    backslashes as separators, drops ``.`` and empty segments and resolves ``..`` lexically.
    None for: NUL bytes, invalid UTF-8, a ``..`` that climbs above ``/``, and any relative
    path — the runtime has no working directory to resolve it against, so ``data/x`` is never
    under ``/data``.
    """
    if not isinstance(path, str):
        return None
    decoded = _percent_decode(path)
    if decoded is None or "\x00" in decoded:
        return None
    decoded = decoded.replace("\\", "/")
    if not decoded.startswith("/"):
        return None
    stack: list[str] = []
    for segment in decoded.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not stack:
                return None
            stack.pop()
        else:
            stack.append(segment)
    return "/" + "/".join(stack)


def _path_failure(resource: str | None) -> str:
    """Why a path did not match: ``path_escape`` for traversal/NUL/obfuscation, else mismatch."""
    if not isinstance(resource, str):
        return SCOPE_MISMATCH
    decoded = _percent_decode(resource)
    if decoded is None or "\x00" in decoded:
        return PATH_ESCAPE
    if ".." in decoded.replace("\\", "/").split("/"):
        return PATH_ESCAPE
    return SCOPE_MISMATCH


def _under_prefix(path: str, prefix: str) -> bool:
    # Segment-wise: /data/reports covers /data/reports/x but not /data/reports-old.
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


_HOST_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


def normalize_host(host: str | None) -> str | None:
    """Lowercase, strip one trailing dot, IDNA-encode; None unless a plain DNS name or IP."""
    if not host:
        return None
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in host.split(".")):
        return None
    return host


def extract_host(resource: str | None) -> str | None:
    """The host a URL (or bare ``host[:port][/path]``) points at, normalized; None if unclear.

    ``urllib.parse`` resolves userinfo the way clients do (``https://example.com@evil.com/``
    goes to ``evil.com``). Backslashes, whitespace and control characters are refused outright
    because parsers disagree on them (browsers read ``\\`` as ``/``, urllib does not).
    """
    if not isinstance(resource, str) or not resource:
        return None
    if "\\" in resource or any(ch.isspace() or not ch.isprintable() for ch in resource):
        return None
    target = resource if "://" in resource else "//" + resource
    try:
        parts = urlsplit(target)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return None
    return normalize_host(parts.hostname)


def host_matches(host: str, suffix: str) -> bool:
    if host == suffix:
        return True
    try:
        ipaddress.ip_address(host)
        return False  # IP addresses only ever match exactly: "1.2.3.4" is not under "3.4"
    except ValueError:
        return host.endswith("." + suffix)


DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class UrlParts:
    """A URL as an egress decision sees it: scheme, normalized host, effective port, path."""

    scheme: str
    host: str
    port: int
    path: str  # as written (percent-encoded), never empty
    query: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def url_parts(url: str | None) -> UrlParts | None:
    """``url`` split for a scope or egress check; None when it is not a clean absolute HTTP(S) URL.

    Refused: other schemes, userinfo (``https://a@b/`` — parsers disagree on who the host
    is), a missing or unusable host, a malformed port, whitespace, control characters and
    backslashes anywhere.
    """
    if not isinstance(url, str) or not url or "\\" in url:
        return None
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or "@" in parts.netloc:
        return None
    host = normalize_host(parts.hostname)
    if host is None:
        return None
    return UrlParts(scheme, host, port if port is not None else DEFAULT_PORTS[scheme], parts.path or "/", parts.query)


def url_prefix_matches(prefix: str, url: str | None) -> bool:
    """Is ``url`` under the URL scope ``prefix`` — same scheme, host and port, and a path under
    the prefix's path (segment-wise, after the traversal-safe ``normalize_path``)?

    ``http://127.0.0.1:8765/web/pages/`` covers ``…/web/pages/small`` but neither
    ``…/web/pages-old``, ``…/web/pages/../../_control``, ``https://…``, port 8766 nor
    ``localhost``. A prefix ending in ``/`` covers only what is below it.
    """
    want, got = url_parts(prefix), url_parts(url)
    if want is None or got is None or want.origin != got.origin:
        return False
    path, base = normalize_path(got.path), normalize_path(want.path)
    if path is None or base is None:
        return False
    if want.path.endswith("/") and base != "/":
        return path.startswith(base + "/")
    return _under_prefix(path, base)


def scope_matches(
    kind: str, values: Sequence[str], resource: str | None
) -> tuple[bool, str | None]:
    """Does ``resource`` fall inside the scope? Returns ``(matched, failure code or None)``.

    * ``any``: everything, including no resource.
    * ``exact``: string equality with one of ``values``.
    * ``path_prefix``: both sides through ``normalize_path``; segment-wise prefix.
    * ``domain_suffix``: host of the URL/host equals a suffix or ends with ``"." + suffix``.
      Suffixes are normalized like hosts (a leading dot is ignored; wildcards are not supported).
    * ``glob``: ``fnmatchcase`` — plain string patterns (``*`` also crosses ``/``), so use
      ``path_prefix`` for filesystem paths.
    * ``url_prefix``: ``url_prefix_matches`` — scheme, host and port pinned, path prefix.
    A missing resource matches only ``any``. Unknown kinds fail closed (``invalid_scope``).
    """
    if kind == "any":
        return True, None
    if kind not in SCOPE_KINDS:
        return False, INVALID_SCOPE
    if resource is None:
        return False, SCOPE_MISMATCH
    if kind == "exact":
        matched = resource in values
    elif kind == "glob":
        matched = any(fnmatchcase(resource, pattern) for pattern in values)
    elif kind == "url_prefix":
        matched = any(url_prefix_matches(v, resource) for v in values)
    elif kind == "path_prefix":
        path = normalize_path(resource)
        prefixes = [p for p in (normalize_path(v) for v in values) if p is not None]
        if path is None or not any(_under_prefix(path, p) for p in prefixes):
            return False, _path_failure(resource)
        return True, None
    else:  # domain_suffix
        host = extract_host(resource)
        suffixes = [s for s in (normalize_host(v.lstrip(".")) for v in values) if s is not None]
        matched = host is not None and any(host_matches(host, s) for s in suffixes)
    return (True, None) if matched else (False, SCOPE_MISMATCH)


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

_SCOPE_MESSAGES = {
    SCOPE_MISMATCH: "the resource is outside the granted scope",
    PATH_ESCAPE: "the path escapes the granted prefix (traversal or encoding tricks)",
    INVALID_SCOPE: "the grant has an unusable scope",
}


def grant_failures(
    grant: GrantSnapshot, req: Requirement, ctx: AuthContext
) -> list[tuple[str, str]]:
    """Everything but limits that keeps ``grant`` from covering ``req``, as ``(code, message)``.

    Tenant and subject are checked first and end the evaluation: a grant that isn't the
    caller's is not looked into any further, so nothing about its scope can leak.
    """
    if grant.tenant != ctx.tenant:
        return [(WRONG_TENANT, "the grant belongs to another tenant")]
    if grant.subject_id is not None and grant.subject_id != ctx.subject_id:
        return [(WRONG_SUBJECT, "the grant belongs to another subject")]
    out: list[tuple[str, str]] = []
    if grant.operation_class != req.operation_class:
        needed, granted = req.operation_class, grant.operation_class
        out.append((OPERATION_MISMATCH, f"the call needs {needed}, the grant is for {granted}"))
    if grant.revoked_at is not None:
        # Any revocation counts, even a future-dated one: revocation is never scheduled.
        out.append((GRANT_REVOKED, "the grant was revoked"))
    if grant.expires_at is not None and grant.expires_at <= ctx.now:
        out.append((GRANT_EXPIRED, "the grant has expired"))
    if grant.tool_refs and ctx.tool_ref not in grant.tool_refs:
        out.append((TOOL_VERSION_NOT_PINNED, f"the grant does not cover {ctx.tool_ref}"))
    matched, failure = scope_matches(grant.scope_kind, grant.scope_values, req.resource)
    if not matched:
        out.append((failure or SCOPE_MISMATCH, _SCOPE_MESSAGES[failure or SCOPE_MISMATCH]))
    return out


def limit_failures(
    limits: Limits, req: Requirement, usage: Usage, now: datetime
) -> list[tuple[str, str]]:
    """Limits that the *next* call would break, as ``(code, message)``."""
    out: list[tuple[str, str]] = []
    per_minute, per_run = limits.calls_per_minute, limits.calls_per_run
    if per_minute is not None and usage.calls_last_minute + 1 > per_minute:
        out.append((RATE_LIMITED, f"more than {per_minute} calls per minute"))
    if per_run is not None and usage.calls_this_run + 1 > per_run:
        out.append((RUN_CALL_LIMIT, f"more than {per_run} calls in this run"))
    out += _amount_failures(limits, req.amount, usage.amount_in_window, currency=req.currency)
    lo, hi = limits.time_range_min_seconds, limits.time_range_max_seconds
    too_early = lo is not None and any(dt < now + timedelta(seconds=lo) for dt in req.datetimes)
    too_late = hi is not None and any(dt > now + timedelta(seconds=hi) for dt in req.datetimes)
    if too_early or too_late:
        out.append((TIME_OUT_OF_RANGE, "a date/time in the call is outside the allowed range"))
    return out


def _amount_failures(limits: Limits, amount: int | None, spent: int, *, currency: str | None = None) -> list[tuple[str, str]]:
    per_call, per_window = limits.max_amount_per_call, limits.max_amount_per_window
    if per_call is None and per_window is None:
        return []
    if amount is None:
        # Fail closed: a grant that caps amounts cannot vouch for a call of unknown amount.
        return [(AMOUNT_UNKNOWN, "the grant caps amounts but the call states none")]
    if limits.currency is not None and currency is None:
        return [(AMOUNT_CURRENCY_UNKNOWN, f"the grant caps amounts in {limits.currency} but the call's currency is not known")]
    if limits.currency is not None and currency != limits.currency:
        # Never compare minor units of two currencies: 50000 JPY is not 500.00 EUR.
        return [(AMOUNT_CURRENCY_MISMATCH, f"the call is in {currency}; this grant's amount limits are in {limits.currency}")]
    out = []
    if per_call is not None and amount > per_call:
        out.append((AMOUNT_OVER_CALL_LIMIT, f"amount {amount} exceeds {per_call} per call"))
    if per_window is not None and spent + amount > per_window:
        window = limits.amount_window_seconds
        out.append((AMOUNT_OVER_WINDOW_LIMIT, f"amount would exceed {per_window} per {window}s"))
    return out


@dataclass(frozen=True)
class _Outcome:
    effect: Effect
    reasons: tuple[Reason, ...]
    grant: GrantSnapshot | None
    approvals: int = 0


def _evaluate(req: Requirement, grants: Sequence[GrantSnapshot], ctx: AuthContext) -> _Outcome:
    """Decide one requirement over the (sorted, same-tenant) grants."""
    reasons: list[Reason] = []
    candidates: list[tuple[GrantSnapshot, str, int]] = []  # (grant, effect under its policy, quorum)
    callers_grants = 0

    def note(code: str, grant: GrantSnapshot | None, message: str) -> None:
        reasons.append(Reason(code, grant.grant_id if grant else None, req.capability, message))

    for grant in grants:
        if grant.capability != req.capability:
            continue  # other capabilities are irrelevant, not failures
        failures = grant_failures(grant, req, ctx)
        if failures and failures[0][0] in _PRIVATE_CODES:
            code, message = failures[0]
            note(code, grant, message)
            continue
        callers_grants += 1
        if not failures:
            usage = ctx.usage.get(grant.grant_id) or Usage()
            failures = limit_failures(grant.limits, req, usage, ctx.now)
        for code, message in failures:
            note(code, grant, message)
        if failures:
            continue
        policy = apply_policy(grant.policy, grant_effect=grant.effect, amount=req.amount, currency=req.currency)
        if policy.code:
            note(policy.code, grant, policy.message)
        if policy.effect != Effect.DENY:
            note(GRANT_MATCHED, grant, f"{policy.effect} grant covers the call")
            candidates.append((grant, policy.effect, policy.approvals))

    if not callers_grants:
        note(NO_GRANT, None, f"no grant of {req.capability} for this subject")
    if not candidates:
        return _Outcome(Effect.DENY, tuple(reasons), None)
    # An allow grant makes a confirm grant moot: the subject may already act unconfirmed. Among
    # confirm grants, the one asking the fewest approvers serves (as any one grant would suffice).
    allow = [c for c in candidates if c[1] == Effect.ALLOW]
    grant, effect, approvals = allow[0] if allow else min(candidates, key=lambda c: c[2])
    return _Outcome(Effect(effect), tuple(reasons), grant, approvals)


def _sort_key(grant: GrantSnapshot) -> tuple[str, str]:
    # grant_id first; the full JSON only breaks ties between (buggy) duplicate ids.
    return grant.grant_id, json.dumps(grant.to_dict(), sort_keys=True)


def authorize(
    *, requirements: Sequence[Requirement], grants: Sequence[GrantSnapshot], ctx: AuthContext
) -> Decision:
    """Decide a call: DENY if any requirement is unmet, else CONFIRM if any needs it, else ALLOW.

    ``used_grants`` holds the grant chosen for each requirement, in requirement order, and is
    empty when the call is denied (nothing authorized it).
    """
    if not requirements:
        message = "the tool names no required capability; refusing"
        return Decision(Effect.DENY, (Reason(NO_REQUIREMENTS, None, "", message),), ())
    # Other tenants' grants are dropped before anything looks at them.
    own_tenant = sorted((g for g in grants if g.tenant == ctx.tenant), key=_sort_key)
    outcomes = [_evaluate(req, own_tenant, ctx) for req in requirements]
    reasons = [r for o in outcomes for r in o.reasons]

    if any(o.effect is Effect.DENY for o in outcomes):
        return Decision(Effect.DENY, tuple(reasons), ())
    used = tuple(o.grant for o in outcomes if o.grant is not None)
    confirming = [(req, o) for req, o in zip(requirements, outcomes) if o.effect is Effect.CONFIRM]
    if not confirming:
        return Decision(Effect.ALLOW, tuple(reasons), used)
    reasons += [
        Reason(CONFIRMATION_REQUIRED, o.grant.grant_id, req.capability,
               "a human must confirm" if o.approvals <= 1 else f"{o.approvals} different people must confirm")
        for req, o in confirming
        if o.grant is not None
    ]
    return Decision(
        Effect.CONFIRM, tuple(reasons), used, approvals_needed=max(o.approvals for _, o in confirming),
        escalation=earliest_escalation(o.grant.policy for _, o in confirming if o.grant is not None),
    )
