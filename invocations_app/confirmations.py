"""Human confirmation bound to a digest (docs/concepts/confirmation.md): open, approve, deny, expire.

A decision is single-use and race-safe: it is a conditional ``UPDATE … WHERE state = 'pending'
AND expires_at > now``; of two approvers clicking at once exactly one changes a row, and only
that one moves the invocation. The approver's request carries the digest they saw; a
different digest is refused before anything changes.

Quorum (issue 14): a confirmation may need ``approvals_needed`` distinct people. Each approval is
a ``ConfirmationApproval`` row written under a row lock on the confirmation, so approvals of one
confirmation are serialized: the N-th distinct approver decides it (once), an approver who
already approved changes nothing (``duplicate_approver``), and the person the run acts for
(``acts_for``: a user, resolved when the run was opened) is refused outright (``separation_of_duties``).
"""
from __future__ import annotations

import uuid
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from specs_app.models import Subject
from toolops.errors import ApplicationError, Conflict
from toolops.runtime.person_names import person_key_lenient
from toolops.runtime.states import State

from invocations_app.deadlines import invocation_deadline
from invocations_app.dispatch import enqueue_when_committed
from invocations_app.models import Confirmation, ConfirmationApproval, Invocation, Run
from invocations_app.tool_messages import ending_message_rows
from invocations_app.transitions import TransitionConflict, event_append, invocation_transition
from invocations_app import signals


class StaleDigest(Conflict):
    code = "stale_digest"


class AlreadyDecided(Conflict):
    code = "already_decided"


class DuplicateApprover(Conflict):
    code = "duplicate_approver"


class SeparationOfDuties(ApplicationError):
    """The person a run acts for may not approve its calls."""

    code = "separation_of_duties"
    status = 403


def acts_for(run: Run, user) -> bool:
    """Is ``user`` the person ``run`` acts for? Compared by user, never by text: the user the run
    was resolved to when it was opened (``Run.on_behalf_of_user``), or the one an admin has bound
    its agent to since (``Subject.acts_for``: a day's MCP run opened before the binding is covered
    too). A run opened before names were resolved keeps only its text, compared as a reader sees
    it (``person_key_lenient``: case, look-alike letters and invisible characters do not count)."""
    if user.pk is None:
        return False
    bound = Subject.objects.filter(pk=run.subject_id).values_list("acts_for_id", flat=True).first()
    if user.pk in (run.on_behalf_of_user_id, bound):
        return True
    if run.on_behalf_of_user_id is None and run.on_behalf_of:
        names = [name for name in (user.get_username(), getattr(user, "email", "") or "") if name]
        declared = run.on_behalf_of.strip()
        # "user:bob" is how ToolOps itself writes a person (event actors).
        said = {person_key_lenient(declared), person_key_lenient(declared.removeprefix("user:"))}
        return not said.isdisjoint(person_key_lenient(name) for name in names)
    return False


def refuse_if_acting_for(run: Run, user) -> None:
    if acts_for(run, user):
        raise SeparationOfDuties(
            f"{user.get_username()} is the person this run acts for: they cannot approve its calls",
            extra={"on_behalf_of": user.get_username()},
        )


def confirmation_row_create(*, invocation: Invocation, expires_at, confirmation_id=None, **policy) -> Confirmation:
    """Save the pending confirmation of an invocation (caller's transaction)."""
    confirmation = confirmation_row(invocation=invocation, expires_at=expires_at, confirmation_id=confirmation_id, **policy)
    confirmation.save(force_insert=True)
    return confirmation


def confirmation_row(*, invocation: Invocation, expires_at, confirmation_id=None, approvals_needed: int = 1,
                     escalate_at: datetime | None = None, escalation_group: str = "") -> Confirmation:
    """The (unsaved) pending confirmation of an invocation, bound to its digest, with its quorum and escalation."""
    return Confirmation(
        id=confirmation_id or uuid.uuid4(), invocation=invocation, tool_spec_id=invocation.tool_spec_id, tenant_id=invocation.tenant_id,
        subject_id=invocation.subject_id, run_id=invocation.run_id, digest=invocation.digest,
        arguments=invocation.normalized_arguments,
        expires_at=expires_at, approvals_needed=approvals_needed, escalate_at=escalate_at, escalation_group=escalation_group,
    )


def confirmation_open(*, invocation: Invocation, expires_at: datetime, **policy) -> Confirmation:
    """Open the pending confirmation of an AUTHORIZED invocation (inside the caller's transaction)."""
    confirmation = confirmation_row_create(invocation=invocation, expires_at=expires_at, **policy)
    event_append(
        invocation=invocation, kind="confirmation_requested",
        data={"confirmation_id": str(confirmation.pk), "digest": invocation.digest, "expires_at": expires_at.isoformat(),
              **_policy_record(confirmation)},
    )
    signals.confirmation_requested.send(sender=Confirmation, confirmation=confirmation)
    return confirmation


