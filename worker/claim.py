"""Step 1 of an attempt, the claim (docs/concepts/execution.md): one short transaction, the row
locked — move the invocation into EXECUTING (or take its next due retry) and open an ``Attempt``.
A duplicate delivery finds nothing to claim and exits; an attempt still open when a redelivery
arrives belonged to a worker that died (``worker.recovery``). Admission can claim a read's first
attempt in its own round trip (``claim_with_admission``, passed in by the MCP front door).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from invocations_app.models import Attempt, Confirmation, Event, Invocation, Proposal, Run
from invocations_app.transitions import event_append, invocation_transition, transition_in_batch
from specs_app.models import Tenant, ToolSpec
from toolops import metrics
from toolops.sql import insert_returning_keys, select_locked_with_related
from toolops.runtime.states import State
from toolops.runtime.tracecontext import new_span_id
from worker.leases import ABANDON_GRACE, WORKER, attempt_timeout
from worker.remote_keys import invocation_remote_key

logger = logging.getLogger(__name__)


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


def _locked_read(invocation_id) -> Invocation | None:
    """The invocation, row-locked, with its spec, run, proposal and tenant attached; None if absent."""
    return select_locked_with_related(Invocation, _CLAIM_RELATED, invocation_id)


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
        # Ready since its due time (a retry, a re-send) or its last transition (released, approved).
        metrics.attempt_claimed(ready_at=inv.next_attempt_at if src in (State.EXECUTING, State.OUTCOME_UNKNOWN)
                                else inv.updated_at, claimed_at=now)
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
    that admits it and will run it at once (``proposal_admit(claim_inline=claim_with_admission)``, the
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


def open_attempt(invocation: Invocation) -> Attempt | None:
    return invocation.attempts.filter(ended_at__isnull=True).order_by("-number").first()
