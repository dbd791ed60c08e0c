"""Approve with edits (SPEC §6): the approver changes the arguments and approves the new digest.

The original call ends CANCELLED_BEFORE_COMMIT; the replacement is admitted like any proposal
(``admission.record_admission``, the same chain checks) and authorized like any call.
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from specs_app.selectors import tool_view
from toolops.errors import ApplicationError
from toolops.runtime.admission import AdmissionPlan, admit
from toolops.runtime.digest import canonical_json
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.states import State

from .admission import parser_limits, record_admission
from .authorization import invocation_authorize
from .confirmations import StaleDigest, confirmation_approve, decision_claim, refuse_if_overdue
from .models import Confirmation, Invocation
from .tool_messages import ending_message_rows
from .transitions import invocation_transition
from .webhooks import webhook_confirmation_decided


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
    refuse_if_overdue(confirmation, timezone.now())
    plan = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited_arguments)
    if plan.error:
        raise ApplicationError(f"edited arguments rejected: {plan.error['message']}", code="edit_rejected", extra={"error": plan.error})
    if plan.digest != new_digest_seen:
        raise StaleDigest("confirm the digest of the edited arguments", extra={"digest": plan.digest})
    if plan.digest == confirmation.digest:
        return confirmation_approve(confirmation=confirmation, user=user, digest_seen=digest_seen, reason=reason)
    replacement = _replace_invocation(confirmation=confirmation, user=user, plan=plan, reason=reason)
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
        decision_claim(confirmation, state=Confirmation.Status.EDITED, user=user, reason=reason, now=now, replacement=replacement)
        error = {"error_code": "cancelled",
                 "error_message": f"an approver changed the arguments; the call continues as invocation {replacement.pk}"}
        invocation_transition(
            invocation=original, src=State.AUTHORIZED, dst=State.CANCELLED_BEFORE_COMMIT, kind="edited_by_approver",
            data={"replacement_invocation_id": str(replacement.pk), "new_digest": plan.digest, "reason": reason},
            actor=f"user:{user.username}",
            fields={**error, "error_detail": {"replacement_invocation_id": str(replacement.pk), "reason": reason}},
            rows=ending_message_rows(original, **error),
        )
        confirmation.replacement = replacement
        webhook_confirmation_decided(confirmation)
    return replacement
