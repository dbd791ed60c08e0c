"""The confirmation console: queue, detail page, approve/deny, and a live pending count.

Thin views: scope and read through ``control.selectors``, decide through the domain services in
``invocations_app.confirmations``. Every view runs inside ``admin.site.admin_view`` (active staff login, CSRF
protection, never cached); which confirmations a user sees and may decide is django-guardian's
``approve_toolspec`` on the ToolSpec, checked again on every POST (403, nothing changes).
"""
from __future__ import annotations

from datetime import datetime

from django.contrib import admin, messages
from django.db.models import prefetch_related_objects
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from toolops.errors import ApplicationError

from invocations_app.approval_display import approval_display
from invocations_app.confirmations import AlreadyDecided, StaleDigest, acts_for, confirmation_approve, confirmation_deny
from invocations_app.models import Confirmation, Invocation
from invocations_app.standing_approvals import (
    MAX_STANDING_MINUTES, call_currency, standing_approval_grant, standing_approval_revoke,
)
from control.formatting import pretty, time_left
from control.params import queue_filters
from control.queues import queue_page
from control.selectors import (
    confirmation_detail_events, confirmation_get_for_user, confirmation_pending_count, confirmation_queue_list,
    console_filter_choices, standing_approval_get_for_user, standing_approvals_for,
)


def _annotate(confirmations: list[Confirmation], now: datetime) -> list[Confirmation]:
    """Countdown, short digest and the approver's reading of each (``approval_display``)."""
    prefetch_related_objects(confirmations, "invocation__proposal", "invocation__edited_from__proposal")
    for c in confirmations:
        c.time_left = time_left(c.expires_at, now) if c.state == Confirmation.Status.PENDING else ""
        c.short_digest = c.digest[:12]
        c.display = approval_display(c)
        c.arguments_text = c.display["arguments_text"]
    return confirmations


@require_GET
def queue_view(request: HttpRequest) -> HttpResponse:
    def rows(tool, tenant) -> dict:
        queue = confirmation_queue_list(user=request.user, tool=tool, tenant=tenant)
        now = timezone.now()
        return {
            "pending": _annotate(queue.pending, now),
            "decided": _annotate(queue.decided, now),
            "oldest_waiting": queue.pending[0].created_at if queue.pending else None,
            "next_expiry": queue.next_expiry,
            "pending_total": queue.pending_total,
            "count_url": reverse("confirmations:count") + (f"?{request.GET.urlencode()}" if request.GET else ""),
        }

    return queue_page(request, template="admin/confirmations/queue.html", title="Confirmation queue",
                      badge_label="pending", clear_url_name="confirmations:queue",
                      filters_hint="You see the tools you may approve. Counts refresh every 5 s.",
                      filter_choices=console_filter_choices, rows=rows)


@require_GET
def detail_view(request: HttpRequest, pk) -> HttpResponse:
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)
    _annotate([confirmation], timezone.now())
    events = confirmation_detail_events(confirmation=confirmation)
    for event in events:
        event.data_json = pretty(event.data)
    context = {
        **admin.site.each_context(request),
        "title": f"Confirmation for {confirmation.tool_spec.ref}",
        "c": confirmation,
        "arguments_json": pretty(confirmation.arguments),
        "context_json": pretty(confirmation.invocation.normalization_context),
        "events": events,
        "can_view_invocation": request.user.has_perm("invocations_app.view_invocation"),
        # Approval policies: who approved so far, whether this user is the person the run acts for,
        # and the run's standing approvals for this tool.
        "approvals": confirmation.approvals_list(),
        "you_approved": confirmation.approvals.filter(user=request.user).exists(),
        "acting_for": acts_for(confirmation.run, request.user),
        "standing": standing_approvals_for(confirmation=confirmation, now=timezone.now()),
        "max_standing_minutes": MAX_STANDING_MINUTES,
        # The amount cap is typed as the call's amount was written, in its currency (not minor units).
        "standing_currency": call_currency(confirmation),
    }
    return TemplateResponse(request, "admin/confirmations/detail.html", context)


@require_GET
def count_view(request: HttpRequest) -> JsonResponse:
    tool, tenant = queue_filters(request)
    return JsonResponse({"pending": confirmation_pending_count(user=request.user, tool=tool, tenant=tenant)})


@require_POST
def approve_view(request: HttpRequest, pk) -> HttpResponse:
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)  # 403 before anything changes
    try:
        invocation = confirmation_approve(
            confirmation=confirmation, user=request.user, digest_seen=request.POST.get("digest_seen", ""),
            reason=request.POST.get("reason", "").strip(),
        )
    except StaleDigest:
        messages.error(
            request,
            f"Not approved: the digest you saw ({request.POST.get('digest_seen', '')[:12] or 'none'}) is not the one "
            f"awaiting approval ({confirmation.digest[:12]}). Review the arguments below before deciding.",
        )
        return redirect("confirmations:detail", pk=confirmation.pk)
    except ApplicationError as exc:
        return _refused(request, confirmation, "approved", exc)
    messages.success(request, _approved_text(confirmation, invocation))
    return redirect(_next_url(request))