def _policy_record(confirmation: Confirmation) -> dict:
    out = {"approvals_needed": confirmation.approvals_needed} if confirmation.approvals_needed != 1 else {}
    if confirmation.escalate_at:
        out.update(escalate_at=confirmation.escalate_at.isoformat(), escalation_group=confirmation.escalation_group)
    return out


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
    """Record ``user``'s approval of the digest they saw; the N-th distinct one approves the call.

    Below the quorum the approval is recorded (``confirmation_partially_approved``) and the call
    keeps waiting; at the quorum the confirmation is decided once and the invocation moves to
    PREPARED (writes). Refused without any change: another digest (``stale_digest``), the
    person the run acts for (``separation_of_duties``), a second approval by the same person
    (``duplicate_approver``), a decided or overdue confirmation (``already_decided``).
    """
    if digest_seen != confirmation.digest:
        raise StaleDigest("the arguments changed since you looked: review the new digest", extra={"digest": confirmation.digest})
    refuse_if_acting_for(confirmation.run, user)
    invocation = confirmation.invocation
    now = timezone.now()
    refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        approvals = _approval_record(confirmation, user=user, digest=digest_seen, reason=reason, now=now)
        actor = f"user:{user.username}"
        if len(approvals) < confirmation.approvals_needed:
            event_append(invocation=invocation, kind="confirmation_partially_approved", actor=actor, data={
                "confirmation_id": str(confirmation.pk), "digest": digest_seen, "reason": reason,
                "approvals": len(approvals), "approvals_needed": confirmation.approvals_needed,
            })
            return invocation
        decision_claim(confirmation, state=Confirmation.Status.APPROVED, user=user, reason=reason, now=now)
        if invocation.digest != digest_seen:  # defence in depth: the invocation itself changed
            raise StaleDigest("invocation digest differs from the approved one")
        # The call's deadline starts now, not at admission: the person's time is the confirmation's.
        deadline = invocation_deadline(spec=invocation.tool_spec, run=invocation.run, released_at=now)
        data = {"confirmation_id": str(confirmation.pk), "digest": digest_seen, "reason": reason,
                "deadline": deadline.isoformat()}
        if confirmation.approvals_needed > 1:
            data["approved_by"] = approvals
        if invocation.tool_spec.side_effect_class == "read_only":
            Invocation.objects.filter(pk=invocation.pk).update(deadline=deadline)
            invocation.deadline = deadline
            event_append(invocation=invocation, kind="confirmation_approved", data=data, actor=actor)
        else:
            invocation_transition(
                invocation=invocation, src=State.AUTHORIZED, dst=State.PREPARED, kind="confirmation_approved",
                data=data, actor=actor, fields={"deadline": deadline},
            )
        enqueue_when_committed(invocation)
        signals.confirmation_decided.send(sender=Confirmation, confirmation=confirmation)
    return invocation


def _approval_record(confirmation: Confirmation, *, user, digest: str, reason: str, now: datetime) -> list[str]:
    """Lock the confirmation, add ``user``'s approval, return every approver so far (oldest first).

    The row lock serializes the approvers of one confirmation, so "is this the N-th?" is
    answered once per approval and the call is released exactly once.
    """
    locked = Confirmation.objects.select_for_update().only("state", "expires_at").get(pk=confirmation.pk)
    if locked.state != Confirmation.Status.PENDING or locked.expires_at <= now:
        confirmation.refresh_from_db()
        raise AlreadyDecided(f"confirmation is already {confirmation.state}", extra={"state": confirmation.state})
    approvers = list(ConfirmationApproval.objects.filter(confirmation_id=confirmation.pk).order_by("at", "pk")
                     .values_list("user__username", flat=True))
    if user.username in approvers:
        raise DuplicateApprover(
            f"you already approved this call; it needs {confirmation.approvals_needed - len(approvers)} more approver(s)",
            extra={"approvals": len(approvers), "approvals_needed": confirmation.approvals_needed},
        )
    ConfirmationApproval.objects.create(confirmation_id=confirmation.pk, user=user, digest=digest, reason=reason, at=now)
    return approvers + [user.username]


def confirmation_deny(*, confirmation: Confirmation, user, reason: str) -> Invocation:
    """Deny: the invocation ends AUTHORIZATION_REJECTED (``confirmation_denied``)."""
    if not reason.strip():
        raise ApplicationError("a reason is required to deny", code="reason_required")
    invocation = confirmation.invocation
    now = timezone.now()
    refuse_if_overdue(confirmation, now)
    with transaction.atomic():
        decision_claim(confirmation, state=Confirmation.Status.DENIED, user=user, reason=reason, now=now)
        signals.confirmation_decided.send(sender=Confirmation, confirmation=confirmation)  # queued before the call's own "settled"
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
        signals.confirmation_expired.send(sender=Confirmation, confirmation=confirmation)  # queued before the call's own "settled"
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
