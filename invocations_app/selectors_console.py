"""Reads for the confirmation console, scoped by django-guardian.

An approver sees and decides only confirmations of ToolSpecs they hold
``specs_app.approve_toolspec`` on (object permission; a model-wide grant of the permission
covers every ToolSpec); superusers see all. Listing and deciding use the same scope, so a row
the queue does not show cannot be decided by posting the form directly.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Min, QuerySet
from django.shortcuts import get_object_or_404
from guardian.shortcuts import get_objects_for_user

from specs_app.models import Tenant, ToolSpec

from .confirmations import confirmations_expire_due
from .models import Confirmation, Event

APPROVE_PERMISSION = "specs_app.approve_toolspec"
DECIDED_SHOWN = 20


def approvable_toolspecs(*, user) -> QuerySet[ToolSpec]:
    """ToolSpec versions whose confirmations ``user`` may see and decide."""
    if not (user.is_authenticated and user.is_active):  # guardian has no anonymous user here
        return ToolSpec.objects.none()
    return get_objects_for_user(user, APPROVE_PERMISSION, klass=ToolSpec)


def confirmations_visible_to(*, user) -> QuerySet[Confirmation]:
    qs = Confirmation.objects.all()
    if not (user.is_active and user.is_superuser):
        qs = qs.filter(tool_spec__in=approvable_toolspecs(user=user))
    return qs


def _filtered(qs: QuerySet[Confirmation], *, tool: int | None, tenant: str | None) -> QuerySet[Confirmation]:
    if tool is not None:
        qs = qs.filter(tool_spec_id=tool)
    if tenant:
        qs = qs.filter(tenant__slug=tenant)
    return qs


@dataclass(frozen=True)
class ConfirmationQueue:
    pending: list[Confirmation]
    decided: list[Confirmation]
    pending_total: int = 0
    next_expiry: object = None


PENDING_SHOWN = 50


def confirmation_queue_list(*, user, tool: int | None = None, tenant: str | None = None) -> ConfirmationQueue:
    """Pending confirmations oldest first, then the most recently decided ones.

    Due confirmations are expired first, so the queue never offers a decision the service
    would refuse as expired (the beat task does the same on a timer).
    """
    confirmations_expire_due()
    qs = _filtered(confirmations_visible_to(user=user), tool=tool, tenant=tenant).select_related(
        "tool_spec", "tenant", "subject", "run", "invocation", "decided_by"
    )
    # Index invocations_conf_queue (state, created_at) / invocations_conf_tool with a tool filter.
    pending_qs = qs.filter(state=Confirmation.Status.PENDING)
    # A page of the oldest, plus the total and next expiry from the index, never all of them.
    pending = list(pending_qs.order_by("created_at")[:PENDING_SHOWN])
    totals = pending_qs.aggregate(n=Count("pk"), next_expiry=Min("expires_at"))
    decided = list(qs.exclude(state=Confirmation.Status.PENDING).order_by("-decided_at", "-created_at")[:DECIDED_SHOWN])
    return ConfirmationQueue(pending=pending, decided=decided, pending_total=totals["n"], next_expiry=totals["next_expiry"])


def confirmation_pending_count(*, user, tool: int | None = None, tenant: str | None = None) -> int:
    """How many confirmations ``user`` could decide right now (the live badge)."""
    confirmations_expire_due()
    qs = _filtered(confirmations_visible_to(user=user), tool=tool, tenant=tenant)
    return qs.filter(state=Confirmation.Status.PENDING).count()


def confirmation_get_for_user(*, user, pk) -> Confirmation:
    """One confirmation ``user`` may see and decide: 404 if it does not exist, 403 if out of scope."""
    confirmation = get_object_or_404(
        Confirmation.objects.select_related("tool_spec", "tenant", "subject", "run", "invocation", "decided_by"), pk=pk
    )
    if not (user.is_active and user.is_superuser) and not approvable_toolspecs(user=user).filter(pk=confirmation.tool_spec_id).exists():
        raise PermissionDenied("you may not decide confirmations of this tool")
    return confirmation


def confirmation_detail_events(*, confirmation: Confirmation) -> list[Event]:
    """The invocation's event timeline, for the detail page."""
    return list(Event.objects.filter(invocation_id=confirmation.invocation_id).order_by("seq"))


def console_filter_choices(*, user) -> tuple[list[ToolSpec], list[Tenant]]:
    """Tools and tenants for the filter selects, limited to what ``user`` can already see."""
    visible = confirmations_visible_to(user=user)
    tools = list(ToolSpec.objects.filter(pk__in=visible.values("tool_spec")).order_by("name", "version"))
    tenants = list(Tenant.objects.filter(pk__in=visible.values("tenant")).order_by("slug"))
    return tools, tenants
