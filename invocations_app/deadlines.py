"""When a run's wall clock ends and when a released call must be done by (docs/concepts/execution.md).

Reads only the run and the ToolSpec's timeout policy; the budgets (``budgets.py``) and the
services that release a call (admission, confirmations, authorization) ask here.
"""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from toolops.decisions.deadlines import TimeoutPolicy, call_deadline

from invocations_app.models import Run


def budget_limit(run: Run, key: str):
    value = (run.budgets or {}).get(key)
    return None if value is None else (Decimal(str(value)) if key == "cost" else int(value))


WALL_CLOCK_REASON = "wall_seconds budget exhausted"


def wall_clock_end(run: Run):
    """When the run's wall-clock budget ends (None: no wall-clock budget)."""
    limit = budget_limit(run, "wall_seconds")
    return None if limit is None else run.created_at + timedelta(seconds=limit)


def wall_clock_left(run: Run) -> float | None:
    end = wall_clock_end(run)
    return None if end is None else (end - timezone.now()).total_seconds()


def invocation_deadline(*, spec, run: Run, released_at):
    """A call's deadline when it is released to execute (admission, or a person's approval):
    the earlier of ``released_at + timeout_policy.deadline_seconds`` and the run's wall-clock end."""
    return call_deadline(released_at=released_at, policy=TimeoutPolicy.from_dict(spec.timeout_policy or None),
                         run_wall_end=wall_clock_end(run))
