"""Carry invocations through EXECUTING to an honest end (docs/concepts/lifecycle.md, execution.md,
failures.md, results.md).

The worker's life of one attempt:

1. **claim** (one short transaction, row locked): move the invocation into EXECUTING (or take
   its next due retry) and open an ``Attempt``. A duplicate delivery finds nothing to claim
   and exits. An attempt that is still open when a redelivery arrives belonged to a worker
   that died: ``recover_abandoned`` decides what it means (see there).
2. **send** (no transaction): check cancel, run, digest and deadline as the claim read them
   under the lock, stamp ``sent_at`` (from here on the tool may act), call the executor. A
   read's attempt is stamped by the claim itself: whether or not it was sent, a read is retried.
3. **record** (one transaction): committed → COMMITTED → OBSERVED with the tool message; a
   failure goes through the pure retry decision: retry (the *database* holds the next attempt
   time), reconcile (OUTCOME_UNKNOWN), or stop (FAILED_BEFORE_COMMIT).
"""
from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Q
from django.utils import timezone

from specs_app.models import Tenant, ToolSpec
from specs_app.upstream_reads import UpstreamGate, upstream_gate
from toolops.db_batch import (Counted, column_converters, convert_row, execute_counted, execute_one, insert_returning_keys,
                              update_by_pk, update_by_pk_counted)
from toolops.decisions.deadlines import TimeoutPolicy
from toolops.runtime.digest import CanonicalizationError, invocation_digest
from toolops.decisions.execution import Commit, ExecutionOutcome
from toolops.decisions.retry import Action, RetryPolicy, decide_retry
from toolops.runtime.states import State
from toolops.runtime.tracecontext import new_span_id
from toolops import otel
from toolops.tracelog import trace_scope

from worker.executors import by_kind as executors
from invocations_app.budgets import attempt_refusal, budget_charge_cost
from invocations_app.dispatch import enqueue_execution
from worker.executors.http_client import grants_for_egress
from invocations_app.models import Attempt, Confirmation, Event, Invocation, Proposal, Run
from worker.remote_keys import invocation_remote_key, recorded_remote_key
from invocations_app.results import invocation_finish_with_message
from invocations_app.tool_messages import redacted, result_policy
from invocations_app.transitions import event_append, invocation_transition, transition_in_batch

logger = logging.getLogger(__name__)

# An open attempt older than its timeout plus this grace belongs to a worker that is gone
# (attempts recorded before leases existed; see LEASE_SECONDS for the rest).
ABANDON_GRACE = timedelta(seconds=5)
# The lease: a claim grants timeout + ABANDON_GRACE; while the attempt runs, its worker renews
# it to now + LEASE_SECONDS every LEASE_RENEW_SECONDS. Only a lapsed lease — the worker stopped
# renewing, i.e. it is gone — lets recovery touch the attempt, however slow the call is.
LEASE_SECONDS = 15.0
LEASE_RENEW_SECONDS = 3.0
WORKER = socket.gethostname()


def attempt_timeout(invocation: Invocation) -> float:
    return TimeoutPolicy.from_dict(invocation.tool_spec.timeout_policy or None).attempt_timeout_seconds


def retry_policy(invocation: Invocation) -> RetryPolicy:
    return RetryPolicy.from_dict(invocation.tool_spec.retry_policy or None)


# --- 1. claim -------------------------------------------------------------------------------

def _claimable_src(inv: Invocation, now: datetime) -> str | None:
    """The state to claim from, or None when this delivery has nothing to do."""
    if inv.state == State.PREPARED:
        return State.PREPARED
    if inv.state == State.AUTHORIZED and inv.tool_spec.side_effect_class == "read_only":
        if not _needs_confirmation(inv):
            return State.AUTHORIZED
        states = {c.state for c in _confirmations(inv)}
        ready = Confirmation.Status.PENDING not in states and Confirmation.Status.APPROVED in states
        return State.AUTHORIZED if ready else None
    due = inv.next_attempt_at is not None and inv.next_attempt_at <= now
    if inv.state == State.EXECUTING and due:
        return State.EXECUTING
    if inv.state == State.OUTCOME_UNKNOWN and due and inv.tool_spec.side_effect_class == "write_idempotent":
        return State.OUTCOME_UNKNOWN  # re-send with the same key after a lookup proved absence
    return None


