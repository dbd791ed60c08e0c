"""Carry a VALIDATED invocation to AUTHORIZED (maybe awaiting a human) or AUTHORIZATION_REJECTED.

The decision itself is the pure ``toolops.runtime.authorization.authorize`` over a snapshot of
the subject's live grants; this module gathers the snapshot, reserves counting limits
atomically (``counters``), and records the outcome through the transition service. The
subject is the token's; nothing in the arguments is consulted except the pointers the ToolSpec
declares.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from specs_app.models import ToolSpec
from specs_app.selectors import capability_classes, grant_snapshots
from toolops.runtime.authorization import AuthContext, Decision, Effect, Reason, Usage, authorize
from toolops.runtime.requirements import RequirementError, requirements_for
from toolops.runtime.admission import Step
from toolops.runtime.states import State

from .confirmations import confirmation_open
from .counters import counts_usage as _counting, default_counter
from .models import Invocation
from .services import invocation_transition

EXHAUSTED = Usage(calls_last_minute=2**62, calls_this_run=2**62, amount_in_window=2**62)
DEFAULT_CONFIRMATION_SECONDS = 15 * 60


@dataclass(frozen=True)
class AuthOutcome:
    """The decision for one call and what it means for the state machine."""

    decision: Decision
    record: dict  # stored on the invocation; the API shows only its public part
    needs_human: bool
    confirmation_expires_at: datetime | None
    side_effect_class: str

    @property
    def denied(self) -> bool:
        return self.decision.effect == Effect.DENY

    def steps(self, *, confirmation_id: str | None = None, digest: str = "") -> list[Step]:
        """The transitions (and the confirmation request) that follow VALIDATED."""
        if self.denied:
            return [Step(State.AUTHORIZATION_REJECTED, "authorization_denied", {"reasons": self.record["reasons"]})]
        steps = [Step(State.AUTHORIZED, "authorized", {
            "decision": self.record["decision"], "grant_ids": [g.grant_id for g in self.decision.used_grants],
        })]
        if self.needs_human:
            steps.append(Step(State.AUTHORIZED, "confirmation_requested", {
                "confirmation_id": confirmation_id, "digest": digest,
                "expires_at": self.confirmation_expires_at.isoformat(),
            }))
        elif self.side_effect_class != "read_only":
            steps.append(Step(State.PREPARED, "prepared"))
        return steps

    def error_fields(self) -> dict:
        if not self.denied:
            return {}
        return {"error_code": "authorization_denied", "error_message": _deny_message(self.decision),
                "error_detail": {"reasons": self.record["reasons"]}}


def authorization_decide(
    *, spec: ToolSpec, tenant, subject, run_id, invocation_id, normalized_arguments, now: datetime, counter=None,
    before_reserve=None,
) -> AuthOutcome:
    """Decide for one call (grants snapshot + pure decision + atomic reservation of counting limits).

    ``before_reserve`` runs once before the first unit of a counting limit is taken (the
    proposal service checks for a replay there, so a re-post never spends a unit).
    """
    decision = _decide(
        spec=spec, tenant=tenant, subject=subject, run_id=run_id, invocation_id=invocation_id,
        arguments=normalized_arguments, now=now, counter=counter or default_counter(), before_reserve=before_reserve,
    )
    policy = spec.confirmation_policy or {}
    needs_human = decision.effect == Effect.CONFIRM or (decision.effect == Effect.ALLOW and bool(policy.get("required")))
    seconds = int(policy.get("expires_seconds", DEFAULT_CONFIRMATION_SECONDS))
    record = {
        "decision": "deny" if decision.effect == Effect.DENY else ("confirm" if needs_human else "allow"),
        "capabilities": [g.to_dict() for g in decision.used_grants],
        "reasons": decision.public_reasons(),
        "internal": decision.to_dict(include_grants=False),
        "decided_at": now.isoformat(),
    }
    return AuthOutcome(
        decision=decision, record=record, needs_human=needs_human,
        confirmation_expires_at=now + timedelta(seconds=seconds) if needs_human else None,
        side_effect_class=spec.side_effect_class,
    )


def invocation_authorize(*, invocation: Invocation, counter=None) -> Invocation:
    """Authorize an invocation that is already recorded as VALIDATED, by transitions."""
    outcome = authorization_decide(
        spec=invocation.tool_spec, tenant=invocation.tenant, subject=invocation.subject, run_id=invocation.run_id,
        invocation_id=invocation.pk, normalized_arguments=invocation.normalized_arguments, now=timezone.now(),
        counter=counter,
    )
    with transaction.atomic():
        state = State.VALIDATED
        for step in outcome.steps():
            if step.kind == "confirmation_requested":
                confirmation_open(invocation=invocation, expires_at=outcome.confirmation_expires_at)
                continue
            fields = {"authorization": outcome.record, **outcome.error_fields()} if state == State.VALIDATED else {}
            invocation_transition(invocation=invocation, src=state, dst=step.to_state, kind=step.kind, data=step.data, fields=fields)
            state = step.to_state
    return invocation


def _decide(*, spec: ToolSpec, tenant, subject, run_id, invocation_id, arguments, now, counter, before_reserve=None) -> Decision:
    declared = list(spec.required_capabilities or [])
    names = [entry["capability"] for entry in declared]
    ctx = AuthContext(tenant=tenant.slug, subject_id=str(subject.pk), tool_ref=spec.ref, now=now)
    try:
        requirements = requirements_for(declared=declared, operation_classes=capability_classes(names), arguments=arguments)
    except RequirementError as exc:
        return Decision(Effect.DENY, (Reason("misconfigured_tool", None, ",".join(names), str(exc)),), ())
    grants = grant_snapshots(tenant=tenant, subject=subject, capabilities=names)
    amounts = {r.capability: r.amount or 0 for r in requirements}
    # Reserve counting limits atomically for the grants the pure decision picked; a grant that
    # lost the race is marked exhausted and the decision re-run, so another grant may serve.
    usage: dict[str, Usage] = {}
    while True:
        decision = authorize(requirements=requirements, grants=grants, ctx=replace(ctx, usage=usage))
        if decision.effect == Effect.DENY:
            return decision
        if before_reserve is not None and any(_counting(g) for g in decision.used_grants):
            before_reserve()
            before_reserve = None
        lost = _reserve(decision, counter, run_id, invocation_id, amounts, now)
        if not lost:
            return decision
        for grant_id in lost:
            usage[grant_id] = EXHAUSTED


def _reserve(decision: Decision, counter, run_id, invocation_id, amounts: dict, now) -> list[str]:
    lost = []
    for grant in decision.used_grants:
        failures = counter.reserve(
            grant=grant, run_id=run_id, invocation_id=invocation_id, amount=amounts.get(grant.capability, 0), now=now
        )
        if failures:
            lost.append(grant.grant_id)
    return lost


def _deny_message(decision: Decision) -> str:
    codes = sorted({r["code"] for r in decision.public_reasons()})
    return "not authorized: " + (", ".join(codes) or "no grant")
