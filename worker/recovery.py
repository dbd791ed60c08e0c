"""When a worker died mid-attempt, and reconciliation of unknown outcomes: an open attempt whose
lease lapsed is decided here (a read is retried, a write that may have been sent becomes
OUTCOME_UNKNOWN unless it is safe to re-send), and ``reconcile`` asks the tool, by lookup,
whether an unknown write took effect (docs/concepts/failures.md).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from django.utils import timezone

from invocations_app.dispatch import enqueue_execution
from invocations_app.models import Attempt, Invocation
from invocations_app.results import invocation_finish_with_message
from invocations_app.tool_messages import redacted
from invocations_app.transitions import event_append, invocation_transition
from toolops.decisions.execution import Commit, ExecutionOutcome
from toolops.decisions.retry import Action, decide_retry
from toolops.runtime.states import State
from toolops.runtime.tracecontext import new_span_id
from worker.attempt import attempt_class, attempt_context, execution_run
from worker.claim import claim_or_inspect, execution_claim, open_attempt
from worker.leases import attempt_lease_lapsed
from worker.executors import by_kind as executors
from worker.record import _close_attempt, _unknown, retry_policy
from worker.remote_keys import recorded_remote_key

logger = logging.getLogger(__name__)


def recover_abandoned(*, invocation: Invocation, attempt: Attempt) -> Invocation:
    """An attempt that started and never ended: its worker died.

    Never sent → nothing happened, retry. Sent → the tool may have acted: a read is simply
    retried; any write becomes OUTCOME_UNKNOWN (write_idempotent is then reconciled by
    lookup; write_unsafe waits for a human) — never a blind second call. An imported tool's
    unconfirmed read-only claim counts as a write here (``attempt_class``).
    """
    if attempt.sent_at is None or attempt_class(invocation.tool_spec)[0] == "read_only":
        if not _close_attempt(attempt, commit=Commit.NOT_COMMITTED, failure_class="not_reached", outcome={"abandoned": True}):
            return invocation  # another recoverer (redelivery or beat) got here first
        event_append(invocation=invocation, kind="attempt_abandoned", data={"attempt": attempt.number, "sent": bool(attempt.sent_at)})
        Invocation.objects.filter(pk=invocation.pk, state=State.EXECUTING).update(next_attempt_at=timezone.now())
        return invocation
    if not _close_attempt(attempt, commit=Commit.UNKNOWN, failure_class="timeout_unknown", outcome={"abandoned": True}):
        return invocation  # another recoverer (redelivery or beat) got here first
    event_append(invocation=invocation, kind="attempt_abandoned", data={"attempt": attempt.number, "sent": True})
    return _unknown(invocation, ExecutionOutcome(
        commit=Commit.UNKNOWN, failure_class="timeout_unknown",
        error={"code": "outcome_unknown", "message": "the worker stopped while the request was in flight"},
    ))


def _resend_or_fail(invocation: Invocation) -> str:
    """The tool reports the key absent: re-send with the same key, within the retry policy (safe
    even if the cut-off request is still being processed: the key makes it one effect). With no
    attempt left, "nothing was committed" is only concluded once a cut-off request (no answer, a
    202 Accepted, an answer the client could not read) can no longer land (``ABSENT_SETTLE``); until then the call is looked up again.
    An attempt the tool answered (a 503, say) has nothing left in flight."""
    last = invocation.attempts.order_by("-number").first()
    now = timezone.now()
    decision = decide_retry(
        failure_class="transient", side_effect_class=invocation.tool_spec.side_effect_class,
        attempt=max(1, invocation.attempt_count), policy=retry_policy(invocation), now=now, deadline=invocation.deadline,
    )
    if decision.action == Action.STOP and _cut_off(last) and _settling(last, now):
        Invocation.objects.filter(pk=invocation.pk, state=State.OUTCOME_UNKNOWN).update(next_attempt_at=now + ABSENT_LOOKUP_AGAIN)
        return "absent_settling"
    if decision.action == Action.STOP:
        invocation_finish_with_message(
            invocation=invocation, src=State.OUTCOME_UNKNOWN, dst=State.FAILED_BEFORE_COMMIT, kind="failed_before_commit",
            status="error", commit_status=Commit.NOT_COMMITTED, data={"decision": decision.to_dict(), "evidence": "lookup"},
            error={"code": "deadline_exceeded" if decision.reason == "deadline" else "not_committed",
                   "message": f"the tool confirms nothing was committed; no further attempt ({decision.reason})"},
        )
        return "failed"
    due = (last.ended_at if last and last.ended_at else now) + timedelta(seconds=decision.delay_seconds)
    if due > now:  # honour the backoff between attempts, as a plain retry would
        Invocation.objects.filter(pk=invocation.pk, state=State.OUTCOME_UNKNOWN).update(next_attempt_at=due)
        return "waiting"
    claimed = execution_claim(invocation_id=invocation.pk, resend=True)
    if claimed:
        execution_run(invocation=claimed[0], attempt=claimed[1])
    return "resent"


# How long after its last attempt ended a call the remote reports absent is still looked up
# before "absent" is believed: a request cut off by our deadline may still be processed there.
ABSENT_SETTLE = timedelta(seconds=60)


ABSENT_LOOKUP_AGAIN = timedelta(seconds=10)


def _settling(last, now) -> bool:
    return last is None or last.ended_at is None or now - last.ended_at < ABSENT_SETTLE


def _cut_off(last) -> bool:
    """The last attempt may still be processed over there: it got no answer, a 202, or one the
    client could not read (an MCP ``bad_answer``)."""
    outcome = (last.outcome or {}) if last is not None else {}
    return (last is None or last.ended_at is None or last.failure_class == "timeout_unknown"
            or outcome.get("http_status") == 202 or (outcome.get("detail") or {}).get("kind") == "bad_answer")


def _absent_unsafe(invocation: Invocation) -> str:
    """A write_unsafe call the remote does not know (yet): never re-sent; looked up again while a
    late commit is still possible, then left to support staff with the evidence in the trace."""
    last = invocation.attempts.order_by("-number").first()
    now = timezone.now()
    settling = _settling(last, now)
    Invocation.objects.filter(pk=invocation.pk, state=State.OUTCOME_UNKNOWN).update(
        next_attempt_at=now + ABSENT_LOOKUP_AGAIN if settling else None)
    return "absent_settling" if settling else "absent"


def reconcile(*, invocation: Invocation) -> str:
    """Look an OUTCOME_UNKNOWN write_idempotent call up: committed, absent (re-send), or still unknown."""
    spec = invocation.tool_spec
    ctx = attempt_context(invocation, number=invocation.attempt_count, span_id=new_span_id(),
                          remote_key=recorded_remote_key(invocation))
    found = executors.lookup(config=spec.executor or {}, arguments=invocation.normalized_arguments, ctx=ctx)
    if found.external_resource_id is not None:
        found = replace(found, external_resource_id=redacted(invocation, found.external_resource_id))
    event_append(invocation=invocation, kind="reconciliation_lookup", data=redacted(invocation, {
        "committed": found.committed, "external_resource_id": found.external_resource_id, "detail": found.detail,
    }))
    if found.committed:
        invocation_transition(
            invocation=invocation, src=State.OUTCOME_UNKNOWN, dst=State.COMMITTED, kind="committed",
            data={"external_resource_id": found.external_resource_id, "by": "lookup"},
            fields={"commit_status": Commit.COMMITTED, "external_resource_id": found.external_resource_id or "",
                    "next_attempt_at": None, "error_code": "", "error_message": ""},
        )
        invocation_finish_with_message(
            invocation=invocation, src=State.COMMITTED, dst=State.OBSERVED, kind="observed", status="ok",
            value=found.value, commit_status=Commit.COMMITTED, external_resource_id=found.external_resource_id,
        )
        return "committed"
    if found.committed is False and spec.side_effect_class == "write_unsafe":
        return _absent_unsafe(invocation)
    if found.committed is False:
        return _resend_or_fail(invocation)
    Invocation.objects.filter(pk=invocation.pk, state=State.OUTCOME_UNKNOWN).update(
        next_attempt_at=timezone.now() + timedelta(seconds=10)
    )
    return "unknown"


def claim_for_delivery(invocation_id) -> tuple[str, Invocation | None, Attempt | None]:
    """What a delivered execute message may run: ``("claimed", invocation, attempt)``, or why
    nothing (``missing``: a stale message; ``in_flight``: another live worker holds the attempt,
    looked at again once its lease could lapse; ``nothing_to_do``: a duplicate or early delivery).

    Claim first: the usual delivery finds a ready invocation and needs no other read. Only an
    EXECUTING one can hold an open attempt (a due retry has closed its last one); one whose lease
    lapsed belonged to a worker that died, and is recovered before claiming again."""
    invocation, attempt = claim_or_inspect(invocation_id)
    if invocation is None:
        logger.warning("execute: no invocation %s (stale message)", invocation_id)
        return "missing", None, None
    if attempt is None and invocation.state == State.EXECUTING:
        stale = open_attempt(invocation)
        if stale is not None:
            if not attempt_lease_lapsed(stale):
                # Its worker is alive (it renews the lease): look again once the lease could lapse.
                wait = (stale.lease_expires_at - timezone.now()).total_seconds() if stale.lease_expires_at else 5.0
                enqueue_execution(invocation.pk, countdown=max(1.0, wait + 1.0))
                return "in_flight", invocation, None
            recover_abandoned(invocation=invocation, attempt=stale)
            invocation, attempt = claim_or_inspect(invocation_id)
    return ("claimed" if attempt is not None else "nothing_to_do"), invocation, attempt


def reconcile_due(*, limit: int):
    """OUTCOME_UNKNOWN writes whose lookup is due (``next_attempt_at`` is set on OUTCOME_UNKNOWN
    only for calls that reconcile by lookup)."""
    return Invocation.objects.filter(
        state=State.OUTCOME_UNKNOWN, tool_spec__side_effect_class__in=("write_idempotent", "write_unsafe"),
        next_attempt_at__lte=timezone.now(),
    ).select_related("tool_spec")[:limit]