def _needs_confirmation(inv: Invocation) -> bool:
    # Confirmation rows exist only for calls authorized as "confirm" (authorization.py), so
    # any other call has none to look up.
    return (inv.authorization or {}).get("decision") == "confirm"


def _confirmations(inv: Invocation) -> list[Confirmation]:
    """The invocation's confirmations, read once per claimed attempt."""
    if not hasattr(inv, "_claim_confirmations"):
        inv._claim_confirmations = list(inv.confirmations.only("state", "digest", "decided_at"))
    return inv._claim_confirmations


# One locked read brings all an attempt needs: the spec, the run (checks before sending) and
# the proposal (the tool message's tool_call_id).
_CLAIM_RELATED = (("tool_spec", ToolSpec), ("run", Run), ("proposal", Proposal), ("tenant", Tenant))


@functools.lru_cache(maxsize=None)
def _locked_read_plan(vendor: str, alias: str):
    """The claim read's SQL, and per model its fields and their converters, built once.

    The same statement as ``select_for_update(of=("self",)).select_related(...)``, written out
    because compiling that four-model query costs more CPU than all the rest of the claim.
    """
    conn = connections[alias]
    quote = conn.ops.quote_name
    tables = [("i", Invocation, None)] + [(f"r{n}", model, name) for n, (name, model) in enumerate(_CLAIM_RELATED)]
    columns, joins, plan = [], [], []
    for table, model, name in tables:
        fields = model._meta.concrete_fields
        columns += [f"{table}.{quote(f.column)}" for f in fields]
        plan.append((model, name, column_converters([f.get_col(table) for f in fields], conn)))
        if name:
            fk = Invocation._meta.get_field(name)
            joins.append(f"{'LEFT ' if fk.null else ''}JOIN {quote(model._meta.db_table)} {table} "
                         f"ON {table}.{quote(model._meta.pk.column)} = i.{quote(fk.column)}")
    sql = (f"SELECT {', '.join(columns)} FROM {quote(Invocation._meta.db_table)} i {' '.join(joins)} "
           f"WHERE i.{quote(Invocation._meta.pk.column)} = %s")
    if conn.features.has_select_for_update_of:
        sql += " FOR UPDATE OF i"
    elif conn.features.has_select_for_update:
        sql += " FOR UPDATE"
    return sql, plan


def _locked_read(invocation_id) -> Invocation | None:
    """The invocation, row-locked, with its spec, run and proposal attached; None if absent."""
    conn = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: each access through the proxy costs µs
    sql, plan = _locked_read_plan(conn.vendor, conn.alias)
    rows = execute_one(sql, [Invocation._meta.pk.get_db_prep_value(invocation_id, conn)])
    if not rows:
        return None
    row = rows[0]
    inv, start = None, 0
    for model, name, fields in plan:
        values = convert_row(row[start:start + len(fields)], fields, conn)
        start += len(fields)
        obj = None if values[0] is None else model.from_db(conn.alias, None, values)
        if name is None:
            inv = obj
        else:
            setattr(inv, name, obj)  # cached as if select_related had loaded it
    return inv


def execution_claim(*, invocation_id, resend: bool = False) -> tuple[Invocation, Attempt] | None:
    """Claim the next attempt of an invocation, or None (duplicate delivery, not ready, over)."""
    invocation, attempt = claim_or_inspect(invocation_id, resend=resend)
    return (invocation, attempt) if attempt is not None else None


