"""Run budgets (docs/concepts/execution.md): the runtime, not the model, ends the loop.

An exhausted budget refuses *further* work; it never undoes work admitted within it:

* **Counted budgets** — ``model_calls``, ``tool_calls`` (taken at admission), ``cost`` and
  ``result_bytes`` (charged as attempts end). ``model_calls`` / ``tool_calls`` are taken with
  one conditional UPDATE each (``… SET used = used + n WHERE used + n <= limit``), so parallel
  callers racing for the last unit get exactly the allowed number of successes, on any number
  of processes. ``cost`` and ``result_bytes`` are known only after the tool answered: they are
  added unconditionally and end the Run once used up (``cost``) or over (``result_bytes``). A
  refusal ends the Run with its reason; calls already admitted carry on to their honest end —
  their retries included (bounded by their retry policy and deadline).
* **The wall clock** (``wall_seconds`` from the Run's start) is the one budget whose end
  cancels: every call of the run that has not crossed its commit boundary ends
  CANCELLED_BEFORE_COMMIT (one in flight is asked to stop and keeps an effect it already had),
  and no new attempt starts. Each call's deadline is also capped at the wall clock's end
  (``toolops.decisions.deadlines``), so a call waiting for a retry stops there by itself.

``cost`` per attempt is what the executor reported (``ExecutionOutcome.cost``, e.g. the HTTP
executor's ``cost_header``), else the ToolSpec's declared ``executor.cost``; an attempt that
was never sent costs nothing.
"""
from __future__ import annotations

import logging
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from toolops.sql import execute_one, increment_by_pk
from toolops.errors import BudgetExhausted
from toolops.runtime.states import CANCELLABLE, State

from invocations_app.cancellation import run_invocations_cancel
from invocations_app.deadlines import WALL_CLOCK_REASON, budget_limit, wall_clock_end, wall_clock_left  # noqa: F401 (re-exported)
from invocations_app.models import Run

logger = logging.getLogger(__name__)

_USED_FIELD = {"model_calls": "model_calls_used", "tool_calls": "tool_calls_used", "cost": "cost_used"}


def budget_take(*, run: Run, key: str, amount=1) -> None:
    """Take ``amount`` of a counted budget or raise ``BudgetExhausted`` (and end the Run).

    The refusal ends the Run but leaves its admitted calls alone (only the wall clock cancels)."""
    left = wall_clock_left(run)
    if left is not None and left <= 0:
        run_exhaust(run=run, reason=WALL_CLOCK_REASON)
        raise BudgetExhausted("the run's wall-clock budget is used up", extra={"budget": "wall_seconds"})
    field = _USED_FIELD[key]
    limit = budget_limit(run, key)
    qs = Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE)
    if limit is not None:
        qs = qs.filter(**{f"{field}__lte": limit - amount})
    if qs.update(**{field: F(field) + amount}) == 1:
        return
    run.refresh_from_db()
    if run.status == Run.Status.ACTIVE:
        run_exhaust(run=run, reason=f"{key} budget exhausted")
        run.refresh_from_db()
    raise run_refusal(run) if limit is None else BudgetExhausted(
        f"the run's {key} budget is used up", extra={"budget": key, "limit": str(limit)})


def run_refusal(run: Run) -> BudgetExhausted:
    """The error refusing new work in a run a budget ended (names the budget when it can)."""
    budget = run.end_reason.removesuffix(" budget exhausted") if run.end_reason.endswith(" budget exhausted") else None
    return BudgetExhausted(f"the run has ended ({run.end_reason})", extra={"budget": budget})


def budget_give_back(*, run: Run, key: str, amount=1) -> None:
    """Return units taken for a call that was not recorded after all (it lost a race)."""
    field = _USED_FIELD[key]
    Run.objects.filter(pk=run.pk, **{f"{field}__gte": amount}).update(**{field: F(field) - amount})


