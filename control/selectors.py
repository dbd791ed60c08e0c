"""Reads for the staff console: the confirmation queue, the unknown-outcome queue, the record of one call.

Scope is the pair (tenant, ToolSpec), both as django-guardian permissions: an approver sees and
decides only confirmations of ToolSpecs they hold ``specs_app.approve_toolspec`` on *and* of
tenants they hold ``specs_app.approve_calls`` on; a resolver likewise with ``resolve_toolspec``
and ``resolve_calls``. Either permission held model-wide covers every ToolSpec / every tenant;
superusers see all (the approvers' rule itself is ``invocations_app.approvers``). (The scope is the product of the two sets: holding both tools X, Y and
tenants A, B covers all four pairs — give a person who must differ per tenant separate rights
through groups.) Listing and deciding use the same scope, so a row a queue does not show cannot
be decided by posting the form directly. The record page reads one invocation and everything
that answers the eight questions of docs/concepts/record.md in a fixed number of queries, whatever the number
of attempts, events or messages. Nothing here writes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import Http404
from django.db.models import Count, Min, Prefetch, Q, QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone

from specs_app.models import Grant, Tenant, ToolSpec
from toolops.runtime.states import State

from invocations_app.models import (
    Attempt, Confirmation, ConfirmationApproval, Event, Invocation, ModelCall, ModelCallTool, Proposal, StandingApproval, ToolMessage,
)
from specs_app.selectors import APPROVE_CALLS, RESOLVE_CALLS, VIEW_CALLS, tenants_for_user

from invocations_app.approvers import approvable, may_approve
from worker.support import (
    HISTORY_KINDS, PendingResolution, can_resolve, pending_resolution, resolvable_tenants, resolvable_toolspecs,
)
from control.formatting import Bytes

VIEW_INVOCATION_PERMISSION = "invocations_app.view_invocation"
DECIDED_SHOWN = 20
PENDING_SHOWN = 50


# --- whose calls -------------------------------------------------------------------------------

def console_tenants(*, user) -> QuerySet[Tenant]:
    """"The user's tenants": those they may view, approve or resolve calls of (all for superusers
    and holders of any of these permissions model-wide)."""
    return tenants_for_user(user=user, permission=[VIEW_CALLS, APPROVE_CALLS, RESOLVE_CALLS])


def console_tenant_scope(*, user) -> frozenset[int] | None:
    """The tenant ids whose calls the dashboard counts for ``user``; ``None`` means every tenant
    (superusers, the platform-wide ``invocations_app.view_invocation``, or a model-wide tenant permission)."""
    if user.is_superuser or user.has_perm(VIEW_INVOCATION_PERMISSION):
        return None
    if any(user.has_perm(p) for p in (VIEW_CALLS, APPROVE_CALLS, RESOLVE_CALLS)):
        return None
    return frozenset(console_tenants(user=user).values_list("pk", flat=True))


def _refuse(*, user, tenant_id, why: str):
    """404 for a row of a tenant that is not one of ``user``'s (its existence stays unconfirmed),
    else 403 with ``why``."""
    if not console_tenants(user=user).filter(pk=tenant_id).exists():
        raise Http404("no such row")
    raise PermissionDenied(why)


# --- the confirmation queue ----------------------------------------------------------------

def confirmations_visible_to(*, user) -> QuerySet[Confirmation]:
    """Every confirmation ``user`` may see and decide: its (tenant, ToolSpec) pair is in scope."""
    return approvable(Confirmation.objects.all(), user=user)


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


def confirmation_queue_list(*, user, tool: int | None = None, tenant: str | None = None) -> ConfirmationQueue:
    """Decidable confirmations oldest first, then the most recently decided ones.

    A confirmation past its time is not offered (the service would refuse the decision); the
    beat task records its expiry, after which it is listed among the decided ones.
    """
    qs = _filtered(confirmations_visible_to(user=user), tool=tool, tenant=tenant).select_related(
        "tool_spec", "tenant", "subject", "run", "invocation", "decided_by"
    )
    # Index invocations_conf_queue (state, created_at) / invocations_conf_tool with a tool filter.
    pending_qs = _decidable(qs)
    # A page of the oldest, plus the total and next expiry from the index, never all of them.
    pending = list(pending_qs.order_by("created_at")[:PENDING_SHOWN])
    _count_approvals(pending)
    totals = pending_qs.aggregate(n=Count("pk"), next_expiry=Min("expires_at"))
    decided = list(qs.exclude(state=Confirmation.Status.PENDING).order_by("-decided_at", "-created_at")[:DECIDED_SHOWN])
    return ConfirmationQueue(pending=pending, decided=decided, pending_total=totals["n"], next_expiry=totals["next_expiry"])


def _count_approvals(confirmations: list[Confirmation]) -> None:
    """``approvals_count`` on each shown row: one grouped query over the page, not a join over every pending row."""
    ids = [c.pk for c in confirmations if c.approvals_needed > 1]
    counts = dict(ConfirmationApproval.objects.filter(confirmation_id__in=ids).values("confirmation_id")
                  .annotate(n=Count("*")).values_list("confirmation_id", "n")) if ids else {}
    for c in confirmations:
        c.approvals_count = counts.get(c.pk, 0)


def confirmation_pending_count(*, user, tool: int | None = None, tenant: str | None = None) -> int:
    """How many confirmations ``user`` could decide right now (the live badge)."""
    return _decidable(_filtered(confirmations_visible_to(user=user), tool=tool, tenant=tenant)).count()


def _decidable(qs: QuerySet[Confirmation]) -> QuerySet[Confirmation]:
    return qs.filter(state=Confirmation.Status.PENDING, expires_at__gt=timezone.now())


def confirmation_get_for_user(*, user, pk) -> Confirmation:
    """One confirmation ``user`` may see and decide.

    404 if it does not exist or belongs to a tenant that is not one of ``user``'s (another
    tenant's confirmations are not even confirmed to exist); 403 if out of scope in one of theirs.
    """
    confirmation = get_object_or_404(
        Confirmation.objects.select_related("tool_spec", "tenant", "subject", "run", "invocation", "decided_by"), pk=pk
    )
    if not may_approve(user=user, tenant_id=confirmation.tenant_id, tool_spec_id=confirmation.tool_spec_id):
        _refuse(user=user, tenant_id=confirmation.tenant_id, why="you may not decide confirmations of this tool")
    return confirmation


def standing_approvals_for(*, confirmation: Confirmation, now: datetime) -> list[StandingApproval]:
    """The standing approvals of the confirmation's run and tool, live ones first (the detail page)."""
    rows = list(StandingApproval.objects.filter(run_id=confirmation.run_id, tool_spec_id=confirmation.tool_spec_id)
                .select_related("granted_by", "revoked_by").order_by("-created_at"))
    for row in rows:
        row.live = row.revoked_at is None and row.expires_at > now
    return sorted(rows, key=lambda r: not r.live)


