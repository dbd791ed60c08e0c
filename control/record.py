"""The record of one call (``/console/calls/<id>/``): the eight answers of docs/concepts/record.md on one page.

Open to superusers, to staff with the model permission ``invocations_app.view_invocation``, and
to approvers/resolvers of the call's tool (``console.selectors.record_visible_to``).
"""
from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from toolops.runtime.states import State

from invocations_app.approval_display import edit_difference
from invocations_app.models import Confirmation, Invocation
from worker.support import can_resolve
from control.formatting import history_lines, pretty, pretty_text, who
from control.selectors import invocation_record, record_get_for_user


def reasons_by_grant(authorization: dict) -> dict:
    """The decision's reasons split in two (issue 32): those of the grants it used (and those of no
    grant: the tool's own rule, a missing grant) first; those of grants it looked at and did not
    use — another scope, another currency — apart, so they do not read like the call's error.
    Which grant said what is in the record's ``internal`` part (the agent's copy names no grant)."""
    internal = authorization.get("internal") or {}
    reasons = internal.get("reasons") or authorization.get("reasons") or []
    used = {str(g) for g in internal.get("used_grant_ids") or []}
    used |= {str(c.get("grant_id")) for c in authorization.get("capabilities") or [] if c.get("grant_id")}
    if not used:  # nothing matched (a denial): every reason says why, none is "other"
        return {"reasons_matching": reasons, "reasons_other": []}
    matching = [r for r in reasons if not r.get("grant_id") or str(r["grant_id"]) in used]
    return {"reasons_matching": matching, "reasons_other": [r for r in reasons if r not in matching]}


@require_GET
def record_view(request: HttpRequest, pk) -> HttpResponse:
    inv = record_get_for_user(user=request.user, pk=pk)
    record = invocation_record(invocation=inv)
    for event in record.events:
        # One line per event: the timeline stays readable at a glance; the page wraps long lines.
        event.data_json = json.dumps(event.data, ensure_ascii=False, sort_keys=True, default=str)
        event.who = who(event.actor)
    for attempt in record.attempts:
        attempt.duration_ms = (
            round((attempt.ended_at - attempt.started_at).total_seconds() * 1000) if attempt.ended_at else None
        )
        attempt.wait_ms = round((attempt.sent_at - attempt.started_at).total_seconds() * 1000) if attempt.sent_at else None
        attempt.outcome_json = pretty(attempt.outcome)
        attempt.decision_json = pretty(attempt.decision) if attempt.decision else ""
    for confirmation in record.confirmations:
        confirmation.digest_matches = confirmation.digest == inv.digest
    user = request.user
    context = {
        **admin.site.each_context(request),
        "title": f"Record of {inv.tool_ref or inv.proposal.name}",
        "inv": inv,
        "r": record,
        "rendered_json": pretty(record.seen_tool.rendered) if record.seen_tool else "",
        "parsed_json": pretty_text(inv.proposal.parsed_json),
        "parser_json": pretty(inv.proposal.parser),
        "validation_json": pretty(inv.validation),
        "context_json": pretty(inv.normalization_context),
        "trace_json": pretty(inv.normalization_trace),
        "normalized_json": pretty(inv.normalized_arguments),
        "authorization_json": pretty(inv.authorization),
        **reasons_by_grant(inv.authorization or {}),
        "result_json": pretty(inv.result_value) if inv.result_value is not None else "",
        "error_json": pretty(inv.error_detail) if inv.error_detail else "",
        "history": history_lines(record.resolution_events),
        "can_resolve": inv.state == State.OUTCOME_UNKNOWN and can_resolve(user=user, invocation=inv),
        "run_url": reverse("admin:invocations_app_run_change", args=[inv.run_id]) if user.has_perm("invocations_app.view_run") else "",
        "trace_url": (reverse("admin:invocations_app_invocation_changelist") + f"?q={inv.trace_id}")
        if user.has_perm("invocations_app.view_invocation") else "",
        "message_note": _message_note(inv, record),
        "edit": _edit(inv, record),
    }
    return TemplateResponse(request, "admin/support/record.html", context)


def _edit(inv: Invocation, record) -> dict | None:
    """An approver's edit this call is part of: both digests, what changed, who and why."""
    replacement = inv if inv.edited_from_id else (record.edits[0] if record.edits else None)
    if replacement is None:
        return None
    difference = edit_difference(replacement)
    decision = Confirmation.objects.filter(replacement=replacement).select_related("decided_by").first()
    return {**difference, "replacement_id": str(replacement.pk), "is_replacement": replacement.pk == inv.pk,
            "decided_by": decision.decided_by if decision else None, "decided_at": decision.decided_at if decision else None,
            "reason": decision.reason if decision else ""}


def _message_note(inv: Invocation, record) -> str:
    if record.messages:
        return ""
    if inv.state == State.COMMITTED and any(e.kind == "resolved_committed" for e in record.events):
        return "None: support resolved this call as committed after its run had ended, so no tool message was emitted."
    if inv.state == State.FAILED_BEFORE_COMMIT and any(e.kind == "resolved_not_committed" for e in record.events):
        return "None: support resolved this call after its run had ended, so no tool message was emitted."
    if record.edits:
        return "None of its own: an approver edited this call; the edited call's message answers the model's tool-call id."
    if inv.state in (State.PARSE_REJECTED, State.VALIDATION_REJECTED, State.AUTHORIZATION_REJECTED, State.CANCELLED_BEFORE_COMMIT):
        return "None stored: the call ended before rejections stored their messages; the API encodes it from the record on request."
    return f"None yet: the call is {inv.state}; its tool message is written with its final transition."


urlpatterns = [
    path("calls/<uuid:pk>/", admin.site.admin_view(record_view), name="record"),
]