def budget_add_result_bytes(*, run_id, nbytes: int) -> None:
    """Count a stored result; going over ``result_bytes`` ends the Run (the result itself stands).

    A run known to have no byte cap needs no read back: its count can ride along with other
    writes as ``result_bytes_increment`` (the worker does so)."""
    execute_one(*result_bytes_increment(run_id=run_id, nbytes=nbytes), fetch=False)
    run = Run.objects.only("budgets", "result_bytes_used", "status", "trace_id").get(pk=run_id)
    limit = budget_limit(run, "result_bytes")
    if limit is not None and run.result_bytes_used > limit and run.status == Run.Status.ACTIVE:
        transaction.on_commit(lambda: run_exhaust(run=run, reason="result_bytes budget exhausted"))


def budget_charge_cost(*, run_id, amount: Decimal) -> None:
    """Add what one attempt cost; reaching the ``cost`` limit ends the Run (after this commits).
    The attempt's own result stands either way."""
    if amount <= 0:
        return
    Run.objects.filter(pk=run_id).update(cost_used=F("cost_used") + amount)
    run = Run.objects.only("budgets", "cost_used", "status", "trace_id").get(pk=run_id)
    limit = budget_limit(run, "cost")
    if limit is not None and run.cost_used >= limit and run.status == Run.Status.ACTIVE:
        transaction.on_commit(lambda: run_exhaust(run=run, reason="cost budget exhausted"))


def result_bytes_increment(*, run_id, nbytes: int) -> tuple[str, list]:
    """The UPDATE counting ``nbytes`` of stored result against the run, as ``(sql, params)``,
    so the worker can send it with the result rows (``toolops.sql``)."""
    return increment_by_pk(Run, "result_bytes_used", run_id, nbytes)


def attempt_refusal(run: Run, *, fresh: bool = False) -> tuple[str, str] | None:
    """``(code, message)`` when a new attempt of an admitted call must not start, else None.

    Only the wall clock stops admitted work (``budget_exhausted``), and the agent finishing
    its run (``cancelled``). A run a counted budget ended lets its admitted calls finish."""
    if not fresh:
        run.refresh_from_db(fields=["status", "end_reason"])
    left = wall_clock_left(run)
    if left is not None and left <= 0:
        run_exhaust(run=run, reason=WALL_CLOCK_REASON)
        return "budget_exhausted", WALL_CLOCK_REASON
    if run.status == Run.Status.FINISHED:
        return "cancelled", f"the run was finished before the request was sent ({run.end_reason})"
    return None


def run_exhaust(*, run: Run, reason: str) -> bool:
    """End an active Run as exhausted (True if this call ended it). Only the wall clock also
    cancels the run's calls that have not crossed the boundary — even when another budget
    ended the run earlier; a counted budget never undoes admitted work."""
    ended = Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE).update(
        status=Run.Status.EXHAUSTED, ended_at=timezone.now(), end_reason=reason
    )
    if ended:
        logger.info("run %s exhausted: %s", run.pk, reason, extra={"trace_id": run.trace_id})
    if reason == WALL_CLOCK_REASON:
        run_invocations_cancel(run=run, reason=reason)
    return bool(ended)


def runs_wall_clock_sweep(*, now=None, batch: int = 200) -> int:
    """Exhaust runs whose wall clock ran out while calls of theirs still wait (for a person, a
    retry or a worker), cancelling those calls; returns how many runs it swept. The beat's job:
    without it, only the next request or attempt of the run would notice the clock."""
    now = now or timezone.now()
    waiting = [s.value for s in CANCELLABLE] + [State.EXECUTING]
    candidates = (Run.objects.filter(budgets__has_key="wall_seconds", invocations__state__in=waiting)
                  .exclude(status=Run.Status.FINISHED).distinct().only("pk", "budgets", "created_at", "status", "trace_id"))
    swept = 0
    for run in candidates[:batch]:
        end = wall_clock_end(run)
        if end is not None and end <= now:
            run_exhaust(run=run, reason=WALL_CLOCK_REASON)
            swept += 1
    return swept
