"""``Prefer: return=minimal`` (RFC 7240) on a proposals POST: the compact answer.

The full answer is the invocation's record (~3 KB of JSON: proposal, normalization trace,
authorization, attempts…); what an agent loop needs right after posting is what to hand the model
and whether to wait. The compact answer per call: ``id``, ``state``, ``tool``, ``digest``, the
pending confirmation (id, expiry) if any, the error if rejected, and ``tool_message`` — the
message for the model in the model call's format as ``GET …/tool-message`` would answer it now
(the final message, or the honest interim one while a person decides), or ``null`` while it runs.
"""
from __future__ import annotations

import json

from rest_framework import serializers

from invocations_app.models import Confirmation, Invocation
from invocations_app.tool_messages import current_messages


def prefers_minimal(request) -> bool:
    """``Prefer: return=minimal`` among the request's preferences (tokens are case-insensitive)."""
    preferences = request.headers.get("Prefer", "").split(",")
    return any(item.split(";")[0].replace(" ", "").lower() == "return=minimal" for item in preferences)


def invocations_minimal(invocations: list[Invocation], *, fmt: str) -> dict:
    """The compact answer of each invocation (by id); their tool messages are read together, so a
    batch of tool calls costs the reads of one (confirmations: prefetched by the caller)."""
    messages = current_messages(invocations=invocations, fmt=fmt)
    return {inv.pk: _minimal(inv, messages[inv.pk]) for inv in invocations}


def _minimal(inv: Invocation, current: tuple[str, bytes] | None) -> dict:
    pending = next((c for c in inv.confirmations.all() if c.state == Confirmation.Status.PENDING), None)
    return {
        "id": str(inv.pk),
        "state": inv.state,
        "tool": inv.tool_ref or None,
        "digest": inv.digest or None,
        "confirmation": {"id": str(pending.pk), "expires_at": pending.expires_at.isoformat()} if pending else None,
        "error": {"code": inv.error_code, "message": inv.error_message} if inv.error_code else None,
        "tool_message": json.loads(current[1]) if current else None,
    }


class InvocationMinimalOut(serializers.Serializer):
    """A proposal's compact answer (``Prefer: return=minimal``)."""

    id = serializers.UUIDField()
    state = serializers.CharField()
    tool = serializers.CharField(allow_null=True, help_text="name@version")
    digest = serializers.CharField(allow_null=True)
    confirmation = serializers.DictField(allow_null=True, help_text="the pending confirmation: id, expires_at")
    error = serializers.DictField(allow_null=True, help_text="code and message of a rejection")
    tool_message = serializers.JSONField(allow_null=True, help_text="the message for the model now, in the model "
                                         "call's format; null while the call runs")
