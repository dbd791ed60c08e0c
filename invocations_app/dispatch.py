"""Hand invocations to the workers: by Celery task *name*, after the current transaction commits.

Services enqueue through here and never import ``tasks``: the task module sits above every
service (its tasks call them), so naming the task keeps imports flowing one way. The message
carries the invocation's W3C ``traceparent`` as a header, so the worker's log lines join the
caller's trace before it has read anything from the database.

Admission never depends on the broker: the call is committed first, and a message that could
not be published (broker down) or was lost (broker restarted empty) is sent again by the
outbox sweep (``ready_invocations_sweep``, run by the beat): the invocation row itself is the
outbox entry. A duplicate message is harmless — the claim (worker/claim.py) admits one attempt
under the row lock, and an attempt whose lease is alive is never touched.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from toolops.celery import BROKER_ERRORS, app
from toolops.runtime.states import State

from invocations_app.models import Confirmation, Invocation

logger = logging.getLogger(__name__)

EXECUTE_TASK = "invocations.execute"
WEBHOOK_DELIVER_TASK = "webhooks.deliver"
# Longest countdown handed to the broker; later retries wait for the beat task
# (``invocations.enqueue_due``), so no ETA outlives Redis' visibility timeout and runs twice.
MAX_COUNTDOWN_SECONDS = 60


def traceparent_of(invocation: Invocation) -> str:
    return f"00-{invocation.trace_id}-{invocation.span_id}-01"


def enqueue_execution(invocation_id, countdown: float = 0.0, traceparent: str | None = None) -> None:
    """Enqueue the execution task after the current transaction commits (never for uncommitted state).

    A broker that is down does not fail the caller: the state is committed, and the sweep
    sends the message once the broker is back."""
    if countdown > MAX_COUNTDOWN_SECONDS:
        return  # the beat task picks it up when due
    if traceparent is None:
        row = Invocation.objects.filter(pk=invocation_id).values("trace_id", "span_id").first()
        traceparent = f"00-{row['trace_id']}-{row['span_id']}-01" if row else None
    transaction.on_commit(lambda: execution_send_or_defer(invocation_id, countdown=countdown, traceparent=traceparent))


def execution_send(invocation_id, *, countdown: float = 0.0, traceparent: str | None = None) -> None:
    """Send the execution message now (callers outside a transaction: the beat task).

    A signature by name runs the registered task's own ``apply_async`` (so eager mode and task
    options apply) and falls back to ``send_task`` where the task is not registered."""
    app.signature(EXECUTE_TASK, args=(str(invocation_id),)).apply_async(
        countdown=max(0.0, countdown) or None, headers={"traceparent": traceparent} if traceparent else None,
    )


def execution_send_or_defer(invocation_id, *, countdown: float = 0.0, traceparent: str | None = None) -> bool:
    """``execution_send``, leaving the message to the sweep when the broker is unavailable."""
    try:
        execution_send(invocation_id, countdown=countdown, traceparent=traceparent)
    except BROKER_ERRORS as exc:
        logger.warning("broker unavailable, invocation %s left to the sweep: %s", invocation_id, exc)
        return False
    return True


def enqueue_when_committed(invocation: Invocation) -> None:
    """Hand a ready invocation (PREPARED, or AUTHORIZED read-only) to the workers after commit."""
    enqueue_execution(invocation.pk, traceparent=traceparent_of(invocation))


def enqueue_webhook_delivery(delivery_id, countdown: float = 0.0) -> None:
    """Send one webhook delivery after the current transaction commits (later retries: the beat)."""
    if countdown > MAX_COUNTDOWN_SECONDS:
        return  # ``webhooks.deliver_due`` picks it up when due
    transaction.on_commit(lambda: webhook_delivery_send(delivery_id, countdown=countdown))


def webhook_delivery_send(delivery_id, *, countdown: float = 0.0) -> None:
    app.signature(WEBHOOK_DELIVER_TASK, args=(str(delivery_id),)).apply_async(countdown=max(0.0, countdown) or None)


# --- the outbox sweep ---------------------------------------------------------------------------

def _ready_to_claim() -> Q:
    """Invocations a worker would claim now if it had a message for them (execution._claimable_src):
    PREPARED, and AUTHORIZED read-only calls that need no confirmation or hold an approval and
    no pending one."""
    confirmations = Confirmation.objects.filter(invocation_id=OuterRef("pk"))
    approved = Exists(confirmations.filter(state=Confirmation.Status.APPROVED)) & ~Exists(
        confirmations.filter(state=Confirmation.Status.PENDING))
    # SQL: a missing key compares as NULL, and NOT NULL is not true; hence the explicit isnull.
    needs_no_person = ~Q(authorization__decision="confirm") | Q(authorization__decision__isnull=True)
    return Q(state=State.PREPARED) | (
        Q(state=State.AUTHORIZED, tool_spec__side_effect_class="read_only") & (needs_no_person | approved)
    )


def ready_invocations_sweep(*, now: datetime | None = None, batch: int | None = None) -> int:
    """Send an execution message for every invocation that should be running and has no live task.

    * ready calls (``_ready_to_claim``) unchanged for ``TOOLOPS_SWEEP_SECONDS``: their message was
      never published or was lost. Each one sent is stamped ``next_attempt_at`` = now + that
      period, so a backlog in the broker is re-sent at most once a period, not every beat;
    * EXECUTING calls whose retry is due (``next_attempt_at`` passed; recovery of an attempt
      whose lease lapsed makes it due too).

    Rows are taken ``FOR UPDATE SKIP LOCKED`` (PostgreSQL): one a worker is claiming right now is
    left alone, and two sweeps never send the same row twice. Bounded by ``batch`` per run.
    Returns how many messages were handed to the broker (sent after the stamp commits)."""
    now = now or timezone.now()
    batch = batch or settings.TOOLOPS_SWEEP_BATCH
    period = timedelta(seconds=settings.TOOLOPS_SWEEP_SECONDS)
    not_stamped_or_due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    stranded = _ready_to_claim() & Q(updated_at__lte=now - period) & not_stamped_or_due
    retry_due = Q(state=State.EXECUTING, next_attempt_at__lte=now)
    with transaction.atomic():
        rows = list(
            Invocation.objects.filter(stranded | retry_due)
            .select_for_update(skip_locked=True, of=("self",))
            .order_by("updated_at")
            .values_list("pk", "state", "trace_id", "span_id")[:batch]
        )
        # An EXECUTING row's next_attempt_at is what makes its retry claimable: left as it is.
        stamped = [pk for pk, state, _, _ in rows if state != State.EXECUTING]
        if stamped:
            Invocation.objects.filter(pk__in=stamped).update(next_attempt_at=now + period)
    sent = 0
    for pk, _, trace_id, span_id in rows:
        if not execution_send_or_defer(pk, traceparent=f"00-{trace_id}-{span_id}-01"):
            break  # the broker is down: the rest waits for the next sweep
        sent += 1
    if rows:
        logger.info("sweep: %s of %s ready or due invocations sent", sent, len(rows))
    return sent
