"""Human confirmation bound to a digest (SPEC §6): open, approve, deny, expire, approve with edits.

A decision is single-use and race-safe: it is a conditional ``UPDATE … WHERE state = 'pending'
AND expires_at > now``; of two approvers clicking at once exactly one changes a row, and only
that one moves the invocation. The approver's request carries the digest they saw; a
different digest is refused before anything changes.
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from specs_app.selectors import tool_view
from toolops.errors import ApplicationError, Conflict
from toolops.runtime.admission import AdmissionPlan, admit
from toolops.runtime.digest import canonical_json
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.states import State

from .models import Confirmation, Invocation
from .services import (
    TransitionConflict, confirmation_row_create, enqueue_when_committed, event_append, invocation_transition, parser_limits, record_admission,
)


class StaleDigest(Conflict):
    code = "stale_digest"


class AlreadyDecided(Conflict):
    code = "already_decided"


def confirmation_open(*, invocation: Invocation, expires_at: datetime) -> Confirmation:
    """Open the pending confirmation of an AUTHORIZED invocation (inside the caller's transaction)."""
    confirmation = confirmation_row_create(invocation=invocation, expires_at=expires_at)
    event_append(
        invocation=invocation, kind="confirmation_requested",
        data={"confirmation_id": str(confirmation.pk), "digest": invocation.digest, "expires_at": expires_at.isoformat()},
    )
    return confirmation


def _refuse_if_overdue(confirmation: Confirmation, now: datetime) -> None:
    """Expire an overdue confirmation in its own transaction, then refuse the decision."""
    if confirmation.state == Confirmation.Status.PENDING and confirmation.expires_at <= now:
        confirmation_expire(confirmation=confirmation, now=now)
        confirmation.refresh_from_db()
        raise AlreadyDecided(f"confirmation is already {confirmation.state}", extra={"state": confirmation.state})


def _claim(confirmation: Confirmation, *, state: str, user, reason: str, now: datetime, replacement=None) -> None:
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
    _refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        _claim(confirmation, state=Confirmation.Status.APPROVED, user=user, reason=reason, now=now)
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
    return invocation


def confirmation_deny(*, confirmation: Confirmation, user, reason: str) -> Invocation:
    """Deny: the invocation ends AUTHORIZATION_REJECTED (``confirmation_denied``)."""
    if not reason.strip():
        raise ApplicationError("a reason is required to deny", code="reason_required")
    invocation = confirmation.invocation
    now = timezone.now()
    _refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        _claim(confirmation, state=Confirmation.Status.DENIED, user=user, reason=reason, now=now)
        invocation_transition(
            invocation=invocation, src=State.AUTHORIZED, dst=State.AUTHORIZATION_REJECTED, kind="confirmation_denied",
            data={"confirmation_id": str(confirmation.pk), "reason": reason}, actor=f"user:{user.username}",
            fields={"error_code": "confirmation_denied", "error_message": f"a human denied this call: {reason}"},
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
        invocation = Invocation.objects.get(pk=confirmation.invocation_id)
        try:
            with transaction.atomic():  # a savepoint: losing the race keeps the expiry
                invocation_transition(
                    invocation=invocation, src=State.AUTHORIZED, dst=State.CANCELLED_BEFORE_COMMIT,
                    kind="confirmation_expired", data={"confirmation_id": str(confirmation.pk)},
                    fields={"error_code": "confirmation_expired", "error_message": "nobody confirmed the call in time"},
                )
        except TransitionConflict:
            pass  # the call already moved on (e.g. cancelled): only the confirmation expires
    return True


def confirmations_expire_due_for(*, invocation: Invocation, now: datetime | None = None) -> bool:
    """Expire the invocation's pending confirmation if it is past its time (expiry on access)."""
    now = now or timezone.now()
    due = Confirmation.objects.filter(invocation=invocation, state=Confirmation.Status.PENDING, expires_at__lte=now)
    return any([confirmation_expire(confirmation=c, now=now) for c in due.select_related("invocation")])


def confirmations_expire_due(*, now: datetime | None = None, batch: int = 500) -> int:
    """Expire every pending confirmation past its time (beat task and on access)."""
    now = now or timezone.now()
    due = Confirmation.objects.filter(state=Confirmation.Status.PENDING, expires_at__lte=now).select_related("invocation")
    return sum(confirmation_expire(confirmation=c, now=now) for c in due[:batch])


# --- approve with edits -------------------------------------------------------------------

def confirmation_preview_edit(*, confirmation: Confirmation, edited_arguments) -> AdmissionPlan:
    """What the edited arguments become (normalized, digest) under the original's recorded context.

    Nothing is written: the approver reviews the new digest, then confirms it explicitly.
    """
    original = confirmation.invocation
    return admit(
        arguments_bytes=canonical_json(edited_arguments),
        tool=tool_view(original.tool_spec),
        visible_names=[],
        tenant=original.tenant.slug,
        context=NormalizationContext.from_record(original.normalization_context),
        limits=parser_limits(),
    )


def confirmation_approve_with_edits(
    *, confirmation: Confirmation, user, digest_seen: str, edited_arguments, new_digest_seen: str, reason: str
) -> Invocation:
    """Replace the call with edited arguments and approve the *new* digest in one decision.

    The original ends CANCELLED_BEFORE_COMMIT (its tool message will say the arguments were
    changed and point at the replacement); the replacement is a new invocation linked by
    ``edited_from``, authorized like any other, and approved only if ``new_digest_seen`` is the
    digest the edit actually produced.
    """
    if digest_seen != confirmation.digest:
        raise StaleDigest("the arguments changed since you looked: review the new digest", extra={"digest": confirmation.digest})
    if not reason.strip():
        raise ApplicationError("a reason is required to change arguments", code="reason_required")
    _refuse_if_overdue(confirmation, timezone.now())
    plan = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited_arguments)
    if plan.error:
        raise ApplicationError(f"edited arguments rejected: {plan.error['message']}", code="edit_rejected", extra={"error": plan.error})
    if plan.digest != new_digest_seen:
        raise StaleDigest("confirm the digest of the edited arguments", extra={"digest": plan.digest})
    if plan.digest == confirmation.digest:
        return confirmation_approve(confirmation=confirmation, user=user, digest_seen=digest_seen, reason=reason)
    replacement = _replace_invocation(confirmation=confirmation, user=user, plan=plan, reason=reason)
    from .authorization import invocation_authorize  # authorization builds on this module

    invocation_authorize(invocation=replacement)
    replacement.refresh_from_db()
    pending = replacement.confirmations.filter(state=Confirmation.Status.PENDING).first()
    if pending is not None:
        return confirmation_approve(confirmation=pending, user=user, digest_seen=plan.digest, reason=f"edited and approved: {reason}")
    return replacement


def _replace_invocation(*, confirmation: Confirmation, user, plan: AdmissionPlan, reason: str) -> Invocation:
    original = confirmation.invocation
    now = timezone.now()
    with transaction.atomic():
        replacement = record_admission(
            model_call=original.model_call, run=original.run, subject=original.subject,
            proposal_id=f"{original.proposal.proposal_id}#edit-{confirmation.pk.hex[:8]}", name=original.tool_ref,
            arguments_bytes=canonical_json(plan.parsed), spec=original.tool_spec, plan=plan, auth=None,
            context=NormalizationContext.from_record(original.normalization_context), limits=parser_limits(),
            idempotency_key=f"{original.idempotency_key}:edit:{plan.digest[:16]}", trace=None, edited_from=original,
        )
        _claim(confirmation, state=Confirmation.Status.EDITED, user=user, reason=reason, now=now, replacement=replacement)
        invocation_transition(
            invocation=original, src=State.AUTHORIZED, dst=State.CANCELLED_BEFORE_COMMIT, kind="edited_by_approver",
            data={"replacement_invocation_id": str(replacement.pk), "new_digest": plan.digest, "reason": reason},
            actor=f"user:{user.username}",
            fields={"error_code": "cancelled",
                    "error_message": f"an approver changed the arguments; the call continues as invocation {replacement.pk}",
                    "error_detail": {"replacement_invocation_id": str(replacement.pk), "reason": reason}},
        )
    return replacement
