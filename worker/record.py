"""Step 3 of an attempt, the record (one transaction): committed → COMMITTED → OBSERVED with the
tool message; a failure goes through the pure retry decision (``toolops.decisions.retry``): retry
(the database holds the next attempt's time), reconcile (OUTCOME_UNKNOWN), or stop
(FAILED_BEFORE_COMMIT).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from invocations_app.budgets import budget_charge_cost
from invocations_app.dispatch import enqueue_execution
from invocations_app.models import Attempt, Invocation
from invocations_app.results import invocation_finish_with_message
from invocations_app.tool_messages import redacted
from invocations_app.transitions import event_append, invocation_transition
from specs_app.models import ToolSpec
from toolops import metrics, otel
from toolops.sql import Counted, execute_counted, update_by_pk_counted
from toolops.decisions.execution import Commit, ExecutionOutcome
from toolops.decisions.retry import Action, RetryPolicy, decide_retry
from toolops.runtime.states import State
from worker.executors.http import COST_RE

logger = logging.getLogger(__name__)


def retry_policy(invocation: Invocation) -> RetryPolicy:
    return RetryPolicy.from_dict(invocation.tool_spec.retry_policy or None)


def _close_attempt(
    attempt: Attempt, *, commit: str, failure_class: str | None, outcome: dict, decision: dict | None = None,
    unsent: bool = False,
) -> bool:
    """End an open attempt; False when someone else already ended it (only one closer wins).

    ``unsent``: the request provably never left (a read's claim stamped ``sent_at`` up front)."""
    return bool(execute_counted(_attempt_closing(attempt, commit=commit, failure_class=failure_class, outcome=outcome,
                                                 decision=decision, unsent=unsent)))


def _attempt_closing(
    attempt: Attempt, *, commit: str, failure_class: str | None, outcome: dict, decision: dict | None = None,
    unsent: bool = False,
) -> Counted:
    """``_close_attempt``'s UPDATE, not yet run, for sending in the recording transition's round
    trip; the attempt's span is exported only if this closer wins."""
    ended = timezone.now()
    extra = {"sent_at": None} if unsent else {}

    def closed(changed: int) -> None:
        if not changed:
            return
        inv = attempt.invocation
        metrics.attempt_ended(tool=inv.tool_name, side_effect_class=inv.tool_spec.side_effect_class,
                              failure_class=failure_class, started=attempt.started_at, ended=ended)
        if otel.active():  # its attributes read the proposal, which a recovery's close may not hold
            otel.export_span(
                name="toolops.attempt", trace_id=inv.trace_id, span_id=attempt.span_id, parent_span_id=inv.span_id,
                start=attempt.started_at, end=ended, error=bool(failure_class),
                attributes={"toolops.tool": inv.tool_ref, "toolops.attempt": attempt.number, "toolops.commit": commit,
                            "toolops.failure_class": failure_class,
                            **otel.tool_call_attributes(tool=inv.tool_name, call_id=inv.proposal.proposal_id,
                                                        error_type=failure_class)},
            )

    return update_by_pk_counted(attempt, {
        "ended_at": ended, "commit": commit, "failure_class": failure_class or "", "outcome": outcome,
        "decision": decision or {}, **extra,
    }, unless_set="ended_at", then=closed)


def execution_record(*, invocation: Invocation, attempt: Attempt, outcome: ExecutionOutcome, sent_as: str) -> Invocation:
    """Record one attempt's outcome by transition (or by scheduling the next attempt).

    Closing the attempt and the resulting transitions commit together: one commit per attempt
    outcome, and no window in which an attempt is closed but its outcome unrecorded.
    ``sent_as``: the class the attempt ran under (``attempt_context``), which its retry follows.
    """
    with transaction.atomic():
        return _record(invocation, attempt, outcome, sent_as)


def _record(invocation: Invocation, attempt: Attempt, outcome: ExecutionOutcome, side_effect: str) -> Invocation:
    if outcome.external_resource_id is not None:  # a column of its own: kept as redacted as the rest
        outcome = replace(outcome, external_resource_id=redacted(invocation, outcome.external_resource_id))
    record = redacted(invocation, outcome.to_dict())  # tools may echo credentials back
    budget_charge_cost(run_id=invocation.run_id, amount=attempt_cost(invocation, outcome))
    if outcome.ok:
        # The close travels in the success transition's round trip (one fewer per call).
        return _succeed(invocation, outcome, close=_attempt_closing(attempt, commit=outcome.commit, failure_class=None,
                                                                    outcome=record))
    decision = decide_retry(
        failure_class=outcome.failure_class, side_effect_class=side_effect, attempt=attempt.number,
        policy=retry_policy(invocation), now=timezone.now(), deadline=invocation.deadline,
        retry_after_seconds=outcome.retry_after_seconds,
    )
    _close_attempt(attempt, commit=outcome.commit, failure_class=outcome.failure_class, outcome=record, decision=decision.to_dict())
    event_append(invocation=invocation, kind="attempt_ended",
                 data={"attempt": attempt.number, "outcome": record, "decision": decision.to_dict()}, span_id=attempt.span_id)
    invocation.refresh_from_db(fields=["cancel_requested_at"])
    if outcome.commit == Commit.UNKNOWN or decision.action == Action.RECONCILE:
        return _unknown(invocation, outcome)
    if decision.action in (Action.RETRY_NOW, Action.RETRY_AFTER) and not invocation.cancel_requested_at:
        return _schedule_retry(invocation, decision)
    code = "cancelled" if invocation.cancel_requested_at else (outcome.error or {}).get("code") or decision.reason
    if decision.reason == "deadline":
        code = "deadline_exceeded"
    return invocation_finish_with_message(
        invocation=invocation, src=State.EXECUTING, dst=State.FAILED_BEFORE_COMMIT, kind="failed_before_commit",
        status="error", error={**(outcome.error or {}), "code": code}, commit_status=Commit.NOT_COMMITTED,
        data={"decision": decision.to_dict()}, untrusted_text_pointers=outcome.untrusted_text_pointers,
    )


def attempt_cost(invocation: Invocation, outcome: ExecutionOutcome) -> Decimal:
    """What a sent attempt costs the run: the executor's reported cost, else the ToolSpec's
    declared ``executor.cost`` (0 when it declares none). An attempt that provably never reached
    the tool costs nothing unless the tool itself reported a cost."""
    never_reached = outcome.failure_class == "not_reached" or (outcome.error or {}).get("reached") is False
    if outcome.cost is None and never_reached:
        return Decimal(0)
    for cost in (outcome.cost, (invocation.tool_spec.executor or {}).get("cost")):
        # Only a plain decimal the run's counter can hold; anything else falls through.
        if cost is not None and not isinstance(cost, bool) and COST_RE.fullmatch(str(cost)):
            return Decimal(str(cost))
    return Decimal(0)


def _succeed(inv: Invocation, outcome: ExecutionOutcome, *, close: Counted) -> Invocation:
    """``close``: the attempt's closing UPDATE, sent with the first transition."""
    if outcome.commit == Commit.COMMITTED:
        invocation_transition(
            invocation=inv, src=State.EXECUTING, dst=State.COMMITTED, kind="committed",
            data={"external_resource_id": outcome.external_resource_id},
            fields={"commit_status": Commit.COMMITTED, "external_resource_id": outcome.external_resource_id or ""},
            first=close,
        )
        src, close = State.COMMITTED, None
    else:
        src = State.EXECUTING
    return invocation_finish_with_message(
        invocation=inv, src=src, dst=State.OBSERVED, kind="observed", status="ok", value=outcome.value,
        commit_status=outcome.commit, external_resource_id=outcome.external_resource_id,
        untrusted_text_pointers=outcome.untrusted_text_pointers, binary=outcome.binary, first=close,
    )


def reconciles_by_lookup(spec: ToolSpec) -> bool:
    """write_idempotent calls are looked up (and re-sent on proven absence); a write_unsafe tool
    that declares a lookup (e.g. by client reference) is looked up too, never re-sent."""
    if spec.side_effect_class == "write_idempotent":
        return True
    return spec.side_effect_class == "write_unsafe" and bool((spec.executor or {}).get("lookup"))


def _unknown(inv: Invocation, outcome: ExecutionOutcome) -> Invocation:
    metrics.outcome_unknown(tool=inv.tool_name, tenant=inv.tenant.slug)
    reconcile_at = timezone.now() + timedelta(seconds=1)
    by_lookup = reconciles_by_lookup(inv.tool_spec)
    invocation_transition(
        invocation=inv, src=State.EXECUTING, dst=State.OUTCOME_UNKNOWN, kind="outcome_unknown",
        data={"error": redacted(inv, outcome.error), "reconcile": by_lookup},
        fields={"commit_status": Commit.UNKNOWN, "error_code": "outcome_unknown",
                "error_message": "the tool may have acted; the outcome is being reconciled",
                # The reconciliation task looks the remote key up from this time on.
                "next_attempt_at": reconcile_at if by_lookup else None},
    )
    return inv


def _schedule_retry(inv: Invocation, decision) -> Invocation:
    due = timezone.now() + timedelta(seconds=decision.delay_seconds)
    Invocation.objects.filter(pk=inv.pk, state=State.EXECUTING).update(next_attempt_at=due)
    event_append(invocation=inv, kind="retry_scheduled", data={**decision.to_dict(), "due_at": due.isoformat()})
    enqueue_execution(inv.pk, countdown=decision.delay_seconds)
    return inv
