"""The retry matrix of docs/concepts/failures.md as one pure decision: what to do after a failed attempt.

``decide_retry`` looks at how the attempt failed (``failure_class``), what the tool may have
done to the world (``side_effect_class``), how many attempts were made, the ToolSpec's
``RetryPolicy`` and the invocation's deadline, and answers RETRY_NOW, RETRY_AFTER (with a
delay), RECONCILE (find out whether the effect happened before anything else) or STOP.

The matrix (the base action, before budgets are applied):

===================  ============  ================  ============
failure_class        read_only     write_idempotent  write_unsafe
===================  ============  ================  ============
not_reached          retry         retry             retry
rate_limited (429)   retry         retry (same key)  retry
transient (5xx)      retry         retry (same key)  RECONCILE
timeout_unknown      retry         RECONCILE         RECONCILE
business_rejected    STOP          STOP              STOP
permanent            STOP          STOP              STOP
===================  ============  ================  ============

Why each cell:

* ``not_reached`` means the request provably never left for the executor (DNS failure,
  connection refused, circuit open), so nothing can have committed: every class may retry
  with backoff. The retry matrix's "retry, carefully" for ``write_unsafe`` is the same bounded backoff;
  the care lies in the caller only classifying a failure as ``not_reached`` with proof.
* ``rate_limited`` is a 429: a refusal *before* processing. For ``write_unsafe`` this answers
  the matrix's "first decide whether it may have committed" with "it did not", so it retries too.
  ``write_idempotent`` retries re-send the *same* idempotency key (the caller reuses it).
* ``transient`` is a 5xx: the tool may have committed and then failed. Re-sending with the
  same key is safe for ``write_idempotent``; for ``write_unsafe`` a blind retry could
  duplicate the effect, so the answer is RECONCILE (never a blind retry).
* ``timeout_unknown`` (no response, outcome unknown): a read is simply re-read. A write goes
  to OUTCOME_UNKNOWN and is reconciled first — for ``write_idempotent`` by querying by key
  (and re-sending with the same key once the lookup proves absence), for ``write_unsafe``
  by lookup or support staff.
* ``business_rejected`` / ``permanent``: the tool answered "no". Repeating the same call gives
  the same answer; a different call needs new arguments, i.e. a new Proposal, never a retry.
  (Parse, schema and authorization failures never reach this function: they are terminal
  before execution.)

Budgets apply to the retry cells only, in this order: ``policy.non_retryable`` → STOP
("non_retryable"); ``attempt >= policy.maximum_attempts`` → STOP ("max_attempts"); the
deadline → STOP ("deadline"). RECONCILE is never turned into STOP by any of them: an
unknown outcome must still be reconciled, never dropped — even when the class is listed as
non-retryable, the attempts are used up or the deadline has passed.

Backoff is Temporal-style exponential with AWS "full jitter":
``backoff = min(maximum_interval, initial_interval * backoff_coefficient ** (attempt - 1))``,
``delay = random() * backoff``, ``jitter = backoff - delay``. A ``Retry-After`` from the tool
is a floor: ``delay = max(delay, retry_after_seconds)``. When the delay comes out as exactly
0 the action is RETRY_NOW, otherwise RETRY_AFTER. Everything the caller needs for the event
trace (backoff, jitter, Retry-After, delay, reason) is on the returned ``RetryDecision``.

Deterministic given ``random``; stdlib only (no Django, DRF or Celery).
"""
from __future__ import annotations

import math
import random as _random
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Callable

FAILURE_CLASSES = (
    "not_reached", "rate_limited", "transient", "timeout_unknown", "business_rejected", "permanent",
)
SIDE_EFFECT_CLASSES = ("read_only", "write_idempotent", "write_unsafe")


class Action(StrEnum):
    RETRY_NOW = "retry_now"
    RETRY_AFTER = "retry_after"
    RECONCILE = "reconcile"
    STOP = "stop"