def standing_approval_get_for_user(*, user, pk) -> StandingApproval:
    """One standing approval ``user`` may revoke: an approver of its (tenant, ToolSpec) pair, as
    for its calls. 404 if it does not exist or belongs to a tenant that is not one of ``user``'s
    (never confirmed to exist), 403 if out of scope in one of theirs."""
    standing = get_object_or_404(StandingApproval.objects.select_related("from_confirmation__invocation", "tool_spec"), pk=pk)
    if not may_approve(user=user, tenant_id=standing.tenant_id, tool_spec_id=standing.tool_spec_id):
        _refuse(user=user, tenant_id=standing.tenant_id, why="you may not revoke standing approvals of this tool")
    return standing


def confirmation_detail_events(*, confirmation: Confirmation) -> list[Event]:
    """The invocation's event timeline, for the detail page."""
    return list(Event.objects.filter(invocation_id=confirmation.invocation_id).order_by("seq"))


def console_filter_choices(*, user) -> tuple[list[ToolSpec], list[Tenant]]:
    """Tools and tenants for the filter selects, limited to what ``user`` can already see."""
    visible = confirmations_visible_to(user=user)
    tools = list(ToolSpec.objects.filter(pk__in=visible.values("tool_spec")).order_by("name", "version"))
    tenants = list(Tenant.objects.filter(pk__in=visible.values("tenant")).order_by("slug"))
    return tools, tenants


# --- the unknown-outcome queue ---------------------------------------------------------------

def unknown_outcomes_visible_to(*, user) -> QuerySet[Invocation]:
    """OUTCOME_UNKNOWN invocations whose (tenant, ToolSpec) pair ``user`` may resolve."""
    qs = Invocation.objects.filter(state=State.OUTCOME_UNKNOWN)
    if not (user.is_active and user.is_superuser):
        qs = qs.filter(tool_spec__in=resolvable_toolspecs(user=user), tenant__in=resolvable_tenants(user=user))
    return qs


