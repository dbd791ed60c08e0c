"""One confirmation as a machine-readable summary: what the Approvals API lists and webhooks carry.

``approval_display`` is the small, swappable part: the text a person reads (the arguments and
why the call needs them). The console's approver-view formatter can replace it without
touching the API or the webhooks.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from django.conf import settings
from django.urls import reverse

from .models import Confirmation, Invocation


@dataclass(frozen=True)
class ApprovalDisplay:
    arguments_display: str
    why: str


def approval_display(confirmation: Confirmation) -> ApprovalDisplay:
    """What the approver reads: ``field: value`` lines, and the authorization's reasons."""
    arguments = confirmation.arguments
    if isinstance(arguments, dict):
        text = "\n".join(
            f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)}"
            for key, value in sorted(arguments.items())
        )
    else:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    authorization = confirmation.invocation.authorization or {}
    reasons = [r.get("message") or r.get("code", "") for r in authorization.get("reasons") or [] if isinstance(r, dict)]
    why = "; ".join(r for r in reasons if r) or f"authorization decided '{authorization.get('decision', 'confirm')}'"
    return ApprovalDisplay(arguments_display=text, why=why)


def record_url(invocation_id) -> str:
    return settings.TOOLOPS_CONSOLE_URL + reverse("support:record", args=[invocation_id])


def confirmation_summary(confirmation: Confirmation) -> dict:
    """The fields API.md lists for a confirmation (plus its state and decision)."""
    display = approval_display(confirmation)
    return {
        "id": str(confirmation.pk),
        "invocation_id": str(confirmation.invocation_id),
        "tool": confirmation.tool_spec.ref,
        "tenant": confirmation.tenant.slug,
        "state": confirmation.state,
        "arguments_display": display.arguments_display,
        "normalized_arguments": confirmation.arguments,
        "digest": confirmation.digest,
        "why": display.why,
        "requested_at": confirmation.created_at.isoformat(),
        "expires_at": confirmation.expires_at.isoformat(),
        # From the quorum feature when present; one approval otherwise.
        "approvals_needed": getattr(confirmation, "approvals_needed", 1),
        "approvals": _approvals(confirmation),
        "decided_by": confirmation.decided_by.get_username() if confirmation.decided_by_id else None,
        "decided_at": confirmation.decided_at.isoformat() if confirmation.decided_at else None,
        "reason": confirmation.reason,
        "replacement_invocation_id": str(confirmation.replacement_id) if confirmation.replacement_id else None,
        "record_url": record_url(confirmation.invocation_id),
        "console_url": settings.TOOLOPS_CONSOLE_URL + reverse("confirmations:detail", args=[confirmation.pk]),
    }


def _approvals(confirmation: Confirmation) -> list:
    """The partial approvals so far (quorum feature), as usernames or plain values."""
    approvals = getattr(confirmation, "approvals", None) or []
    if hasattr(approvals, "all"):  # a related manager
        approvals = approvals.all()
    out = []
    for a in approvals:
        user = getattr(a, "user", None) or getattr(a, "approved_by", None)
        out.append(user.get_username() if user is not None else a if isinstance(a, (str, int, dict)) else str(a))
    return out


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