# The matrix: (failure_class, side_effect_class) -> (base action, reason). "retry" cells become
# RETRY_NOW / RETRY_AFTER / STOP once budgets and backoff are applied.
_RETRY = "retry"
_MATRIX: dict[tuple[str, str], tuple[str, str]] = {
    ("not_reached", "read_only"): (_RETRY, "not_reached_retry"),
    ("not_reached", "write_idempotent"): (_RETRY, "not_reached_retry"),
    ("not_reached", "write_unsafe"): (_RETRY, "not_reached_retry"),
    ("rate_limited", "read_only"): (_RETRY, "rate_limited_backoff"),
    ("rate_limited", "write_idempotent"): (_RETRY, "rate_limited_backoff"),
    ("rate_limited", "write_unsafe"): (_RETRY, "rate_limited_backoff"),
    ("transient", "read_only"): (_RETRY, "transient_backoff"),
    ("transient", "write_idempotent"): (_RETRY, "transient_backoff"),
    ("transient", "write_unsafe"): (Action.RECONCILE, "transient_may_have_committed"),
    ("timeout_unknown", "read_only"): (_RETRY, "timeout_reread"),
    ("timeout_unknown", "write_idempotent"): (Action.RECONCILE, "unknown_outcome_lookup_by_key"),
    ("timeout_unknown", "write_unsafe"): (Action.RECONCILE, "unknown_outcome_unsafe"),
    ("business_rejected", "read_only"): (Action.STOP, "business_rejected"),
    ("business_rejected", "write_idempotent"): (Action.STOP, "business_rejected"),
    ("business_rejected", "write_unsafe"): (Action.STOP, "business_rejected"),
    ("permanent", "read_only"): (Action.STOP, "permanent"),
    ("permanent", "write_idempotent"): (Action.STOP, "permanent"),
    ("permanent", "write_unsafe"): (Action.STOP, "permanent"),
}


def _finite_number(name: str, value: Any) -> float:
    # bool is an int subclass: True must not silently become 1.0.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """A ToolSpec's ``retry_policy`` (Temporal-style); invalid values raise ValueError."""

    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 60.0
    maximum_attempts: int = 5  # 0 = unlimited (still bounded by the deadline)
    non_retryable: tuple[str, ...] = ()  # failure classes never retried

    def __post_init__(self) -> None:
        initial = _finite_number("initial_interval", self.initial_interval)
        coefficient = _finite_number("backoff_coefficient", self.backoff_coefficient)
        maximum = _finite_number("maximum_interval", self.maximum_interval)
        if initial <= 0:
            raise ValueError("initial_interval must be > 0 seconds")
        if coefficient < 1:
            raise ValueError("backoff_coefficient must be >= 1")
        if maximum < initial:
            raise ValueError("maximum_interval must be >= initial_interval")
        attempts = self.maximum_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ValueError("maximum_attempts must be an integer >= 0 (0 = unlimited)")
        # A bare string would otherwise be read as a tuple of its characters.
        if isinstance(self.non_retryable, str) or not isinstance(self.non_retryable, (list, tuple)):
            raise ValueError("non_retryable must be a list of failure classes")
        unknown = [c for c in self.non_retryable if c not in FAILURE_CLASSES]
        if unknown:
            raise ValueError(
                f"unknown failure class(es) in non_retryable: {unknown!r}; "
                f"expected any of {', '.join(FAILURE_CLASSES)}"
            )
        if len(set(self.non_retryable)) != len(self.non_retryable):
            raise ValueError("non_retryable lists a failure class twice")
        object.__setattr__(self, "initial_interval", initial)
        object.__setattr__(self, "backoff_coefficient", coefficient)
        object.__setattr__(self, "maximum_interval", maximum)
        object.__setattr__(self, "non_retryable", tuple(self.non_retryable))

    @classmethod
    def from_dict(cls, d: dict | None) -> RetryPolicy:
        """Parse a stored ``retry_policy``; None or ``{}`` gives the defaults.

        Unknown keys and bad values raise ValueError, so a typo in a ToolSpec is refused
        rather than quietly replaced by a default.
        """
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ValueError(f"retry_policy must be an object, not {type(d).__name__}")
        allowed = {"initial_interval", "backoff_coefficient", "maximum_interval", "maximum_attempts", "non_retryable"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ValueError(f"unknown retry_policy key(s) {unknown!r}; allowed: {', '.join(sorted(allowed))}")
        return cls(**d)

    def to_dict(self) -> dict:
        return {
            "initial_interval": self.initial_interval,
            "backoff_coefficient": self.backoff_coefficient,
            "maximum_interval": self.maximum_interval,
            "maximum_attempts": self.maximum_attempts,
            "non_retryable": list(self.non_retryable),
        }


@dataclass(frozen=True)
class RetryDecision:
    """What to do next, with every number that went into it (for the event trace)."""

    action: Action
    delay_seconds: float  # 0 for RETRY_NOW / STOP / RECONCILE
    backoff_seconds: float  # the capped exponential backoff, before jitter (0 when not computed)
    jitter_seconds: float  # what full jitter removed from the backoff: backoff - jittered delay
    reason: str  # stable code, e.g. "rate_limited_backoff", "max_attempts", "deadline"
    retry_after_seconds: float | None = None  # the tool's Retry-After floor, when one was given

    def to_dict(self) -> dict:
        return {
            "action": str(self.action),
            "delay_seconds": self.delay_seconds,
            "backoff_seconds": self.backoff_seconds,
            "jitter_seconds": self.jitter_seconds,
            "reason": self.reason,
            "retry_after_seconds": self.retry_after_seconds,
        }


def backoff_seconds(*, attempt: int, policy: RetryPolicy) -> float:
    """``min(maximum_interval, initial_interval * backoff_coefficient ** (attempt - 1))``."""
    try:
        raw = policy.initial_interval * policy.backoff_coefficient ** (attempt - 1)
    except OverflowError:  # a very large attempt number: the cap applies long before
        return policy.maximum_interval
    return min(policy.maximum_interval, raw)


def _stop(reason: str, *, backoff: float = 0.0, jitter: float = 0.0, retry_after: float | None = None) -> RetryDecision:
    return RetryDecision(Action.STOP, 0.0, backoff, jitter, reason, retry_after)


def _check_inputs(failure_class: str, side_effect_class: str, attempt: int, now: datetime, deadline: datetime | None) -> None:
    if failure_class not in FAILURE_CLASSES:
        raise ValueError(f"unknown failure_class {failure_class!r}; expected one of {', '.join(FAILURE_CLASSES)}")
    if side_effect_class not in SIDE_EFFECT_CLASSES:
        raise ValueError(
            f"unknown side_effect_class {side_effect_class!r}; expected one of {', '.join(SIDE_EFFECT_CLASSES)}"
        )
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"attempt must be an integer >= 1 (attempts already made), not {attempt!r}")
    if not isinstance(now, datetime) or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime")
    if deadline is not None and (not isinstance(deadline, datetime) or deadline.utcoffset() is None):
        raise ValueError("deadline must be a timezone-aware datetime or None")


