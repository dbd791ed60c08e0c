"""One confirmation as a machine-readable summary: what the Approvals API lists and webhooks carry.

The words a person reads (values by meaning, why the call needs them, the risk) come from the
same formatter as the console's approver view (``approval_display``), so a chat bot and the
console never disagree about what is being approved.
"""
from __future__ import annotations

from django.conf import settings
from django.urls import reverse

from invocations_app.approval_display import approval_display
from invocations_app.models import Confirmation, Invocation


def record_url(invocation_id) -> str:
    return settings.TOOLOPS_CONSOLE_URL + reverse("support:record", args=[invocation_id])


def confirmation_summary(confirmation: Confirmation) -> dict:
    """The fields the Approvals API lists for a confirmation (plus its state and decision)."""
    display = approval_display(confirmation)
    return {
        "id": str(confirmation.pk),
        "invocation_id": str(confirmation.invocation_id),
        "tool": confirmation.tool_spec.ref,
        "tenant": confirmation.tenant.slug,
        "state": confirmation.state,
        "arguments_display": display["arguments_text"],
        "arguments": [{k: line[k] for k in ("field", "kind", "text", "value")} for line in display["arguments_display"]],
        "normalized_arguments": confirmation.arguments,
        "digest": confirmation.digest,
        "why": display["why"]["text"],
        "risk": display["risk"]["text"],
        "requested_at": confirmation.created_at.isoformat(),
        "expires_at": confirmation.expires_at.isoformat(),
        "approvals_needed": confirmation.approvals_needed,
        "approvals": confirmation.approvals_list(),
        "escalated_at": confirmation.escalated_at.isoformat() if confirmation.escalated_at else None,
        "decided_by": confirmation.decided_by.get_username() if confirmation.decided_by_id else None,
        "decided_at": confirmation.decided_at.isoformat() if confirmation.decided_at else None,
        "reason": confirmation.reason,
        "replacement_invocation_id": str(confirmation.replacement_id) if confirmation.replacement_id else None,
        "record_url": record_url(confirmation.invocation_id),
        "console_url": settings.TOOLOPS_CONSOLE_URL + reverse("confirmations:detail", args=[confirmation.pk]),
    }


def invocation_summary(invocation: Invocation) -> dict:
    """A settled call, as ``invocation.settled`` reports it."""
    return {
        "id": str(invocation.pk),
        "tool": invocation.tool_ref,
        "state": invocation.state,
        "digest": invocation.digest,
        "error_code": invocation.error_code or None,
        "commit_status": invocation.commit_status or None,
        "external_resource_id": invocation.external_resource_id or None,
        "record_url": record_url(invocation.pk),
    }