def _approved_text(confirmation: Confirmation, invocation: Invocation) -> str:
    confirmation.refresh_from_db(fields=["state"])
    if confirmation.state == Confirmation.Status.PENDING:  # a partial approval of a quorum
        have, need = confirmation.approvals.count(), confirmation.approvals_needed
        return (f"Your approval of {confirmation.tool_spec.ref} ({confirmation.digest[:12]}) is recorded: {have} of {need}; "
                f"the call runs when {need - have} more person(s) approve.")
    return f"Approved {confirmation.tool_spec.ref} ({confirmation.digest[:12]}): invocation {invocation.pk} is {invocation.state}."


@require_POST
def standing_grant_view(request: HttpRequest, pk) -> HttpResponse:
    """Approve this call and later calls of its tool in its run within limits, for N minutes."""
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)
    if request.POST.get("digest_seen", "") != confirmation.digest:
        messages.error(request, "Nothing approved: the arguments changed since you looked. Review them before deciding.")
        return redirect("confirmations:detail", pk=confirmation.pk)
    try:
        standing = standing_approval_grant(
            confirmation=confirmation, user=request.user, minutes=_int(request.POST.get("minutes")) or 0,
            max_amount_typed=request.POST.get("max_amount", ""), max_calls=_int(request.POST.get("max_calls")),
            other_currencies=request.POST.get("other_currencies", ""), reason=request.POST.get("reason", "").strip(),
        )
    except ApplicationError as exc:
        return _refused(request, confirmation, "approved", exc)
    messages.success(request, f"Approved this call; further calls of {confirmation.tool_spec.ref} in this run within your "
                              f"limits are approved until {standing.expires_at:%H:%M} UTC (standing approval {str(standing.pk)[:8]}).")
    return redirect("confirmations:detail", pk=confirmation.pk)


@require_POST
def standing_revoke_view(request: HttpRequest, pk) -> HttpResponse:
    standing = standing_approval_get_for_user(user=request.user, pk=pk)  # 403 before anything changes
    try:
        standing_approval_revoke(standing=standing, user=request.user, reason=request.POST.get("reason", ""))
    except ApplicationError as exc:
        messages.warning(request, f"Not revoked: {exc.message}")
    else:
        messages.success(request, f"Revoked standing approval {str(standing.pk)[:8]}: it covers no further call.")
    return redirect(_next_url(request))


def _int(raw: str | None) -> int | None:
    """A whole number from a form field; blank means "no limit" (None); anything else is refused later."""
    raw = (raw or "").strip()
    if not raw:
        return None
    return int(raw) if raw.isdigit() else -1  # -1: the service refuses it with a clear message


@require_POST
def deny_view(request: HttpRequest, pk) -> HttpResponse:
    confirmation = confirmation_get_for_user(user=request.user, pk=pk)
    try:
        invocation = confirmation_deny(confirmation=confirmation, user=request.user, reason=request.POST.get("reason", "").strip())
    except ApplicationError as exc:
        return _refused(request, confirmation, "denied", exc)
    messages.success(
        request, f"Denied {confirmation.tool_spec.ref} ({confirmation.digest[:12]}): invocation {invocation.pk} is {invocation.state}."
    )
    return redirect(_next_url(request))


def _refused(request: HttpRequest, confirmation: Confirmation, verb: str, exc: ApplicationError) -> HttpResponse:
    if isinstance(exc, AlreadyDecided):
        confirmation.refresh_from_db()
        who = f" by {confirmation.decided_by}" if confirmation.decided_by_id else ""
        messages.warning(request, f"Not {verb}: this confirmation is already {confirmation.state}{who}.")
    elif exc.code == "reason_required" and verb == "denied":
        messages.error(request, f"Not {verb}: a reason is required to deny a call.")
    else:  # e.g. the invocation was cancelled meanwhile (transition conflict)
        messages.error(request, f"Not {verb}: {exc.message}")
    return redirect(_next_url(request))


def _next_url(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse("confirmations:queue")


urlpatterns = [
    path("", admin.site.admin_view(queue_view), name="queue"),
    path("count.json", admin.site.admin_view(count_view), name="count"),
    path("<uuid:pk>/", admin.site.admin_view(detail_view), name="detail"),
    path("<uuid:pk>/approve", admin.site.admin_view(approve_view), name="approve"),
    path("<uuid:pk>/deny", admin.site.admin_view(deny_view), name="deny"),
    path("<uuid:pk>/standing", admin.site.admin_view(standing_grant_view), name="standing_grant"),
    path("standing/<uuid:pk>/revoke", admin.site.admin_view(standing_revoke_view), name="standing_revoke"),
]