def decide_retry(
    *,
    failure_class: str,
    side_effect_class: str,
    attempt: int,
    policy: RetryPolicy,
    now: datetime,
    deadline: datetime | None,
    retry_after_seconds: float | None = None,
    random: Callable[[], float] = _random.random,
) -> RetryDecision:
    """Decide what follows attempt number ``attempt`` (1-based, already made) that failed.

    ``retry_after_seconds`` is the tool's Retry-After in seconds; a negative value (an
    HTTP-date already in the past) counts as 0. ``random`` must return a float in [0, 1);
    pass a fixed one in tests. Unknown classes, a non-positive attempt or naive datetimes
    raise ValueError. See the module docstring for the matrix and the order of the checks.
    """
    _check_inputs(failure_class, side_effect_class, attempt, now, deadline)
    floor = None
    if retry_after_seconds is not None:
        floor = max(0.0, _finite_number("retry_after_seconds", retry_after_seconds))

    base, reason = _MATRIX[(failure_class, side_effect_class)]
    if base == Action.STOP:
        return _stop(reason, retry_after=floor)
    if base == Action.RECONCILE:
        # Never downgraded by non_retryable, attempts or deadline: the outcome must be found out.
        return RetryDecision(Action.RECONCILE, 0.0, 0.0, 0.0, reason, floor)

    if failure_class in policy.non_retryable:
        return _stop("non_retryable", retry_after=floor)
    if policy.maximum_attempts and attempt >= policy.maximum_attempts:
        return _stop("max_attempts", retry_after=floor)

    backoff = backoff_seconds(attempt=attempt, policy=policy)
    r = random()
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
        raise ValueError(f"random() must return a float in [0, 1), not {r!r}")
    jittered = r * backoff
    jitter = backoff - jittered
    delay = jittered if floor is None else max(jittered, floor)

    # Compare remaining seconds rather than now + timedelta(delay): a huge Retry-After would
    # overflow datetime arithmetic.
    if deadline is not None and delay >= (deadline - now).total_seconds():
        return _stop("deadline", backoff=backoff, jitter=jitter, retry_after=floor)
    action = Action.RETRY_NOW if delay == 0 else Action.RETRY_AFTER
    return RetryDecision(action, delay, backoff, jitter, reason, floor)
