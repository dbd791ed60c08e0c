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

from toolops.runtime.tracecontext import parse_traceparent
from toolops.tracelog import trace_scope

from invocations_app.budgets import runs_wall_clock_sweep
from invocations_app.confirmations import confirmations_expire_due
from invocations_app.dispatch import EXECUTE_TASK, WEBHOOK_DELIVER_TASK, ready_invocations_sweep
from invocations_app.escalations import confirmations_escalate_due
from worker.attempt import execution_run
from worker.leases import stale_open_attempts
from worker.recovery import claim_for_delivery, reconcile, reconcile_due, recover_abandoned
from invocations_app.retention import binaries_purge_expired
from webhooks.delivery import webhook_deliveries_due, webhook_delivery_attempt
from worker.upstream_sync import REFRESH_TASK, upstream_refresh

logger = logging.getLogger(__name__)


@shared_task(name=EXECUTE_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True, bind=True)
def invocation_execute_task(self, invocation_id: str) -> str:
    """Claim the next attempt and run it; a duplicate or early delivery exits quietly."""
    context = parse_traceparent(getattr(self.request, "traceparent", None) or (self.request.headers or {}).get("traceparent"))
    with trace_scope(context.trace_id if context else None, context.parent_span_id if context else None):
        logger.info("execute %s", invocation_id)
        return _execute(invocation_id)


def _execute(invocation_id: str) -> str:
    outcome, invocation, attempt = claim_for_delivery(invocation_id)
    if attempt is None:
        return outcome
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
    return sum(1 for inv in reconcile_due(limit=100) if reconcile(invocation=inv))


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


@shared_task(name=REFRESH_TASK, ignore_result=True)
def upstream_refresh_task(server_urls: list[str] | None = None) -> dict:
    """Re-list watched MCP servers (every one: the beat; ``server_urls``: an admin's "refresh
    now"); quarantine changed or vanished tools. Returns the counts per new state."""
    return upstream_refresh(server_urls=server_urls)
