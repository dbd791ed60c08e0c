"""Cancellation (docs/concepts/lifecycle.md): by the agent, and of a run's open calls when its budget is exhausted.

Before the commit boundary a call ends CANCELLED_BEFORE_COMMIT and nothing is sent; while an
attempt is in flight the request is recorded and honoured only if the outcome proves nothing
was committed; after the boundary the effect stands.
"""
from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from toolops.errors import Conflict
from toolops.runtime.states import CANCELLABLE, State

from invocations_app.models import Confirmation, Invocation, Run
from invocations_app.tool_messages import ending_message_rows
from invocations_app.transitions import TransitionConflict, event_append, invocation_transition

logger = logging.getLogger(__name__)


def invocation_cancel(*, invocation: Invocation, actor: str, reason: str = "") -> Invocation:
    """Cancel (docs/concepts/lifecycle.md). Before the commit boundary: CANCELLED_BEFORE_COMMIT, nothing is sent.
    While an attempt is in flight: recorded, honoured only if the outcome proves nothing was
    committed. After the boundary (or when it may have been crossed): ``Conflict`` — the effect
    stands and only later steps stop."""
    invocation.refresh_from_db()
    if invocation.state == State.EXECUTING:
        if _cancel_between_attempts(invocation, actor=actor, reason=reason):
            invocation.refresh_from_db()
            return invocation
        updated = Invocation.objects.filter(pk=invocation.pk, state=State.EXECUTING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=timezone.now()
        )
        if updated:
            event_append(invocation=invocation, kind="cancel_requested", data={"reason": reason}, actor=actor)
        invocation.refresh_from_db()
        return invocation
    if State(invocation.state) not in CANCELLABLE:
        raise Conflict(
            f"invocation is {invocation.state}; it can no longer be cancelled (the effect, if any, stands)",
            code="not_cancellable", extra={"state": invocation.state},
        )
    try:
        with transaction.atomic():
            error = {"error_code": "cancelled", "error_message": reason or "cancelled before the commit boundary"}
            invocation_transition(
                invocation=invocation, src=invocation.state, dst=State.CANCELLED_BEFORE_COMMIT, kind="cancelled",
                data={"reason": reason}, actor=actor,
                # next_attempt_at: a stamp the outbox sweep may have left (dispatch.py); nothing is due now.
                fields={**error, "next_attempt_at": None}, rows=ending_message_rows(invocation, **error),
            )
            # A confirmation still waiting for a human has nothing left to decide.
            Confirmation.objects.filter(invocation=invocation, state=Confirmation.Status.PENDING).update(
                state=Confirmation.Status.CANCELLED, decided_at=timezone.now(), reason=reason or "call cancelled"
            )
    except TransitionConflict:
        invocation.refresh_from_db()
        raise Conflict(
            f"invocation moved to {invocation.state} meanwhile", code="not_cancellable", extra={"state": invocation.state}
        ) from None
    return invocation


def _cancel_between_attempts(invocation: Invocation, *, actor: str, reason: str) -> bool:
    """EXECUTING with no attempt in flight (waiting for a retry): nothing is crossing the
    boundary now, so the call ends here, FAILED_BEFORE_COMMIT ``cancelled`` (the only edge out
    of EXECUTING that says so). The row lock orders this against the worker's claim, which
    opens an attempt under the same lock: either the claim sees the call ended, or this sees
    the attempt open and only records the request."""
    with transaction.atomic():
        locked = Invocation.objects.select_for_update().filter(pk=invocation.pk, state=State.EXECUTING).first()
        if locked is None or locked.attempts.filter(ended_at__isnull=True).exists():
            return False
        error = {"error_code": "cancelled", "error_message": reason or "cancelled between attempts; nothing was in flight"}
        invocation_transition(
            invocation=invocation, src=State.EXECUTING, dst=State.FAILED_BEFORE_COMMIT, kind="cancelled",
            data={"reason": reason, "between_attempts": True}, actor=actor,
            fields={**error, "commit_status": "not_committed", "result_status": "error", "next_attempt_at": None,
                    "observed_at": timezone.now()},
            rows=ending_message_rows(invocation, **error),
        )
    return True


def run_invocations_cancel(*, run: Run, reason: str) -> None:
    """Cancel every call of an ended run that has not crossed its commit boundary (budget exhaustion)."""
    pending = Invocation.objects.filter(run_id=run.pk, state__in=[s.value for s in CANCELLABLE] + [State.EXECUTING])
    for invocation in pending:
        try:
            invocation_cancel(invocation=invocation, actor="runtime:budget", reason=f"run budget exhausted: {reason}")
        except Conflict:  # it moved on (e.g. committed): the effect stands
            logger.info("invocation %s not cancelled on exhaustion (state moved on)", invocation.pk)