def unknown_outcome_queue_list(*, user, tool: int | None = None, tenant: str | None = None) -> list[Invocation]:
    """Every OUTCOME_UNKNOWN invocation ``user`` may resolve, oldest first (four queries in all).

    Each row carries ``attempt_list``, ``history`` (the reconciliation events), ``unknown_since``,
    ``last_attempt``, ``last_lookup`` and ``pending`` (a four-eyes proposal awaiting a second person).
    """
    qs = unknown_outcomes_visible_to(user=user)
    if tool is not None:
        qs = qs.filter(tool_spec_id=tool)
    if tenant:
        qs = qs.filter(tenant__slug=tenant)
    # Index invocations_inv_state_created (state, created_at) serves the filter and the order.
    qs = (
        qs.select_related("tool_spec", "tenant", "subject", "run")
        .prefetch_related(
            Prefetch("attempts", queryset=Attempt.objects.order_by("number"), to_attr="attempt_list"),
            Prefetch("events", queryset=Event.objects.filter(kind__in=HISTORY_KINDS).order_by("seq"), to_attr="history"),
        )
        .order_by("created_at", "id")
    )
    rows = list(qs)
    for inv in rows:
        _annotate_unknown(inv)
    return rows


def _annotate_unknown(inv: Invocation) -> None:
    became = [e for e in inv.history if e.kind == "outcome_unknown"]
    inv.unknown_since = became[-1].at if became else inv.updated_at
    inv.last_attempt = inv.attempt_list[-1] if inv.attempt_list else None
    lookups = [e for e in inv.history if e.kind in ("support_lookup", "reconciliation_lookup")]
    inv.last_lookup = lookups[-1] if lookups else None
    inv.pending = pending_resolution(invocation=inv, events=inv.history)
    inv.four_eyes = bool((inv.tool_spec.confirmation_policy or {}).get("four_eyes_resolution"))


def unknown_outcome_count(*, user) -> int:
    return unknown_outcomes_visible_to(user=user).count()


def unknown_filter_choices(*, user) -> tuple[list[ToolSpec], list[Tenant]]:
    visible = unknown_outcomes_visible_to(user=user)
    tools = list(ToolSpec.objects.filter(pk__in=visible.values("tool_spec")).order_by("name", "version"))
    tenants = list(Tenant.objects.filter(pk__in=visible.values("tenant")).order_by("slug"))
    return tools, tenants


def unknown_outcome_get_for_user(*, user, pk) -> Invocation:
    """One invocation ``user`` may resolve (any state: the page also shows how it was resolved).

    404 if it does not exist or belongs to a tenant that is not one of ``user``'s, 403 without
    the right to resolve it.
    """
    inv = get_object_or_404(
        Invocation.objects.select_related("tool_spec", "tenant", "subject", "run").prefetch_related(
            Prefetch("attempts", queryset=Attempt.objects.order_by("number"), to_attr="attempt_list"),
            Prefetch("events", queryset=Event.objects.filter(kind__in=HISTORY_KINDS).order_by("seq"), to_attr="history"),
        ),
        pk=pk,
    )
    if not can_resolve(user=user, invocation=inv):
        _refuse(user=user, tenant_id=inv.tenant_id, why="you may not resolve unknown outcomes of this tool")
    _annotate_unknown(inv)
    return inv


# --- the record of one call ----------------------------------------------------------------------

def record_visible_to(*, user, invocation: Invocation) -> bool:
    """Superusers; staff with the model permission to view invocations (platform-wide); staff with
    ``view_calls`` on its tenant; approvers or resolvers of its (tenant, ToolSpec) pair."""
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return False
    if user.is_superuser or user.has_perm(VIEW_INVOCATION_PERMISSION):
        return True
    if tenants_for_user(user=user, permission=VIEW_CALLS).filter(pk=invocation.tenant_id).exists():
        return True
    if invocation.tool_spec_id is None:
        return False
    return (
        (resolvable_toolspecs(user=user).filter(pk=invocation.tool_spec_id).exists()
         and resolvable_tenants(user=user).filter(pk=invocation.tenant_id).exists())
        or may_approve(user=user, tenant_id=invocation.tenant_id, tool_spec_id=invocation.tool_spec_id)
    )


def record_get_for_user(*, user, pk) -> Invocation:
    inv = get_object_or_404(
        Invocation.objects.select_related(
            "tool_spec", "tenant", "subject", "run", "model_call", "proposal", "edited_from__tool_spec"
        ),
        pk=pk,
    )
    if not record_visible_to(user=user, invocation=inv):
        _refuse(user=user, tenant_id=inv.tenant_id, why="you may not read the record of this call")
    return inv


@dataclass
class Message:
    format: str
    created_at: datetime
    body: Bytes


@dataclass
class CallRecord:
    """Everything the record page shows, in the order of docs/concepts/record.md's questions."""

    invocation: Invocation
    # 1. which ToolSpec the model saw
    seen_tool: ModelCallTool | None
    visible_refs: list[str]
    # 2. the raw proposal bytes
    proposal: Proposal
    raw: Bytes
    # 4. authorization and confirmation
    grants: list[Grant]
    confirmations: list[Confirmation]
    # 5. the invocation and every attempt
    attempts: list[Attempt]
    events: list[Event]
    # 7. the exact tool-message bytes
    messages: list[Message]
    # 8. which later model calls carried them
    later_model_calls: list[ModelCall]
    # links
    same_key: list[Invocation] = field(default_factory=list)
    edits: list[Invocation] = field(default_factory=list)
    replays: list[Proposal] = field(default_factory=list)
    pending: PendingResolution | None = None
    # standing approvals this call granted or was covered by, with their revocation (who, when, why)
    standing: list[StandingApproval] = field(default_factory=list)

    @property
    def resolution_events(self) -> list[Event]:
        return [e for e in self.events if e.kind in HISTORY_KINDS and e.kind != "outcome_unknown"]


