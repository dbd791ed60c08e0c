"""Human confirmation bound to a digest (SPEC §6): open, approve, deny, expire.

A decision is single-use and race-safe: it is a conditional ``UPDATE … WHERE state = 'pending'
AND expires_at > now``; of two approvers clicking at once exactly one changes a row, and only
that one moves the invocation. The approver's request carries the digest they saw; a
different digest is refused before anything changes.
"""
from __future__ import annotations

import uuid
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from toolops.errors import ApplicationError, Conflict
from toolops.runtime.states import State

from .dispatch import enqueue_when_committed
from .models import Confirmation, Invocation
from .tool_messages import ending_message_rows
from .transitions import TransitionConflict, event_append, invocation_transition
from .webhooks import webhook_confirmation_decided, webhook_confirmation_expired, webhook_confirmation_requested


class StaleDigest(Conflict):
    code = "stale_digest"


class AlreadyDecided(Conflict):
    code = "already_decided"


def confirmation_row_create(*, invocation: Invocation, expires_at, confirmation_id=None) -> Confirmation:
    """Save the pending confirmation of an invocation (caller's transaction)."""
    confirmation = confirmation_row(invocation=invocation, expires_at=expires_at, confirmation_id=confirmation_id)
    confirmation.save(force_insert=True)
    return confirmation


def confirmation_row(*, invocation: Invocation, expires_at, confirmation_id=None) -> Confirmation:
    """The (unsaved) pending confirmation of an invocation, bound to its digest."""
    return Confirmation(
        id=confirmation_id or uuid.uuid4(), invocation=invocation, tool_spec_id=invocation.tool_spec_id, tenant_id=invocation.tenant_id,
        subject_id=invocation.subject_id, run_id=invocation.run_id, digest=invocation.digest,
        arguments=invocation.normalized_arguments,
        expires_at=expires_at,
    )


def confirmation_open(*, invocation: Invocation, expires_at: datetime) -> Confirmation:
    """Open the pending confirmation of an AUTHORIZED invocation (inside the caller's transaction)."""
    confirmation = confirmation_row_create(invocation=invocation, expires_at=expires_at)
    event_append(
        invocation=invocation, kind="confirmation_requested",
        data={"confirmation_id": str(confirmation.pk), "digest": invocation.digest, "expires_at": expires_at.isoformat()},
    )
    webhook_confirmation_requested(confirmation)
    return confirmation


def refuse_if_overdue(confirmation: Confirmation, now: datetime) -> None:
    """Expire an overdue confirmation in its own transaction, then refuse the decision."""
    if confirmation.state == Confirmation.Status.PENDING and confirmation.expires_at <= now:
        confirmation_expire(confirmation=confirmation, now=now)
        confirmation.refresh_from_db()
        raise AlreadyDecided(f"confirmation is already {confirmation.state}", extra={"state": confirmation.state})


def decision_claim(confirmation: Confirmation, *, state: str, user, reason: str, now: datetime, replacement=None) -> None:
    """The single-use step: only one caller turns a pending, unexpired confirmation into ``state``."""
    changed = Confirmation.objects.filter(pk=confirmation.pk, state=Confirmation.Status.PENDING, expires_at__gt=now).update(
        state=state, decided_by=user, decided_at=now, reason=reason, replacement=replacement
    )
    if changed != 1:
        confirmation.refresh_from_db()
        raise AlreadyDecided(f"confirmation is already {confirmation.state}", extra={"state": confirmation.state})
    confirmation.state, confirmation.decided_by, confirmation.decided_at, confirmation.reason = state, user, now, reason


def confirmation_approve(*, confirmation: Confirmation, user, digest_seen: str, reason: str = "") -> Invocation:
    """Approve the digest the approver saw; the invocation moves to PREPARED (writes)."""
    if digest_seen != confirmation.digest:
        raise StaleDigest("the arguments changed since you looked: review the new digest", extra={"digest": confirmation.digest})
    invocation = confirmation.invocation
    now = timezone.now()
    refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        decision_claim(confirmation, state=Confirmation.Status.APPROVED, user=user, reason=reason, now=now)
        if invocation.digest != digest_seen:  # defence in depth: the invocation itself changed
            raise StaleDigest("invocation digest differs from the approved one")
        data = {"confirmation_id": str(confirmation.pk), "digest": digest_seen, "reason": reason}
        actor = f"user:{user.username}"
        if invocation.tool_spec.side_effect_class == "read_only":
            event_append(invocation=invocation, kind="confirmation_approved", data=data, actor=actor)
        else:
            invocation_transition(
                invocation=invocation, src=State.AUTHORIZED, dst=State.PREPARED, kind="confirmation_approved",
                data=data, actor=actor,
            )
        enqueue_when_committed(invocation)
        webhook_confirmation_decided(confirmation)
    return invocation


def confirmation_deny(*, confirmation: Confirmation, user, reason: str) -> Invocation:
    """Deny: the invocation ends AUTHORIZATION_REJECTED (``confirmation_denied``)."""
    if not reason.strip():
        raise ApplicationError("a reason is required to deny", code="reason_required")
    invocation = confirmation.invocation
    now = timezone.now()
    refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        decision_claim(confirmation, state=Confirmation.Status.DENIED, user=user, reason=reason, now=now)
        webhook_confirmation_decided(confirmation)  # queued before the call's own "settled"
        error = {"error_code": "confirmation_denied", "error_message": f"a human denied this call: {reason}"}
        invocation_transition(
            invocation=invocation, src=State.AUTHORIZED, dst=State.AUTHORIZATION_REJECTED, kind="confirmation_denied",
            data={"confirmation_id": str(confirmation.pk), "reason": reason}, actor=f"user:{user.username}",
            fields=error, rows=ending_message_rows(invocation, **error),
        )
    return invocation


def confirmation_expire(*, confirmation: Confirmation, now: datetime | None = None) -> bool:
    """Expire one pending confirmation past its time; the invocation is CANCELLED_BEFORE_COMMIT."""
    now = now or timezone.now()
    with transaction.atomic():
        changed = Confirmation.objects.filter(
            pk=confirmation.pk, state=Confirmation.Status.PENDING, expires_at__lte=now
        ).update(state=Confirmation.Status.EXPIRED, decided_at=now)
        if changed != 1:
            return False
        confirmation.state, confirmation.decided_at = Confirmation.Status.EXPIRED, now
        webhook_confirmation_expired(confirmation)  # queued before the call's own "settled"
        invocation = Invocation.objects.get(pk=confirmation.invocation_id)
        try:
            with transaction.atomic():  # a savepoint: losing the race keeps the expiry
                error = {"error_code": "confirmation_expired", "error_message": "nobody confirmed the call in time"}
                invocation_transition(
                    invocation=invocation, src=State.AUTHORIZED, dst=State.CANCELLED_BEFORE_COMMIT,
                    kind="confirmation_expired", data={"confirmation_id": str(confirmation.pk)},
                    fields=error, rows=ending_message_rows(invocation, **error),
                )
        except TransitionConflict:
            pass  # the call already moved on (e.g. cancelled): only the confirmation expires
    return True


def confirmations_expire_due(*, now: datetime | None = None, batch: int = 500) -> int:
    """Expire every pending confirmation past its time (the beat task; reads never expire anything)."""
    now = now or timezone.now()
    due = Confirmation.objects.filter(state=Confirmation.Status.PENDING, expires_at__lte=now).select_related("invocation")
    return sum(confirmation_expire(confirmation=c, now=now) for c in due[:batch])