def claim_or_inspect(invocation_id, *, resend: bool = False) -> tuple[Invocation | None, Attempt | None]:
    """``execution_claim``, also returning the invocation as read under its lock when there
    was nothing to claim (``(None, None)``: no such invocation)."""
    now = timezone.now()
    with transaction.atomic():
        inv = _locked_read(invocation_id)
        if inv is None:
            return None, None
        src = _claimable_src(inv, now)
        if src is None or (src == State.OUTCOME_UNKNOWN and not resend):
            return inv, None
        number = inv.attempt_count + 1
        started, attempt = _attempt_opened(inv, number, now)
        if src == State.EXECUTING:
            Invocation.objects.filter(pk=inv.pk).update(attempt_count=number, next_attempt_at=None)
            inv.attempt_count, inv.next_attempt_at = number, None
            event_append(invocation=inv, **started)
        else:
            invocation_transition(
                invocation=inv, src=src, dst=State.EXECUTING, kind="execution_started",
                data={"attempt": number, "resend_same_key": src == State.OUTCOME_UNKNOWN},
                fields={"attempt_count": number, "next_attempt_at": None}, then=[started],
            )
        insert_returning_keys([attempt])  # its generated key is needed to close it
    return inv, attempt


def _attempt_opened(inv: Invocation, number: int, now: datetime) -> tuple[dict, Attempt]:
    """The ``attempt_started`` event (as ``then`` data) and the unsaved Attempt of a claim."""
    span = new_span_id()
    started = {"kind": "attempt_started", "data": {"attempt": number, "attempt_id": span}, "span_id": span}
    # A read may count as sent from here: recovery retries it either way, and it saves a
    # commit before the call. A write is stamped only right before its request leaves.
    read_only = inv.tool_spec.side_effect_class == "read_only"
    attempt = Attempt(
        invocation=inv, tool_spec_id=inv.tool_spec_id, number=number, span_id=span, worker=WORKER, started_at=now,
        sent_at=now if read_only else None, remote_key=invocation_remote_key(inv),
        lease_expires_at=now + timedelta(seconds=attempt_timeout(inv)) + ABANDON_GRACE,
    )
    return started, attempt


@dataclass(frozen=True)
class AdmissionClaim:
    """The claim of a read's first attempt, written in its admission's own round trip."""

    events: list[Event]  # execution_started and attempt_started, after the admission chain
    statements: list[tuple[str, list]]  # the UPDATE AUTHORIZED → EXECUTING
    fields: dict  # what that UPDATE sets, for the in-memory row once written
    attempt: Attempt  # unsaved; its generated key is read back


def claim_with_admission(invocation: Invocation, *, now: datetime) -> AdmissionClaim:
    """Claim the first attempt of a read-only call being admitted ready to run, for the process
    that admits it and will run it at once (``proposal_admit(executes_reads_itself=True)``, the
    MCP front door's inline reads): the events, transition and Attempt ``claim_or_inspect``
    would write a moment later, to go in admission's one round trip instead of a second
    transaction (``transitions.transition_in_batch``). The row is still born AUTHORIZED (the
    birth guard) and moved to EXECUTING by an UPDATE along the table's edge. ``invocation`` is
    the unsaved row (its ``event_seq`` the admission chain's length)."""
    started, attempt = _attempt_opened(invocation, 1, now)
    events, statement, fields = transition_in_batch(
        invocation=invocation, src=State.AUTHORIZED, dst=State.EXECUTING, kind="execution_started",
        data={"attempt": 1, "resend_same_key": False}, fields={"attempt_count": 1, "next_attempt_at": None}, then=[started],
    )
    return AdmissionClaim(events=events, statements=[statement], fields=fields, attempt=attempt)


def run_claimed_at_admission(invocation: Invocation) -> Invocation:
    """Run the attempt ``claim_with_admission`` opened, in this process: the same send and record
    as a worker's (``execution_run``), on the row as admission wrote it, with no read."""
    attempt = invocation.attempts.all()[0]  # admission's own, remembered as a prefetch (no query)
    # The arguments exactly as a worker reads them back (JSON), not admission's Python values.
    invocation.normalized_arguments = json.loads(json.dumps(invocation.normalized_arguments))
    return execution_run(invocation=invocation, attempt=attempt, gates_checked_at_admission=True)


