"""Step 2 of an attempt, the send (no transaction): check cancel, run, digest and deadline as the
claim read them under the lock, stamp ``sent_at`` (from here on the tool may act), call the
executor of the tool's kind while the attempt's lease is kept, then hand the outcome to
``worker.record``. A read's attempt is stamped by the claim itself: sent or not, a read is retried.
"""
from __future__ import annotations

import json
import logging
import time

from django.utils import timezone

from invocations_app.budgets import attempt_refusal
from invocations_app.models import Attempt, Confirmation, Invocation
from invocations_app.results import invocation_finish_with_message
from invocations_app.tool_messages import result_policy
from specs_app.models import ToolSpec
from specs_app.upstream_reads import UpstreamGate, upstream_gate
from toolops.sql import update_by_pk
from toolops.decisions.execution import Commit, ExecutionOutcome
from toolops.runtime.digest import CanonicalizationError, invocation_digest
from toolops.runtime.states import State
from toolops.logformat import invocation_scope
from toolops.tracelog import trace_scope
from worker.claim import _confirmations, _needs_confirmation
from worker.executors import by_kind as executors
from worker.executors.http_client import grants_for_egress
from worker.leases import LEASES, attempt_timeout
from worker.record import _close_attempt, execution_record
from worker.remote_keys import invocation_remote_key

logger = logging.getLogger(__name__)


def run_claimed_at_admission(invocation: Invocation) -> Invocation:
    """Run the attempt ``claim_with_admission`` opened, in this process: the same send and record
    as a worker's (``execution_run``), on the row as admission wrote it, with no read."""
    attempt = invocation.attempts.all()[0]  # admission's own, remembered as a prefetch (no query)
    # The arguments exactly as a worker reads them back (JSON), not admission's Python values.
    invocation.normalized_arguments = json.loads(json.dumps(invocation.normalized_arguments))
    return execution_run(invocation=invocation, attempt=attempt, gates_checked_at_admission=True)


def execution_run(*, invocation: Invocation, attempt: Attempt, gates_checked_at_admission: bool = False) -> Invocation:
    """Send the claimed attempt (outside any transaction) and record what happened.
    ``gates_checked_at_admission``: claimed by admission itself moments ago, in this thread."""
    refusal = _refusal_before_send(invocation)
    if refusal:
        return _stop_before_send(invocation, attempt, *refusal)
    if attempt.sent_at is None:
        update_by_pk(attempt, {"sent_at": timezone.now()})
    ctx = attempt_context(invocation, number=attempt.number, span_id=attempt.span_id,
                          remote_key=attempt.remote_key or invocation_remote_key(invocation),
                          gates_checked_at_admission=gates_checked_at_admission)
    with trace_scope(invocation.trace_id, attempt.span_id), invocation_scope(invocation.pk), LEASES.hold(attempt.pk):
        logger.info("attempt %s of %s sent", attempt.number, invocation.tool_ref)
        outcome = _execute_safely(invocation, attempt, ctx)
        logger.info("attempt %s ended: commit=%s failure=%s", attempt.number, outcome.commit, outcome.failure_class)
        return execution_record(invocation=invocation, attempt=attempt, outcome=outcome, sent_as=ctx.side_effect_class)


