"""Hand invocations to the workers: by Celery task *name*, after the current transaction commits.

Services enqueue through here and never import ``tasks``: the task module sits above every
service (its tasks call them), so naming the task keeps imports flowing one way. The message
carries the invocation's W3C ``traceparent`` as a header, so the worker's log lines join the
caller's trace before it has read anything from the database.
"""
from __future__ import annotations

from django.db import transaction

from toolops.celery import app

from .models import Invocation

EXECUTE_TASK = "invocations.execute"
WEBHOOK_DELIVER_TASK = "webhooks.deliver"
# Longest countdown handed to the broker; later retries wait for the beat task
# (``invocations.enqueue_due``), so no ETA outlives Redis' visibility timeout and runs twice.
MAX_COUNTDOWN_SECONDS = 60


def traceparent_of(invocation: Invocation) -> str:
    return f"00-{invocation.trace_id}-{invocation.span_id}-01"


def enqueue_execution(invocation_id, countdown: float = 0.0, traceparent: str | None = None) -> None:
    """Enqueue the execution task after the current transaction commits (never for uncommitted state)."""
    if countdown > MAX_COUNTDOWN_SECONDS:
        return  # the beat task picks it up when due
    if traceparent is None:
        row = Invocation.objects.filter(pk=invocation_id).values("trace_id", "span_id").first()
        traceparent = f"00-{row['trace_id']}-{row['span_id']}-01" if row else None
    transaction.on_commit(lambda: execution_send(invocation_id, countdown=countdown, traceparent=traceparent))


def execution_send(invocation_id, *, countdown: float = 0.0, traceparent: str | None = None) -> None:
    """Send the execution message now (callers outside a transaction: the beat task).

    A signature by name runs the registered task's own ``apply_async`` (so eager mode and task
    options apply) and falls back to ``send_task`` where the task is not registered."""
    app.signature(EXECUTE_TASK, args=(str(invocation_id),)).apply_async(
        countdown=max(0.0, countdown) or None, headers={"traceparent": traceparent} if traceparent else None,
    )


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
