"""Approve with edits (docs/concepts/confirmation.md): the approver changes the arguments and approves the new digest.

The edited arguments go through the same chain as a model's proposal — strict parse, schema,
normalization under the original's recorded clock/zone/locale, digest — and the subject's grants
decide them again: an edit can narrow a call, never widen what the agent may do (an edit the
grants would deny is refused before anything changes). The approver's own authority is the
console's ``approve_toolspec`` check; their approval binds the *new* digest.

The original call ends CANCELLED_BEFORE_COMMIT without a tool message of its own: the model's
tool-call id is answered by the replacement, whose message says a person changed the arguments
and what they are now (``tool_messages.edit_notice``).

Maker–checker (``toolops.decisions.approval_policy.edit_requirement``): an edit is new arguments
chosen by a person, so the replacement's confirmation needs as many distinct approvers as the
original or the edited arguments need, whichever is more — the editor's approval counted as
one — and, unless the policies' ``edits`` rule lets the editor narrow alone and the edit only
brings numbers closer to zero, at least two: someone other than the editor must approve it. No
standing approval stands in for them. ``confirmation_edit_requirement`` says so before the
approver submits (the console's edit page shows it).
"""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from specs_app.selectors import tool_view
from toolops.errors import ApplicationError
from toolops.runtime.admission import AdmissionPlan, admit
from toolops.decisions.approval_policy import EditRequirement, edit_requirement
from toolops.decisions.authorization import Decision, Effect
from toolops.runtime.digest import canonical_json
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.states import State

from invocations_app.admission import parser_limits, record_admission
from invocations_app.authorization import authorization_preview, edit_rule, invocation_authorize
from invocations_app.confirmations import StaleDigest, confirmation_approve, decision_claim, refuse_if_acting_for, refuse_if_overdue
from invocations_app.models import Confirmation, Invocation
from invocations_app.transitions import invocation_transition
from invocations_app import signals


def confirmation_preview_edit(*, confirmation: Confirmation, edited_arguments) -> AdmissionPlan:
    """What the edited arguments become (normalized, digest) under the original's recorded context.

    ``edited_arguments`` is a JSON value, or the bytes/text an approver typed (parsed by the same
    strict parser as a model's proposal). Nothing is written: the approver reviews the new
    digest, then confirms it explicitly.
    """
    original = confirmation.invocation
    if isinstance(edited_arguments, str):
        edited_arguments = edited_arguments.encode()
    return admit(
        arguments_bytes=edited_arguments if isinstance(edited_arguments, bytes) else canonical_json(edited_arguments),
        tool=tool_view(original.tool_spec),
        visible_names=[],
        tenant=original.tenant.slug,
        context=NormalizationContext.from_record(original.normalization_context),
        limits=parser_limits(),
    )


def confirmation_edit_authorization(*, confirmation: Confirmation, plan: AdmissionPlan) -> Decision:
    """What the subject's grants say about the edited arguments now (nothing reserved or written)."""
    original = confirmation.invocation
    return authorization_preview(spec=original.tool_spec, tenant=original.tenant, subject=original.subject,
                                 normalized_arguments=plan.normalized_arguments, now=timezone.now())


def confirmation_edit_requirement(*, confirmation: Confirmation, plan: AdmissionPlan, decision: Decision) -> EditRequirement:
    """Who must release the edited arguments ``plan`` (``decision``: what the grants say of them)."""
    spec = confirmation.tool_spec
    return edit_requirement(
        rule=edit_rule(spec=spec, decision=decision, authorization=confirmation.invocation.authorization),
        original_approvals=confirmation.approvals_needed,
        edited_approvals=decision.approvals_needed if decision.effect == Effect.CONFIRM else 0,
        before=confirmation.arguments, after=plan.normalized_arguments,
        resource_pointers=[entry.get("resource_pointer") for entry in spec.required_capabilities or []],
    )


def confirmation_approve_with_edits(
    *, confirmation: Confirmation, user, digest_seen: str, edited_arguments, new_digest_seen: str, reason: str
) -> Invocation:
    """Replace the call with edited arguments and approve the *new* digest in one decision.

    The original ends CANCELLED_BEFORE_COMMIT (its tool message will say the arguments were
    changed and point at the replacement); the replacement is a new invocation linked by
    ``edited_from``, authorized like any other, and approved only if ``new_digest_seen`` is the
    digest the edit actually produced. An edit the subject's grants would deny is refused
    (``edit_not_authorized``) and nothing changes. The editor's approval is the replacement's
    first; it waits (AUTHORIZED) for the others ``confirmation_edit_requirement`` names. Returns
    the replacement (PREPARED / EXECUTING once released; the worker runs it once).
    """
    if digest_seen != confirmation.digest:
        raise StaleDigest("the arguments changed since you looked: review the new digest", extra={"digest": confirmation.digest})
    if not reason.strip():
        raise ApplicationError("a reason is required to change arguments", code="reason_required")
    refuse_if_acting_for(confirmation.run, user)  # an edit is an approval: never by the person the run acts for
    refuse_if_overdue(confirmation, timezone.now())
    plan = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited_arguments)
    if plan.error:
        raise ApplicationError(f"edited arguments rejected: {plan.error['message']}", code="edit_rejected", extra={"error": plan.error})
    if plan.digest != new_digest_seen:
        raise StaleDigest("confirm the digest of the edited arguments", extra={"digest": plan.digest})
    if plan.digest == confirmation.digest:
        return confirmation_approve(confirmation=confirmation, user=user, digest_seen=digest_seen, reason=reason)
    decision = confirmation_edit_authorization(confirmation=confirmation, plan=plan)
    if decision.effect == Effect.DENY:
        reasons = decision.public_reasons()
        raise ApplicationError("the edited call would not be authorized: " + ", ".join(sorted({r["code"] for r in reasons})),
                               code="edit_not_authorized", extra={"reasons": reasons})
    needs = confirmation_edit_requirement(confirmation=confirmation, plan=plan, decision=decision)
    replacement = _replace_invocation(confirmation=confirmation, user=user, plan=plan, reason=reason, needs=needs)
    invocation_authorize(invocation=replacement, approvals_floor=needs.approvals_needed)
    replacement.refresh_from_db()
    # The floor opens a confirmation unless the grants deny after all (a limit spent since the preview).
    pending = replacement.confirmations.filter(state=Confirmation.Status.PENDING).first()
    if pending is None:
        return replacement
    return confirmation_approve(confirmation=pending, user=user, digest_seen=plan.digest, reason=f"edited and approved: {reason}")


def _replace_invocation(*, confirmation: Confirmation, user, plan: AdmissionPlan, reason: str,
                        needs: EditRequirement) -> Invocation:
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
        # No tool message of its own: the replacement answers the model's tool-call id.
        invocation_transition(
            invocation=original, src=State.AUTHORIZED, dst=State.CANCELLED_BEFORE_COMMIT, kind="edited_by_approver",
            data={"replacement_invocation_id": str(replacement.pk), "old_digest": original.digest,
                  "new_digest": plan.digest, "reason": reason, "approvals_needed": needs.approvals_needed,
                  "second_person": needs.second_person, "changes": list(needs.changes), "edit_rule": needs.rule},
            actor=f"user:{user.username}",
            fields={"error_code": "cancelled",
                    "error_message": f"an approver changed the arguments; the call continues as invocation {replacement.pk}",
                    "error_detail": {"replacement_invocation_id": str(replacement.pk), "reason": reason}},
        )
        confirmation.replacement = replacement
        signals.confirmation_decided.send(sender=Confirmation, confirmation=confirmation)
    return replacement
