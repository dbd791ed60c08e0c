"""A call's deadline (docs/concepts/execution.md) and a ToolSpec's ``timeout_policy``, as pure decisions.

Every invocation gets one wall-clock deadline when it is released to execute: at admission
for a call that needs nobody, at approval for one that waited for a person (a confirmation
has its own expiry; the minutes a person takes must not eat the tool's own time). It is the
earlier of

* the release time + ``timeout_policy.deadline_seconds`` (Temporal's *schedule-to-close*:
  every attempt, backoff and Retry-After wait of the call fits inside it), and
* the end of the run's wall-clock budget (``created_at + budgets.wall_seconds``), which no
  call of the run may outlive.

The deadline bounds the retry policy: ``maximum_attempts: 0`` means "unlimited attempts",
never "forever" — the attempts stop at the deadline. Each attempt is also capped at
``attempt_timeout_seconds`` and never runs past the deadline.

Stdlib only (no Django, DRF or Celery).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

DEFAULT_ATTEMPT_TIMEOUT_SECONDS = 10.0
# Without a deadline_seconds a call still ends: an unlimited retry policy must not retry forever.
DEFAULT_DEADLINE_SECONDS = 300.0
# datetime arithmetic overflows past year 9999: anything beyond this is "no bound" in practice.
_MAX_SECONDS = 10 * 365 * 24 * 3600.0


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0")
    return min(value, _MAX_SECONDS)


@dataclass(frozen=True)
class TimeoutPolicy:
    """A ToolSpec's ``timeout_policy``; invalid values raise ValueError."""

    attempt_timeout_seconds: float = DEFAULT_ATTEMPT_TIMEOUT_SECONDS
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS

    @classmethod
    def from_dict(cls, d: dict | None) -> TimeoutPolicy:
        """Parse a stored ``timeout_policy``; None or ``{}`` gives the defaults. Unknown keys are refused."""
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise ValueError(f"timeout_policy must be an object, not {type(d).__name__}")
        allowed = {"attempt_timeout_seconds", "deadline_seconds"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ValueError(f"unknown timeout_policy key(s) {unknown!r}; allowed: {', '.join(sorted(allowed))}")
        values = {k: _positive(k, v) for k, v in d.items()}
        return cls(**values)


def call_deadline(*, released_at: datetime, policy: TimeoutPolicy, run_wall_end: datetime | None) -> datetime:
    """The earlier of ``released_at + deadline_seconds`` and the run's wall-clock end."""
    own = released_at + timedelta(seconds=policy.deadline_seconds)
    return own if run_wall_end is None else min(own, run_wall_end)