def attempt_context(invocation: Invocation, *, number: int, span_id: str, remote_key: str,
                    gates_checked_at_admission: bool = False) -> executors.AttemptContext:
    """What the executor needs for one attempt or lookup, with its wall-clock deadline starting now
    (never later than the invocation's own deadline)."""
    timeout = attempt_timeout(invocation)
    if invocation.deadline:
        timeout = max(0.0, min(timeout, (invocation.deadline - timezone.now()).total_seconds()))
    policy = result_policy(invocation)
    spec = invocation.tool_spec
    if gates_checked_at_admission:  # admission's fresh gates: the spec's class is confirmed
        sent_as, gate = spec.side_effect_class, None
    else:
        sent_as, gate = attempt_class(spec)
    return executors.AttemptContext(
        invocation_id=str(invocation.pk), tool_ref=invocation.tool_ref,
        side_effect_class=sent_as, upstream_gate=gate, attempt=number,
        idempotency_key=invocation.idempotency_key, traceparent=f"00-{invocation.trace_id}-{span_id}-01",
        timeout_seconds=timeout, remote_key=remote_key, egress_grants=grants_for_egress(invocation.authorization),
        max_response_bytes=policy.max_response_bytes, oversize=policy.oversize, deadline=time.monotonic() + timeout,
        gates_checked_at_admission=gates_checked_at_admission,
    )


def attempt_class(spec: ToolSpec) -> tuple[str, UpstreamGate | None]:
    """The side-effect class an attempt of ``spec`` is sent and judged under, and the imported
    tool's gate read to decide it (one read, handed to the executor with the context): the
    spec's class, except an imported tool's read-only claim no admin confirmed
    (``UpstreamGate.sent_as``)."""
    gate = upstream_gate(spec=spec)  # None, without a query, for a tool not imported from MCP
    return (gate.sent_as(spec.side_effect_class) if gate else spec.side_effect_class), gate


def _execute_safely(invocation: Invocation, attempt: Attempt, ctx) -> ExecutionOutcome:
    try:
        return executors.execute(config=invocation.tool_spec.executor or {}, arguments=invocation.normalized_arguments, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - an executor bug must still end the attempt honestly
        logger.exception("executor raised")
        unknown = ctx.side_effect_class != "read_only"
        return ExecutionOutcome(
            commit=Commit.UNKNOWN if unknown else Commit.NOT_APPLICABLE, failure_class="timeout_unknown",
            error={"code": "executor_error", "message": type(exc).__name__},
        )


def _refusal_before_send(inv: Invocation) -> tuple[str, str] | None:
    """Why the claimed attempt must not be sent, judged on what the claim read under the row
    lock: a cancel or a run ending after that is no different from one just after the send."""
    if inv.cancel_requested_at:
        return "cancelled", "cancelled before the request was sent"
    refusal = attempt_refusal(inv.run, fresh=True)
    if refusal:
        return refusal
    if _sent_digest(inv) != inv.digest:
        # What is about to leave must hash to the digest that was authorized (and confirmed):
        # arguments changed in the database after the decision are never sent.
        return "digest_mismatch", "the arguments about to be sent do not hash to the invocation's digest"
    approvals = [c for c in _confirmations(inv) if c.state == Confirmation.Status.APPROVED] if _needs_confirmation(inv) else []
    approved = max(approvals, key=lambda c: c.decided_at, default=None)
    if approved and approved.digest != inv.digest:
        return "digest_mismatch", "the confirmed digest differs from the invocation's"
    if inv.deadline and timezone.now() >= inv.deadline:
        return "deadline_exceeded", "the deadline passed before the request was sent"
    return None


def _sent_digest(inv: Invocation) -> str | None:
    """docs/concepts/admission.md's digest of the normalized arguments as stored now (None if they cannot be hashed)."""
    try:
        return invocation_digest(tenant=inv.tenant.slug, tool_ref=inv.tool_ref, normalized_arguments=inv.normalized_arguments)
    except (CanonicalizationError, ValueError, TypeError):
        return None


def _stop_before_send(inv: Invocation, attempt: Attempt, code: str, message: str) -> Invocation:
    _close_attempt(attempt, commit=Commit.NOT_COMMITTED, failure_class="not_reached", outcome={"error": code}, unsent=True)
    return invocation_finish_with_message(
        invocation=inv, src=State.EXECUTING, dst=State.FAILED_BEFORE_COMMIT, kind=code,
        status="error", error={"code": code, "message": message}, commit_status=Commit.NOT_COMMITTED,
    )