def invocation_record(*, invocation: Invocation) -> CallRecord:
    """Gather the record of one call (about a dozen queries, independent of its size).

    ``invocation`` should come from ``record_get_for_user`` (run, model call, proposal, tool
    spec and edited_from already joined).
    """
    inv = invocation
    tools = list(ModelCallTool.objects.filter(model_call_id=inv.model_call_id).order_by("id"))
    seen = next((t for t in tools if inv.tool_spec_id is not None and t.tool_spec_id == inv.tool_spec_id), None)
    grant_ids = _grant_ids(inv.authorization or {})
    grants = list(
        Grant.objects.filter(pk__in=grant_ids).select_related("capability", "subject", "granted_by", "revoked_by")
    ) if grant_ids else []
    grants.sort(key=lambda g: grant_ids.index(str(g.pk)))
    confirmations = list(
        Confirmation.objects.filter(invocation=inv).select_related("decided_by", "replacement")
        .prefetch_related(Prefetch("approvals", queryset=ConfirmationApproval.objects.select_related("user")))
        .order_by("created_at")
    )
    attempts = list(Attempt.objects.filter(invocation=inv).order_by("number"))
    events = list(Event.objects.filter(invocation=inv).order_by("seq"))
    messages = [
        Message(format=m.format, created_at=m.created_at, body=Bytes(bytes(m.message_bytes)))
        for m in ToolMessage.objects.filter(invocation=inv).order_by("format")
    ]
    same_key = list(
        Invocation.objects.filter(tenant_id=inv.tenant_id, tool_name=inv.tool_name, tool_version=inv.tool_version,
                                  idempotency_key=inv.idempotency_key)
        .exclude(pk=inv.pk).select_related("run").order_by("created_at")
    ) if inv.idempotency_key else []
    edits = list(Invocation.objects.filter(edited_from=inv).order_by("created_at"))
    replays = list(Proposal.objects.filter(replay_of=inv).select_related("model_call").defer("arguments_bytes").order_by("received_at"))
    return CallRecord(standing=_standing_on_record(inv, events),
        invocation=inv, seen_tool=seen, visible_refs=[t.tool_ref for t in tools], proposal=inv.proposal,
        raw=Bytes(bytes(inv.proposal.arguments_bytes)), grants=grants, confirmations=confirmations, attempts=attempts,
        events=events, messages=messages, later_model_calls=model_calls_including(invocation=inv), same_key=same_key,
        edits=edits, replays=replays,
        pending=pending_resolution(invocation=inv, events=events) if inv.state == State.OUTCOME_UNKNOWN else None,
    )


def _standing_on_record(inv: Invocation, events: list[Event]) -> list[StandingApproval]:
    """The standing approvals granted from this call or covering it (one query, only when its
    events name one), revoked or not."""
    if not any(e.kind in ("standing_approval_granted", "standing_approval_applied") for e in events):
        return []
    mine = Q(from_confirmation__invocation=inv)
    covering = ((inv.authorization or {}).get("standing_approval") or {}).get("id")
    if covering:
        mine |= Q(pk=covering)
    return list(StandingApproval.objects.filter(mine).select_related("granted_by", "revoked_by").order_by("created_at"))


def _grant_ids(authorization: dict) -> list[str]:
    ids = [str(c.get("grant_id")) for c in authorization.get("capabilities") or [] if c.get("grant_id")]
    ids += [str(g) for g in (authorization.get("internal") or {}).get("used_grant_ids") or []]
    return list(dict.fromkeys(ids))


def model_calls_including(*, invocation: Invocation) -> list[ModelCall]:
    """Model calls of the invocation's run whose ``context`` lists it (the API's ``context``), oldest first.

    PostgreSQL answers with jsonb containment; SQLite's JSON1 has no containment lookup, so
    there we filter the run's model calls in Python (a run has at most its model-call budget).
    """
    needle = str(invocation.pk)
    qs = ModelCall.objects.filter(run_id=invocation.run_id).order_by("created_at")
    if connection.vendor == "postgresql":
        return list(qs.filter(context__contains=[needle]))
    return [call for call in qs.only("id", "run_id", "format", "context", "span_id", "created_at")
            if needle in [str(c) for c in (call.context or [])]]
