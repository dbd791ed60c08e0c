"""The support console: the unknown-outcome queue and its actions (docs/concepts/lifecycle.md).

Thin views: reads through ``control.selectors``, decisions through the worker's ``support`` (``worker.support``).
Every view runs inside ``admin.site.admin_view`` (active staff login, CSRF, never cached). Who sees
and acts on an unknown outcome is django-guardian's ``resolve_toolspec`` on the ToolSpec, checked
again on every POST (403, nothing changes).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from toolops.errors import ApplicationError
from toolops.runtime.states import State

from invocations_app.models import Invocation
from worker.support import (
    AlreadyResolved, resolution_confirm, resolution_lookup, resolution_mark_committed, resolution_mark_not_committed,
    resolution_reject, resolution_resend,
)
from control.formatting import age, history_lines, lookup_answer_text, render_arguments
from control.queues import queue_page
from control.selectors import unknown_filter_choices, unknown_outcome_count, unknown_outcome_get_for_user, unknown_outcome_queue_list


def _annotate_row(inv: Invocation, now, user) -> Invocation:
    inv.arguments_text = render_arguments(inv.normalized_arguments)
    inv.age_text = age(inv.created_at, now)
    inv.unknown_for = age(inv.unknown_since, now)
    inv.history_lines = history_lines(inv.history)
    inv.last_error = inv.error_message or inv.error_code
    if inv.last_attempt is not None:
        inv.last_attempt.error = ((inv.last_attempt.outcome or {}).get("error") or {}) if isinstance(inv.last_attempt.outcome, dict) else {}
    if inv.last_lookup is not None:
        d = inv.last_lookup.data or {}
        inv.last_lookup_text = lookup_answer_text(d.get("committed"), d.get("detail"), d.get("external_resource_id"))
        # A look-up that found the effect pre-fills "mark committed" with the id the tool gave.
        inv.prefill_external_id = (d.get("external_resource_id") or "") if d.get("committed") else ""
    inv.can_resend = inv.tool_spec.side_effect_class == "write_idempotent"
    inv.run_live = inv.run.status == "active"
    inv.is_proposer = bool(inv.pending and inv.pending.proposed_by_id == user.pk)
    return inv


# --- the queue -------------------------------------------------------------------------------

@require_GET
def queue_view(request: HttpRequest) -> HttpResponse:
    def rows(tool, tenant) -> dict:
        now = timezone.now()
        found = unknown_outcome_queue_list(user=request.user, tool=tool, tenant=tenant)
        annotated = [_annotate_row(inv, now, request.user) for inv in found]
        return {"rows": annotated, "oldest": age(annotated[0].created_at, now) if annotated else "",
                "awaiting_second": sum(1 for r in annotated if r.pending)}

    return queue_page(request, template="admin/support/unknown_queue.html", title="Unknown-outcome queue",
                      heading="Unknown outcomes", badge_label="to resolve", clear_url_name="support:unknown_queue",
                      filters_hint="A timeout is not evidence that nothing happened: look it up, or mark it with evidence.",
                      filter_choices=unknown_filter_choices, rows=rows)


@require_GET
def count_view(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"unknown": unknown_outcome_count(user=request.user)})


# --- actions -------------------------------------------------------------------------------------

REFUSALS = {
    "reason_required": "a reason is required",
    "evidence_required": "evidence is required (what you checked, and where)",
    "external_resource_id_required": "the external resource id is required to mark a call committed",
}


def _refused(request: HttpRequest, inv: Invocation, verb: str, exc: ApplicationError) -> HttpResponse:
    if isinstance(exc, AlreadyResolved):
        messages.warning(request, f"Not {verb}: {exc.message}.")
    else:
        messages.error(request, f"Not {verb} ({inv.tool_ref}, {str(inv.pk)[:8]}): {REFUSALS.get(exc.code, exc.message)}.")
    return _back(request, inv)


def _back(request: HttpRequest, inv: Invocation | None = None) -> HttpResponse:
    """Back to the queue the form was posted from (its filters kept), at the row when it is still there."""
    target = request.POST.get("next", "")
    if not (target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure())):
        target = reverse("support:unknown_queue")
    return redirect(f"{target.split('#')[0]}#unknown-{inv.pk}" if inv is not None else target)


def _resolvable(request: HttpRequest, pk) -> Invocation:
    """The invocation, 403 (before anything changes) unless ``user`` may resolve it."""
    return unknown_outcome_get_for_user(user=request.user, pk=pk)


@require_POST
def lookup_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        found = resolution_lookup(invocation=inv, user=request.user, reason=request.POST.get("reason", ""))
    except ApplicationError as exc:
        return _refused(request, inv, "looked up", exc)
    messages.info(request, f"Look-up for {inv.tool_ref} ({str(inv.pk)[:8]}) answered: "
                           f"{lookup_answer_text(found.committed, found.detail, found.external_resource_id)}. Nothing was changed.")
    return _back(request, inv)


def _applied_message(request: HttpRequest, inv: Invocation, label: str, resolution) -> HttpResponse:
    if resolution.outcome == "proposed":
        messages.success(request, f"Proposed “{label}” for {inv.tool_ref}: under the four-eyes rule a second person "
                                  f"must confirm it before anything changes.")
        return _back(request, inv)
    tail = ("a tool message was given back to the run" if resolution.message_emitted
            else "the run has ended, so no tool message was emitted")
    messages.success(request, f"Resolved {inv.tool_ref} ({label}): invocation {inv.pk} is {resolution.state}; {tail}.")
    return _back(request)


@require_POST
def mark_committed_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        resolution = resolution_mark_committed(
            invocation=inv, user=request.user, external_resource_id=request.POST.get("external_resource_id", ""),
            evidence=request.POST.get("evidence", ""), reason=request.POST.get("reason", ""),
        )
    except ApplicationError as exc:
        return _refused(request, inv, "marked committed", exc)
    return _applied_message(request, inv, "mark committed", resolution)


@require_POST
def mark_not_committed_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        resolution = resolution_mark_not_committed(
            invocation=inv, user=request.user, evidence=request.POST.get("evidence", ""), reason=request.POST.get("reason", ""),
        )
    except ApplicationError as exc:
        return _refused(request, inv, "marked not committed", exc)
    return _applied_message(request, inv, "mark not committed", resolution)


@require_POST
def confirm_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        resolution = resolution_confirm(invocation=inv, user=request.user, proposal_seq=request.POST.get("proposal_seq"),
                                        reason=request.POST.get("reason", ""))
    except ApplicationError as exc:
        return _refused(request, inv, "confirmed", exc)
    return _applied_message(request, inv, "confirmed resolution", resolution)


@require_POST
def reject_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        pending = resolution_reject(invocation=inv, user=request.user, proposal_seq=request.POST.get("proposal_seq"),
                                    reason=request.POST.get("reason", ""))
    except ApplicationError as exc:
        return _refused(request, inv, "rejected", exc)
    messages.success(request, f"Rejected the proposal of {pending.proposed_by} (“{pending.label}”): the call stays OUTCOME_UNKNOWN.")
    return _back(request, inv)


@require_POST
def resend_view(request: HttpRequest, pk) -> HttpResponse:
    inv = _resolvable(request, pk)
    try:
        after = resolution_resend(invocation=inv, user=request.user, reason=request.POST.get("reason", ""))
    except ApplicationError as exc:
        return _refused(request, inv, "re-sent", exc)
    if after.state == State.OUTCOME_UNKNOWN:
        messages.warning(request, f"Re-sent {inv.tool_ref} with key {after.idempotency_key}: the outcome is still unknown.")
        return _back(request, inv)
    messages.success(request, f"Re-sent {inv.tool_ref} with the same key {after.idempotency_key}: invocation {inv.pk} is {after.state}.")
    return _back(request)


urlpatterns = [
    path("unknown-outcomes/", admin.site.admin_view(queue_view), name="unknown_queue"),
    path("unknown-outcomes/count.json", admin.site.admin_view(count_view), name="unknown_count"),
    path("unknown-outcomes/<uuid:pk>/lookup", admin.site.admin_view(lookup_view), name="lookup"),
    path("unknown-outcomes/<uuid:pk>/mark-committed", admin.site.admin_view(mark_committed_view), name="mark_committed"),
    path("unknown-outcomes/<uuid:pk>/mark-not-committed", admin.site.admin_view(mark_not_committed_view), name="mark_not_committed"),
    path("unknown-outcomes/<uuid:pk>/confirm", admin.site.admin_view(confirm_view), name="confirm"),
    path("unknown-outcomes/<uuid:pk>/reject", admin.site.admin_view(reject_view), name="reject"),
    path("unknown-outcomes/<uuid:pk>/resend", admin.site.admin_view(resend_view), name="resend"),
]
