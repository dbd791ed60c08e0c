"""Carry a VALIDATED invocation to AUTHORIZED (maybe awaiting a human) or AUTHORIZATION_REJECTED.

The decision itself is the pure ``toolops.runtime.authorization.authorize`` over a snapshot of
the subject's live grants; this module gathers the snapshot, reserves counting limits
atomically (``counters``), and records the outcome through the transition service. The
subject is the token's; nothing in the arguments is consulted except the pointers the ToolSpec
declares.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from specs_app.models import Capability, ToolSpec
from specs_app.selectors import grant_snapshots
from toolops.runtime.authorization import AuthContext, Decision, Effect, Reason, Usage, authorize
from toolops.runtime.requirements import RequirementError, requirements_for
from toolops.runtime.states import State

from .confirmations import confirmation_open
from .counters import default_counter
from .models import Invocation
from .services import invocation_transition

EXHAUSTED = Usage(calls_last_minute=2**62, calls_this_run=2**62, amount_in_window=2**62)
DEFAULT_CONFIRMATION_SECONDS = 15 * 60


def invocation_authorize(*, invocation: Invocation, counter=None) -> Invocation:
    """Decide and record. Returns the invocation in its new state."""
    spec: ToolSpec = invocation.tool_spec
    now = timezone.now()
    decision = _decide(invocation, spec, now, counter or default_counter())
    needs_human = decision.effect == Effect.CONFIRM or (
        decision.effect == Effect.ALLOW and (spec.confirmation_policy or {}).get("required")
    )
    record = {
        "decision": "deny" if decision.effect == Effect.DENY else ("confirm" if needs_human else "allow"),
        "capabilities": [g.to_dict() for g in decision.used_grants],
        "reasons": decision.public_reasons(),
        "internal": decision.to_dict(include_grants=False),
        "decided_at": now.isoformat(),
    }
    with transaction.atomic():
        if decision.effect == Effect.DENY:
            invocation_transition(
                invocation=invocation, src=State.VALIDATED, dst=State.AUTHORIZATION_REJECTED, kind="authorization_denied",
                data={"reasons": record["reasons"]},
                fields={"authorization": record, "error_code": "authorization_denied",
                        "error_message": _deny_message(decision), "error_detail": {"reasons": record["reasons"]}},
            )
            return invocation
        invocation_transition(
            invocation=invocation, src=State.VALIDATED, dst=State.AUTHORIZED, kind="authorized",
            data={"decision": record["decision"], "grant_ids": [g.grant_id for g in decision.used_grants]},
            fields={"authorization": record},
        )
        if needs_human:
            seconds = int((spec.confirmation_policy or {}).get("expires_seconds", DEFAULT_CONFIRMATION_SECONDS))
            confirmation_open(invocation=invocation, expires_at=now + timedelta(seconds=seconds))
        elif spec.side_effect_class != "read_only":
            invocation_transition(invocation=invocation, src=State.AUTHORIZED, dst=State.PREPARED, kind="prepared")
    return invocation


def _decide(invocation: Invocation, spec: ToolSpec, now, counter) -> Decision:
    declared = list(spec.required_capabilities or [])
    names = [entry["capability"] for entry in declared]
    classes = dict(Capability.objects.filter(name__in=names).values_list("name", "operation_class"))
    ctx = AuthContext(tenant=invocation.tenant.slug, subject_id=str(invocation.subject_id), tool_ref=invocation.tool_ref, now=now)
    try:
        requirements = requirements_for(declared=declared, operation_classes=classes, arguments=invocation.normalized_arguments)
    except RequirementError as exc:
        return Decision(Effect.DENY, (Reason("misconfigured_tool", None, ",".join(names), str(exc)),), ())
    grants = grant_snapshots(tenant=invocation.tenant, subject=invocation.subject, capabilities=names)
    amounts = {r.capability: r.amount or 0 for r in requirements}
    # Reserve counting limits atomically for the grants the pure decision picked; a grant that
    # lost the race is marked exhausted and the decision re-run, so another grant may serve.
    usage: dict[str, Usage] = {}
    while True:
        decision = authorize(requirements=requirements, grants=grants, ctx=replace(ctx, usage=usage))
        if decision.effect == Effect.DENY:
            return decision
        lost = _reserve(decision, counter, invocation, amounts, now)
        if not lost:
            return decision
        for grant_id in lost:
            usage[grant_id] = EXHAUSTED


def _reserve(decision: Decision, counter, invocation: Invocation, amounts: dict, now) -> list[str]:
    lost = []
    for grant in decision.used_grants:
        failures = counter.reserve(
            grant=grant, run_id=invocation.run_id, invocation_id=invocation.pk, amount=amounts.get(grant.capability, 0), now=now
        )
        if failures:
            lost.append(grant.grant_id)
    return lost


def _deny_message(decision: Decision) -> str:
    codes = sorted({r["code"] for r in decision.public_reasons()})
    return "not authorized: " + (", ".join(codes) or "no grant")
