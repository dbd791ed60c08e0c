"""Carry a VALIDATED invocation to AUTHORIZED (maybe awaiting a human) or AUTHORIZATION_REJECTED.

The decision itself is the pure ``toolops.decisions.authorization.authorize`` over a snapshot of
the subject's live grants; this module gathers the snapshot, reserves counting limits
atomically (``counters``), and records the outcome through the transition service. The
subject is the token's; nothing in the arguments is consulted except the pointers the ToolSpec
declares.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from specs_app.models import ToolSpec
from specs_app.selectors import call_requirements, grant_snapshots
from specs_app.upstream_reads import upstream_gate
from toolops.decisions.approval_policy import ApprovalPolicy, PolicyError, earliest_escalation, strictest_edit_rule
from toolops.decisions.authorization import AuthContext, Decision, Effect, GrantSnapshot, Reason, Usage, authorize
from toolops.decisions.requirements import RequirementError, money_currency
from toolops.runtime.admission import Step
from toolops.runtime.states import State

from invocations_app.deadlines import invocation_deadline
from invocations_app.confirmations import confirmation_open
from invocations_app.counters import counts_usage as _counting, default_counter
from invocations_app.dispatch import enqueue_when_committed
from invocations_app.models import Invocation
from invocations_app.standing_approvals import StandingUse, standing_approval_take
from invocations_app.tool_messages import ending_message_rows
from invocations_app.transitions import event_append, invocation_transition

DEFAULT_CONFIRMATION_SECONDS = 15 * 60


@dataclass(frozen=True)
class AuthOutcome:
    """The decision for one call and what it means for the state machine."""

    decision: Decision
    record: dict  # stored on the invocation; the API shows only its public part
    needs_human: bool
    confirmation_expires_at: datetime | None
    side_effect_class: str
    reservations: tuple = ()  # (counter, grant, run_id, invocation_id, amount) taken for this call
    deny_code: str = "authorization_denied"
    # The pending confirmation's quorum and escalation (``confirmation_row`` keywords).
    confirmation_fields: dict = field(default_factory=dict)
    standing: StandingUse | None = None  # the standing approval that stands in for a person
    # An imported tool's class is only the upstream's claim (no admin confirmed it): even released
    # (a standing approval), such a call is never run inline as a read (``admission``).
    class_unconfirmed: bool = False

    def release_reservations(self) -> None:
        """Give the counted units back (the call was not recorded after all, e.g. a lost race)."""
        for counter, grant, run_id, invocation_id, amount in self.reservations:
            counter.release(grant=grant, run_id=run_id, invocation_id=invocation_id, amount=amount)
        if self.standing is not None:
            self.standing.release()

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
        if self.standing is not None:
            steps.append(Step(State.AUTHORIZED, "standing_approval_applied", {
                "standing_approval": self.record["standing_approval"], "reason": self.standing.message(),
            }))
        if self.needs_human:
            fields = self.confirmation_fields
            steps.append(Step(State.AUTHORIZED, "confirmation_requested", {
                "confirmation_id": confirmation_id, "digest": digest,
                "expires_at": self.confirmation_expires_at.isoformat(),
                **({"approvals_needed": fields["approvals_needed"]} if fields.get("approvals_needed", 1) != 1 else {}),
                **({"escalate_at": fields["escalate_at"].isoformat(), "escalation_group": fields["escalation_group"]}
                   if fields.get("escalate_at") else {}),
            }))
        elif self.side_effect_class != "read_only":
            steps.append(Step(State.PREPARED, "prepared"))
        return steps

    def error_fields(self) -> dict:
        if not self.denied:
            return {}
        return {"error_code": self.deny_code, "error_message": _deny_message(self.decision),
                "error_detail": {"reasons": self.record["reasons"]}}


def authorization_decide(
    *, spec: ToolSpec, tenant, subject, run_id, invocation_id, normalized_arguments, now: datetime, counter=None,
    approvals_floor: int = 0,
) -> AuthOutcome:
    """Decide for one call (grants snapshot + pure decision + atomic reservation of counting limits).

    ``approvals_floor``: arguments a person chose (an approver's edit, ``confirmation_edits``):
    unless the grants deny them, a confirmation is opened for at least that many distinct
    approvers, whatever the grants' own effect, and no standing approval stands in for them.
    Reserved units are given back with ``release_reservations`` when the call is not recorded
    after all (admission lost a race)."""
    counter = counter or default_counter()
    gate = upstream_gate(spec=spec)  # None unless the tool is imported from an MCP server
    policy = spec.confirmation_policy or {}
    spec_approval, policy_error = _spec_approval(policy)
    currency = None
    if policy_error is not None:
        decision, amounts = Decision(Effect.DENY, (Reason("misconfigured_tool", None, "", policy_error),), ()), {}
    elif gate is not None and gate.quarantined:
        decision, amounts = Decision(Effect.DENY, (Reason(
            "tool_quarantined", None, "", f"{spec.ref} is quarantined: its upstream definition {gate.state}"),), ()), {}
    else:
        decision, amounts, currency = _decide(
            spec=spec, tenant=tenant, subject=subject, run_id=run_id, invocation_id=invocation_id,
            arguments=normalized_arguments, now=now, counter=counter, spec_approval=spec_approval,
        )
    # An upstream's class is its own claim until an admin confirms it: until then a person decides.
    unconfirmed = gate is not None and gate.needs_human
    needs_human = decision.effect == Effect.CONFIRM or (
        decision.effect == Effect.ALLOW and (bool(policy.get("required")) or unconfirmed or approvals_floor > 0))
    seconds = int(policy.get("expires_seconds", DEFAULT_CONFIRMATION_SECONDS))
    record = {
        "decision": "deny" if decision.effect == Effect.DENY else ("confirm" if needs_human else "allow"),
        "capabilities": [g.to_dict() for g in decision.used_grants],
        "reasons": decision.public_reasons(),
        "internal": decision.to_dict(include_grants=False),
        "decided_at": now.isoformat(),
    }
    fields, standing = {}, None
    if needs_human:
        fields, standing = _human_step(decision=decision, spec=spec, spec_approval=spec_approval, run_id=run_id,
                                       amounts=amounts, currency=currency, now=now, record=record, floor=approvals_floor)
        needs_human = standing is None
    return AuthOutcome(
        decision=decision, record=record, needs_human=needs_human,
        confirmation_expires_at=now + timedelta(seconds=seconds) if needs_human else None,
        side_effect_class=spec.side_effect_class,
        deny_code="tool_quarantined" if gate is not None and gate.quarantined else "authorization_denied",
        reservations=tuple(
            (counter, g, run_id, invocation_id, amounts.get(g.capability) or 0) for g in decision.used_grants if _counting(g)
        ),
        confirmation_fields=fields, standing=standing, class_unconfirmed=unconfirmed,
    )


def _spec_approval(confirmation_policy: dict) -> tuple[ApprovalPolicy | None, str | None]:
    """The ToolSpec's approval policy (``confirmation_policy["approval"]``), or why it is unusable."""
    try:
        return ApprovalPolicy.from_dict(confirmation_policy.get("approval"), legacy_currency=settings.TOOLOPS_LEGACY_AMOUNT_CURRENCY), None
    except PolicyError as exc:
        return None, f"the tool's approval policy is unusable: {exc}"


def _human_step(*, decision: Decision, spec: ToolSpec, spec_approval, run_id, amounts: dict, currency: str | None,
                now: datetime, record: dict, floor: int = 0):
    """A call that needs a person: its quorum and escalation, or a standing approval that stands in
    (never for a person's edit, ``floor`` > 0: its approvers are the ones the edit rule names).

    Updates ``record`` (the authorization record) with what was decided; returns the pending
    confirmation's fields and the standing approval taken (if any).
    """
    approvals = max(decision.approvals_needed, 1, floor)
    escalation = decision.escalation or earliest_escalation([spec_approval])
    standing = standing_approval_take(
        run_id=run_id, tool_spec_id=spec.pk, approvals_needed=approvals, now=now,
        amount=max((a for a in amounts.values() if a is not None), default=None), currency=currency,
    ) if run_id is not None and not floor else None
    if standing is not None:
        record["decision"] = "allow"
        record["standing_approval"] = standing.record()
        record["reasons"].append({"code": "standing_approval", "capability": "", "message": standing.message()})
        return {}, standing
    record["approvals_needed"] = approvals
    fields = {"approvals_needed": approvals}
    if escalation is not None:
        record["escalation"] = escalation.to_dict()
        fields.update(escalate_at=now + timedelta(seconds=escalation.after_seconds), escalation_group=escalation.group)
    return fields, None


def invocation_authorize(*, invocation: Invocation, counter=None, approvals_floor: int = 0) -> Invocation:
    """Authorize an invocation that is already recorded as VALIDATED, by transitions
    (``approvals_floor``: see ``authorization_decide``)."""
    outcome = authorization_decide(
        spec=invocation.tool_spec, tenant=invocation.tenant, subject=invocation.subject, run_id=invocation.run_id,
        invocation_id=invocation.pk, normalized_arguments=invocation.normalized_arguments, now=timezone.now(),
        counter=counter, approvals_floor=approvals_floor,
    )
    released = not outcome.denied and not outcome.needs_human  # else its deadline starts at approval
    deadline = {"deadline": invocation_deadline(spec=invocation.tool_spec, run=invocation.run, released_at=timezone.now())} if released else {}
    with transaction.atomic():
        state = State.VALIDATED
        for step in outcome.steps():
            if step.kind == "confirmation_requested":
                confirmation_open(invocation=invocation, expires_at=outcome.confirmation_expires_at, **outcome.confirmation_fields)
                continue
            if step.kind == "standing_approval_applied":
                event_append(invocation=invocation, kind=step.kind, data=step.data)
                continue
            fields = {"authorization": outcome.record, **outcome.error_fields(), **deadline} if state == State.VALIDATED else {}
            ending = step.to_state == State.AUTHORIZATION_REJECTED
            rows = ending_message_rows(invocation, error_code=fields["error_code"], error_message=fields["error_message"]) if ending else ()
            invocation_transition(invocation=invocation, src=state, dst=step.to_state, kind=step.kind, data=step.data,
                                  fields=fields, rows=rows)
            state = step.to_state
        if released:
            enqueue_when_committed(invocation)
    return invocation


def authorization_preview(*, spec: ToolSpec, tenant, subject, normalized_arguments, now: datetime) -> Decision:
    """The pure decision for arguments not yet recorded (an approver's edit): grants and limits
    as now, counting limits not reserved — ``invocation_authorize`` decides again for real."""
    spec_approval, policy_error = _spec_approval(spec.confirmation_policy or {})
    if policy_error is not None:
        return Decision(Effect.DENY, (Reason("misconfigured_tool", None, "", policy_error),), ())
    inputs = _decision_inputs(spec=spec, tenant=tenant, subject=subject, arguments=normalized_arguments, now=now,
                              spec_approval=spec_approval)
    if isinstance(inputs, Decision):
        return inputs
    requirements, grants, ctx = inputs
    return authorize(requirements=requirements, grants=grants, ctx=ctx)


def edit_rule(*, spec: ToolSpec, decision: Decision, authorization: dict | None = None) -> str:
    """The strictest ``edits`` rule of the ToolSpec's approval policy, the policies ``decision``
    used and those recorded in ``authorization`` (the original call's record)."""
    spec_approval, _ = _spec_approval(spec.confirmation_policy or {})
    policies = [spec_approval, *(g.policy for g in decision.used_grants)]
    recorded = [(c.get("approval_policy") or {}).get("edits") for c in (authorization or {}).get("capabilities") or []]
    return strictest_edit_rule([*(p.edits for p in policies if p is not None), *recorded])


def _decision_inputs(*, spec: ToolSpec, tenant, subject, arguments, now, spec_approval=None):
    """``(requirements, grant snapshots, context)``, or a DENY decision for a misconfigured tool.

    ``spec_approval``: the ToolSpec's approval policy, applied to grants that carry none."""
    names = [entry["capability"] for entry in spec.required_capabilities or []]
    ctx = AuthContext(tenant=tenant.slug, subject_id=str(subject.pk), tool_ref=spec.ref, now=now)
    try:
        requirements = call_requirements(spec=spec, arguments=arguments)
    except RequirementError as exc:
        return Decision(Effect.DENY, (Reason("misconfigured_tool", None, ",".join(names), str(exc)),), ())
    grants = grant_snapshots(tenant=tenant, subject=subject, capabilities=names)
    if spec_approval is not None:
        grants = [g if g.policy is not None else replace(g, policy=spec_approval) for g in grants]
    return requirements, grants, ctx


def _decide(*, spec: ToolSpec, tenant, subject, run_id, invocation_id, arguments, now, counter, spec_approval=None):
    """The decision, the amount per capability and the amounts' currency (reservations are
    taken for allowed calls)."""
    inputs = _decision_inputs(spec=spec, tenant=tenant, subject=subject, arguments=arguments, now=now,
                              spec_approval=spec_approval)
    if isinstance(inputs, Decision):
        return inputs, {}, None
    requirements, grants, ctx = inputs
    amounts = {r.capability: r.amount for r in requirements}
    currency = money_currency(requirements)
    # Reserve counting limits for the grants the pure decision picked, all or nothing: if one
    # loses (a concurrent caller took the last unit), the others are released and the decision
    # re-run with that grant's failed limit marked, so a spare grant may serve instead.
    usage: dict[str, Usage] = {}
    while True:
        decision = authorize(requirements=requirements, grants=grants, ctx=replace(ctx, usage=usage))
        if decision.effect == Effect.DENY:
            return decision, amounts, currency
        counted = [g for g in decision.used_grants if _counting(g)]
        failed = _reserve_all(counted, counter, run_id, invocation_id, amounts, now)
        if not failed:
            return decision, amounts, currency
        for grant, failures in failed.items():
            usage[grant.grant_id] = _usage_failing(grant, failures)


def _reserve_all(grants, counter, run_id, invocation_id, amounts: dict, now) -> dict:
    """Reserve on every grant or on none; returns ``{grant: failures}`` for the ones that lost."""
    taken, failed = [], {}
    for grant in grants:
        failures = counter.reserve(
            grant=grant, run_id=run_id, invocation_id=invocation_id, amount=amounts.get(grant.capability) or 0, now=now
        )
        if failures:
            failed[grant] = failures
        else:
            taken.append(grant)
    if failed:
        for grant in taken:
            counter.release(grant=grant, run_id=run_id, invocation_id=invocation_id, amount=amounts.get(grant.capability) or 0)
    return failed


def _usage_failing(grant: GrantSnapshot, failures: list[str]) -> Usage:
    """Usage that makes exactly the limits the counter refused fail in the pure decision."""
    lim = grant.limits
    return Usage(
        calls_last_minute=lim.calls_per_minute if "rate_limited" in failures else 0,
        calls_this_run=lim.calls_per_run if "run_call_limit" in failures else 0,
        amount_in_window=lim.max_amount_per_window + 1 if "amount_over_window_limit" in failures else 0,
    )


def _deny_message(decision: Decision) -> str:
    codes = sorted({r["code"] for r in decision.public_reasons()})
    return "not authorized: " + (", ".join(codes) or "no grant")