def open_attempt(invocation: Invocation) -> Attempt | None:
    return invocation.attempts.filter(ended_at__isnull=True).order_by("-number").first()


# --- 2. send ----------------------------------------------------------------------------------

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
    with trace_scope(invocation.trace_id, attempt.span_id), LEASES.hold(attempt.pk):
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


class _LeaseKeeper:
    """One thread per worker process renews the leases of every attempt the process is running.

    A single ``UPDATE … WHERE id IN (…)`` every LEASE_RENEW_SECONDS, only while something runs:
    a quick attempt costs a set insert and removal, no thread start and no extra connection.
    Started lazily in the process that uses it (a forked pool child starts its own).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[object, int] = {}
        self.pid: int | None = None

    def hold(self, attempt_id) -> "_LeaseHold":
        return _LeaseHold(self, attempt_id)

    def _add(self, attempt_id) -> None:
        with self.lock:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="attempt-leases", daemon=True).start()
            self.active[attempt_id] = self.active.get(attempt_id, 0) + 1

    def _remove(self, attempt_id) -> None:
        with self.lock:
            left = self.active.get(attempt_id, 0) - 1
            if left > 0:
                self.active[attempt_id] = left
            else:
                self.active.pop(attempt_id, None)

    def _run(self) -> None:
        while True:
            time.sleep(LEASE_RENEW_SECONDS)
            with self.lock:
                ids = list(self.active)
            if not ids:
                continue
            try:
                Attempt.objects.filter(pk__in=ids, ended_at__isnull=True).update(
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS))
            except Exception:  # noqa: BLE001 - a failed renewal lets a lease lapse; it must not stop the keeper
                logger.exception("attempt lease renewal failed")
            finally:
                # Only slow attempts get here, every few seconds: a connection per round costs
                # little and none is left open (an idle session would hold its database busy).
                connection.close()


class _LeaseHold:
    def __init__(self, keeper: _LeaseKeeper, attempt_id) -> None:
        self.keeper, self.attempt_id = keeper, attempt_id

    def __enter__(self) -> "_LeaseHold":
        self.keeper._add(self.attempt_id)
        return self

    def __exit__(self, *exc) -> None:
        self.keeper._remove(self.attempt_id)


LEASES = _LeaseKeeper()


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


# --- 3. record ------------------------------------------------------------------------------

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
        if changed:
            inv = attempt.invocation
            otel.export_span(
                name="toolops.attempt", trace_id=inv.trace_id, span_id=attempt.span_id, parent_span_id=inv.span_id,
                start=attempt.started_at, end=ended, error=bool(failure_class),
                attributes={"toolops.tool": inv.tool_ref, "toolops.attempt": attempt.number, "toolops.commit": commit,
                            "toolops.failure_class": failure_class},
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
        if cost is not None and not isinstance(cost, bool) and executors.COST_RE.fullmatch(str(cost)):
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


# --- worker death and reconciliation -----------------------------------------------------------

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


def attempt_lease_lapsed(attempt: Attempt, *, now: datetime | None = None) -> bool:
    """True when the attempt's worker is gone: its lease ran out (nobody renews it any more)."""
    now = now or timezone.now()
    if attempt.lease_expires_at is not None:
        return attempt.lease_expires_at < now
    return now - attempt.started_at > timedelta(seconds=attempt_timeout(attempt.invocation)) + ABANDON_GRACE


def stale_open_attempts(*, now: datetime | None = None):
    """Open attempts whose worker is gone (lease lapsed), never ones that are merely slow."""
    now = now or timezone.now()
    lapsed = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    for attempt in Attempt.objects.filter(lapsed, ended_at__isnull=True).select_related("invocation__tool_spec"):
        if attempt.invocation.state == State.EXECUTING and attempt_lease_lapsed(attempt, now=now):
            yield attempt


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

