"""Celery tasks: thin, fetch by id, call a service; safe to deliver twice.

Delivery settings (toolops/settings.py) are chosen for docs/concepts/lifecycle.md:
``acks_late`` + ``reject_on_worker_lost``: a message is acknowledged only after the task
returns, so a worker killed mid-attempt gets its message redelivered instead of lost. That
redelivery can never blindly re-run a write: the claim is a state transition, and an attempt
that started and never ended is handed to ``recover_abandoned`` (sent writes become
OUTCOME_UNKNOWN). Redis' ``visibility_timeout`` (1 h) is far above any countdown we use —
retries are scheduled in the database (``next_attempt_at``) and a beat task re-enqueues due
work, so no ETA ever outlives the visibility timeout and runs twice.
"""
from __future__ import annotations

import logging
from celery import shared_task
from django.utils import timezone

from toolops.runtime.states import State
from toolops.runtime.tracecontext import parse_traceparent
from toolops.tracelog import trace_scope

from invocations_app.budgets import runs_wall_clock_sweep
from invocations_app.confirmations import confirmations_expire_due
from invocations_app.dispatch import EXECUTE_TASK, WEBHOOK_DELIVER_TASK, enqueue_execution, ready_invocations_sweep
from invocations_app.escalations import confirmations_escalate_due
from worker.execution import attempt_lease_lapsed, claim_or_inspect, execution_run, open_attempt, reconcile, recover_abandoned, stale_open_attempts
from invocations_app.models import Invocation
from invocations_app.retention import binaries_purge_expired
from webhooks.delivery import webhook_deliveries_due, webhook_delivery_attempt

logger = logging.getLogger(__name__)


@shared_task(name=EXECUTE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True, bind=True)
def invocation_execute_task(self, invocation_id: str) -> str:
    """Claim the next attempt and run it; a duplicate or early delivery exits quietly."""
    context = parse_traceparent(getattr(self.request, "traceparent", None) or (self.request.headers or {}).get("traceparent"))
    with trace_scope(context.trace_id if context else None, context.parent_span_id if context else None):
        logger.info("execute %s", invocation_id)
        return _execute(invocation_id)


def _execute(invocation_id: str) -> str:
    # Claim first: the usual delivery finds a ready invocation and needs no other read. Only
    # an EXECUTING one can hold an open attempt (a due retry has closed its last one).
    invocation, attempt = claim_or_inspect(invocation_id)
    if invocation is None:
        logger.warning("execute: no invocation %s (stale message)", invocation_id)
        return "missing"
    if attempt is None and invocation.state == State.EXECUTING:
        stale = open_attempt(invocation)
        if stale is not None:
            if not attempt_lease_lapsed(stale):
                # Its worker is alive (it renews the lease): look again once the lease could lapse.
                wait = (stale.lease_expires_at - timezone.now()).total_seconds() if stale.lease_expires_at else 5.0
                enqueue_execution(invocation.pk, countdown=max(1.0, wait + 1.0))
                return "in_flight"
            recover_abandoned(invocation=invocation, attempt=stale)
            invocation, attempt = claim_or_inspect(invocation_id)
    if attempt is None:
        return "nothing_to_do"
    execution_run(invocation=invocation, attempt=attempt)
    return "ran"


@shared_task(name="invocations.enqueue_due", ignore_result=True)
def executions_enqueue_due_task() -> int:
    """Periodic: recover attempts whose worker died (lease lapsed), then the outbox sweep sends
    every call that should be running and has no live task (dispatch.ready_invocations_sweep)."""
    for attempt in stale_open_attempts():
        recover_abandoned(invocation=attempt.invocation, attempt=attempt)
    return ready_invocations_sweep()


@shared_task(name="invocations.reconcile", ignore_result=True)
def invocations_reconcile_task() -> int:
    """Periodic: look up OUTCOME_UNKNOWN write_idempotent calls whose reconciliation is due."""
    # next_attempt_at is set on OUTCOME_UNKNOWN only for calls that reconcile by lookup.
    due = Invocation.objects.filter(
        state=State.OUTCOME_UNKNOWN, tool_spec__side_effect_class__in=("write_idempotent", "write_unsafe"),
        next_attempt_at__lte=timezone.now(),
    ).select_related("tool_spec")[:100]
    return sum(1 for inv in due if reconcile(invocation=inv))


@shared_task(name="invocations.confirmations_expire_due", ignore_result=True)
def confirmations_expire_due_task() -> int:
    """Periodic: expire pending confirmations past their time (each expiry is race-safe)."""
    return confirmations_expire_due()



@shared_task(name="invocations.runs_wall_clock", ignore_result=True)
def runs_wall_clock_task() -> int:
    """Periodic: a run whose wall clock ran out cancels its calls that have not crossed the boundary."""
    return runs_wall_clock_sweep()


@shared_task(name="invocations.confirmations_escalate_due", ignore_result=True)
def confirmations_escalate_due_task() -> int:
    """Periodic: escalate pending confirmations nobody decided within their policy's time."""
    return confirmations_escalate_due()


@shared_task(name=WEBHOOK_DELIVER_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def webhook_deliver_task(delivery_id: str) -> str:
    """One try of one webhook delivery; a duplicate or early message loses the claim and exits."""
    return webhook_delivery_attempt(delivery_id=delivery_id)


@shared_task(name="invocations.purge_expired_binaries", ignore_result=True)
def purge_expired_binaries_task() -> int:
    """Periodic: drop the bytes of binary results past their retention (the rows stay)."""
    return binaries_purge_expired()


@shared_task(name="webhooks.deliver_due", ignore_result=True)
def webhooks_deliver_due_task() -> int:
    """Periodic: re-send due webhook retries and deliveries abandoned mid-send."""
    return webhook_deliveries_due()
