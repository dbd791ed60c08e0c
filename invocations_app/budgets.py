"""Run budgets (SPEC §11): the runtime, not the model, ends the loop.

Counted budgets (``model_calls``, ``tool_calls``, ``cost``) are taken with one conditional
UPDATE each (``… SET used = used + n WHERE used + n <= limit``), so parallel callers racing for
the last unit get exactly the allowed number of successes — on any number of processes.
``wall_seconds`` is checked against the Run's start; ``result_bytes`` is added after a result is
stored and ends the Run once over. Exhaustion ends the Run with the reason, cancels what has not
crossed its commit boundary, and lets in-flight attempts finish honestly.
"""
from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F
from django.utils import timezone

from toolops.db_batch import execute_one
from toolops.errors import BudgetExhausted

from .cancellation import run_invocations_cancel
from .models import Run

logger = logging.getLogger(__name__)

_USED_FIELD = {"model_calls": "model_calls_used", "tool_calls": "tool_calls_used", "cost": "cost_used"}


def _limit(run: Run, key: str):
    value = (run.budgets or {}).get(key)
    return None if value is None else (Decimal(str(value)) if key == "cost" else int(value))


def wall_clock_left(run: Run) -> float | None:
    limit = _limit(run, "wall_seconds")
    if limit is None:
        return None
    return (run.created_at + timedelta(seconds=limit) - timezone.now()).total_seconds()


def budget_take(*, run: Run, key: str, amount=1) -> None:
    """Take ``amount`` of a counted budget or raise ``BudgetExhausted`` (and end the Run)."""
    left = wall_clock_left(run)
    if left is not None and left <= 0:
        run_exhaust(run=run, reason="wall_seconds budget exhausted")
        raise BudgetExhausted("the run's wall-clock budget is used up", extra={"budget": "wall_seconds"})
    field = _USED_FIELD[key]
    limit = _limit(run, key)
    qs = Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE)
    if limit is not None:
        qs = qs.filter(**{f"{field}__lte": limit - amount})
    if qs.update(**{field: F(field) + amount}) == 1:
        return
    run.refresh_from_db()
    if run.status == Run.Status.ACTIVE:
        run_exhaust(run=run, reason=f"{key} budget exhausted")
    raise BudgetExhausted(
        f"the run's {key} budget is used up" if limit is not None else f"the run has ended ({run.end_reason})",
        extra={"budget": key, "limit": str(limit) if limit is not None else None},
    )


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
    limit = _limit(run, "result_bytes")
    if limit is not None and run.result_bytes_used > limit and run.status == Run.Status.ACTIVE:
        transaction.on_commit(lambda: run_exhaust(run=run, reason="result_bytes budget exhausted"))


def result_bytes_increment(*, run_id, nbytes: int) -> tuple[str, list]:
    """The UPDATE counting ``nbytes`` of stored result against the run, as ``(sql, params)``,
    so the worker can send it with the result rows (``toolops.db_batch``)."""
    conn = connections[DEFAULT_DB_ALIAS]  # the wrapper itself, not the per-access proxy
    quote = conn.ops.quote_name
    column = quote(Run._meta.get_field("result_bytes_used").column)
    return (
        f"UPDATE {quote(Run._meta.db_table)} SET {column} = {column} + %s WHERE {quote(Run._meta.pk.column)} = %s",
        [int(nbytes), Run._meta.pk.get_db_prep_value(run_id, conn)],
    )


def attempt_refusal(run: Run, *, fresh: bool = False) -> str | None:
    """Why a new attempt must not start (checked before each attempt), or None."""
    if not fresh:
        run.refresh_from_db(fields=["status", "end_reason"])
    if run.status != Run.Status.ACTIVE:
        return f"the run has ended ({run.end_reason})"
    left = wall_clock_left(run)
    if left is not None and left <= 0:
        run_exhaust(run=run, reason="wall_seconds budget exhausted")
        return "wall_seconds budget exhausted"
    return None


def run_exhaust(*, run: Run, reason: str) -> bool:
    """End an active Run as exhausted; cancel its invocations that have not crossed the boundary."""
    ended = Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE).update(
        status=Run.Status.EXHAUSTED, ended_at=timezone.now(), end_reason=reason
    )
    if not ended:
        return False
    logger.info("run %s exhausted: %s", run.pk, reason, extra={"trace_id": run.trace_id})
    run_invocations_cancel(run=run, reason=reason)
    return True
