"""Support staff resolving unknown outcomes (docs/concepts/lifecycle.md): look up, mark, re-send.

An invocation in OUTCOME_UNKNOWN may have acted on the world. A support person with
django-guardian's ``specs_app.resolve_toolspec`` on its ToolSpec *and* ``specs_app.resolve_calls``
on its tenant (each as an object permission or model-wide; superusers always) settles it:

* **look up now** (``resolution_lookup``) asks the tool through the executor's lookup and records
  the answer as a ``support_lookup`` event. No state changes: the person reads the answer first.
* **mark committed** (external resource id + evidence) → COMMITTED, and → OBSERVED with a tool
  message when the Run is still active.
* **mark not committed** (evidence) → FAILED_BEFORE_COMMIT, with a tool message when the Run is
  still active.
* **re-send with the same key** (``write_idempotent`` only) → EXECUTING with the same idempotency
  key; the tool deduplicates by key, so this can never create a second effect.

Every action needs a reason and is an event carrying who (``actor``) and when (``at``).

**A tool message only while the Run is live.** When the Run has ended (finished or exhausted) no
model will read the message, so a resolution stores none:

* mark not committed → FAILED_BEFORE_COMMIT by a plain transition, without messages;
* mark committed → the call stays COMMITTED. COMMITTED → OBSERVED is the only way on from there
  and OBSERVED means "the result was given back with its message" (results.py writes both in one
  transaction), so we do not reach OBSERVED without one. The resolution is fully recorded (commit
  status, external id, the ``resolved_committed`` event, the idempotency record set to succeeded).

**Four-eyes** (``ToolSpec.confirmation_policy["four_eyes_resolution"]``): a manual resolution is
first only *proposed* (a ``resolution_proposed`` event); a *different* person confirms it
(``resolution_confirmed``, then the transition) or anyone with the permission rejects it
(``resolution_rejected``). The pending proposal is the latest ``resolution_proposed`` not followed by
a confirmation or rejection. A confirmation names the proposal it saw (its event seq), so a
proposal replaced meanwhile is never confirmed by mistake.

**Race safety.** Each change locks the invocation row, checks the state, and moves it with
``invocation_transition`` from OUTCOME_UNKNOWN (a conditional UPDATE). Of two people resolving at
once exactly one wins; the other gets ``AlreadyResolved`` and nothing of theirs is written.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone
from guardian.shortcuts import get_objects_for_user

from specs_app.models import Tenant, ToolSpec
from specs_app.selectors import RESOLVE_CALLS, tenants_for_user
from toolops.errors import ApplicationError, Conflict
from toolops.decisions.execution import Commit, LookupOutcome
from toolops.runtime.states import State
from toolops.runtime.tracecontext import new_span_id

from worker.executors import by_kind as executors
from worker.attempt import attempt_context, execution_run
from worker.claim import execution_claim
from worker.leases import attempt_timeout
from invocations_app.models import Event, IdempotencyRecord, Invocation, Run
from worker.remote_keys import recorded_remote_key
from invocations_app.results import invocation_finish_with_message
from invocations_app.tool_messages import redacted
from invocations_app.transitions import TransitionConflict, event_append, invocation_transition

logger = logging.getLogger(__name__)

RESOLVE_PERMISSION = "specs_app.resolve_toolspec"
MARK_COMMITTED = "mark_committed"
MARK_NOT_COMMITTED = "mark_not_committed"
ACTION_LABELS = {MARK_COMMITTED: "mark committed", MARK_NOT_COMMITTED: "mark not committed"}
PROPOSAL_KINDS = ("resolution_proposed", "resolution_confirmed", "resolution_rejected")
# Event kinds that make up an invocation's reconciliation history (queue and record pages).
HISTORY_KINDS = (
    "outcome_unknown", "attempt_abandoned", "reconciliation_lookup", "support_lookup", "support_resend",
    "resolution_proposed", "resolution_confirmed", "resolution_rejected", "resolution_applied",
    "resolved_committed", "resolved_not_committed",
)
# Events that carry a person's decision right before the transition it causes.
DECISION_KINDS = ("resolution_applied", "resolution_confirmed", "support_resend")
LOOKUP_VALUE_MAX_CHARS = 4000
# A re-send needs at least this much time before the deadline; otherwise the worker would refuse
# it after the claim and turn a call that may have acted into FAILED_BEFORE_COMMIT.
RESEND_DEADLINE_MARGIN = timedelta(seconds=2)


class AlreadyResolved(Conflict):
    code = "already_resolved"


class ResolutionPending(Conflict):
    code = "resolution_pending"


class StaleProposal(Conflict):
    code = "stale_resolution_proposal"


class SecondPersonRequired(Conflict):
    code = "four_eyes_second_person_required"


@dataclass(frozen=True)
class Resolution:
    """What a mark_* / confirm call did: ``applied`` (state moved) or ``proposed`` (four-eyes)."""

    outcome: str
    state: str
    message_emitted: bool = False
    proposal_seq: int | None = None


@dataclass(frozen=True)
class PendingResolution:
    """A four-eyes proposal waiting for a second person."""

    seq: int
    action: str
    external_resource_id: str
    evidence: str
    reason: str
    proposed_by: str  # username
    proposed_by_id: int | None
    at: object

    @property
    def label(self) -> str:
        return ACTION_LABELS.get(self.action, self.action)


# --- permission and inputs ----------------------------------------------------------------------

def resolvable_toolspecs(*, user) -> QuerySet[ToolSpec]:
    """ToolSpec versions whose unknown outcomes ``user`` may see and resolve (object or model-wide perm)."""
    if not (user.is_authenticated and user.is_active):
        return ToolSpec.objects.none()
    if user.is_superuser:
        return ToolSpec.objects.all()
    return get_objects_for_user(user, RESOLVE_PERMISSION, klass=ToolSpec)


def resolvable_tenants(*, user) -> QuerySet[Tenant]:
    """Tenants whose unknown outcomes ``user`` may resolve (with ``resolvable_toolspecs``: the scope is the pair)."""
    return tenants_for_user(user=user, permission=RESOLVE_CALLS)


def can_resolve(*, user, invocation: Invocation) -> bool:
    if not (user.is_authenticated and user.is_active) or invocation.tool_spec_id is None:
        return False
    return user.is_superuser or (
        resolvable_toolspecs(user=user).filter(pk=invocation.tool_spec_id).exists()
        and resolvable_tenants(user=user).filter(pk=invocation.tenant_id).exists()
    )


def _require_resolver(user, invocation: Invocation) -> None:
    if not can_resolve(user=user, invocation=invocation):
        raise PermissionDenied("you may not resolve unknown outcomes of this tool in this tenant")


def _required(value: str | None, *, code: str, what: str) -> str:
    text = (value or "").strip()
    if not text:
        raise ApplicationError(f"{what} is required", code=code)
    return text


def _actor(user) -> str:
    return f"user:{user.username}"


def four_eyes_required(invocation: Invocation) -> bool:
    return bool((invocation.tool_spec.confirmation_policy or {}).get("four_eyes_resolution"))


def pending_resolution(*, invocation: Invocation, events: list[Event] | None = None) -> PendingResolution | None:
    """The latest ``resolution_proposed`` not followed by a confirmation or a rejection (or None).

    ``events`` may be given (any order, any kinds) to avoid a query when the caller has them.
    """
    if events is None:
        events = list(Event.objects.filter(invocation_id=invocation.pk, kind__in=PROPOSAL_KINDS).order_by("seq"))
    pending = None
    for event in sorted((e for e in events if e.kind in PROPOSAL_KINDS), key=lambda e: e.seq):
        if event.kind == "resolution_proposed":
            data = event.data or {}
            pending = PendingResolution(
                seq=event.seq, action=data.get("action", ""), external_resource_id=data.get("external_resource_id", ""),
                evidence=data.get("evidence", ""), reason=data.get("reason", ""), proposed_by=data.get("proposed_by", ""),
                proposed_by_id=data.get("proposed_by_id"), at=event.at,
            )
        else:
            pending = None
    return pending


def _lock_unknown(invocation: Invocation) -> Invocation:
    """Lock the row (inside the caller's transaction) and insist it is still OUTCOME_UNKNOWN."""
    locked = Invocation.objects.select_for_update(of=("self",)).select_related("tool_spec").get(pk=invocation.pk)
    if locked.state != State.OUTCOME_UNKNOWN:
        raise _already_resolved(locked)
    return locked


def _already_resolved(invocation: Invocation) -> AlreadyResolved:
    """The loser's answer: what the call is now, and who moved it out of OUTCOME_UNKNOWN."""
    events = list(Event.objects.filter(invocation_id=invocation.pk).order_by("-seq")[:6])
    actor = None
    for i, event in enumerate(events):
        if event.from_state == State.OUTCOME_UNKNOWN and event.to_state != State.OUTCOME_UNKNOWN:
            actor = event.actor
            before = events[i + 1] if i + 1 < len(events) else None
            if actor == "system" and before is not None and before.kind in DECISION_KINDS:
                actor = before.actor  # the runtime wrote the transition for the person who decided
            break
    who = f" by {actor.removeprefix('user:')}" if actor and actor != "system" else ""
    return AlreadyResolved(f"already resolved: the call is {invocation.state} now{who}",
                           extra={"state": invocation.state, "actor": actor})


# --- look up now -------------------------------------------------------------------------------

def _attempt_context(invocation: Invocation) -> executors.AttemptContext:
    # The lookup asks for the key the remote was actually sent (derived per tenant, docs/concepts/execution.md).
    return attempt_context(invocation, number=invocation.attempt_count, span_id=new_span_id(),
                           remote_key=recorded_remote_key(invocation))


def _capped(value) -> object:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return {"unserializable": type(value).__name__}
    if len(text) <= LOOKUP_VALUE_MAX_CHARS:
        return value
    return {"truncated": True, "chars": len(text), "head": text[:LOOKUP_VALUE_MAX_CHARS]}


def resolution_lookup(*, invocation: Invocation, user, reason: str) -> LookupOutcome:
    """Ask the tool whether the effect exists; record the answer (who, when, why); change nothing."""
    _require_resolver(user, invocation)
    reason = _required(reason, code="reason_required", what="a reason")
    invocation.refresh_from_db()
    if invocation.state != State.OUTCOME_UNKNOWN:
        raise _already_resolved(invocation)
    try:
        found = executors.lookup(config=invocation.tool_spec.executor or {}, arguments=invocation.normalized_arguments,
                                 ctx=_attempt_context(invocation))
    except Exception as exc:  # noqa: BLE001 - a failing lookup is an answer ("could not tell"), not a 500
        logger.exception("support lookup failed", extra={"trace_id": invocation.trace_id})
        found = LookupOutcome(committed=None, detail={"error": type(exc).__name__})
    event_append(
        invocation=invocation, kind="support_lookup", actor=_actor(user),
        # What a remote answered may echo credentials in any encoding: redacted before it is kept.
        data=redacted(invocation, {"reason": reason, "committed": found.committed,
                                   "external_resource_id": found.external_resource_id, "detail": found.detail,
                                   "value": _capped(found.value)}),
    )
    return found


# --- mark committed / not committed -----------------------------------------------------------

def resolution_mark_committed(*, invocation: Invocation, user, external_resource_id: str, evidence: str, reason: str) -> Resolution:
    """OUTCOME_UNKNOWN → COMMITTED (→ OBSERVED with a tool message while the run is live)."""
    _require_resolver(user, invocation)
    external_resource_id = _required(external_resource_id, code="external_resource_id_required", what="the external resource id")
    evidence = _required(evidence, code="evidence_required", what="evidence")
    reason = _required(reason, code="reason_required", what="a reason")
    return _decide(invocation, user, action=MARK_COMMITTED, external_resource_id=external_resource_id,
                   evidence=evidence, reason=reason)


def resolution_mark_not_committed(*, invocation: Invocation, user, evidence: str, reason: str) -> Resolution:
    """OUTCOME_UNKNOWN → FAILED_BEFORE_COMMIT (with a tool message while the run is live)."""
    _require_resolver(user, invocation)
    evidence = _required(evidence, code="evidence_required", what="evidence")
    reason = _required(reason, code="reason_required", what="a reason")
    return _decide(invocation, user, action=MARK_NOT_COMMITTED, external_resource_id="", evidence=evidence, reason=reason)


def _decide(invocation: Invocation, user, *, action: str, external_resource_id: str, evidence: str, reason: str) -> Resolution:
    data = {"action": action, "external_resource_id": external_resource_id, "evidence": evidence, "reason": reason}
    try:
        with transaction.atomic():
            locked = _lock_unknown(invocation)
            pending = pending_resolution(invocation=locked)
            if pending is not None:
                raise ResolutionPending(
                    f"{pending.proposed_by} already proposed “{pending.label}”: confirm or reject it first",
                    extra={"proposal_seq": pending.seq},
                )
            if four_eyes_required(locked):
                event = event_append(
                    invocation=locked, kind="resolution_proposed", actor=_actor(user),
                    data={**data, "proposed_by": user.username, "proposed_by_id": user.pk},
                )
                return Resolution(outcome="proposed", state=locked.state, proposal_seq=event.seq)
            decision = event_append(invocation=locked, kind="resolution_applied", actor=_actor(user),
                                    data={**data, "by": [user.username]})
            emitted = _apply(locked, user=user, by=[user.username], decision_seq=decision.seq, **data)
    except (TransitionConflict, IntegrityError):
        invocation.refresh_from_db()
        raise _already_resolved(invocation) from None
    invocation.refresh_from_db()
    return Resolution(outcome="applied", state=invocation.state, message_emitted=emitted)


def _run_is_live(invocation: Invocation) -> bool:
    return Run.objects.filter(pk=invocation.run_id, status=Run.Status.ACTIVE).exists()


NOT_COMMITTED_ERROR = {
    "code": "not_committed",
    "message": "Support staff verified that this call did not take effect; nothing was changed. "
               "Propose a new call if it is still needed.",
}


def _apply(invocation: Invocation, *, user, by: list[str], decision_seq: int, action: str, external_resource_id: str,
           evidence: str, reason: str) -> bool:
    """The state change of a decided resolution (inside the caller's transaction, row locked).

    Returns whether a model-facing tool message was written (only while the run is active).
    """
    live = _run_is_live(invocation)
    note = {"by": by, "decision_seq": decision_seq, "reason": reason, "evidence": evidence, "run_live": live}
    if action == MARK_COMMITTED:
        return _apply_committed(invocation, actor=_actor(user), note=note, external_resource_id=external_resource_id, live=live)
    return _apply_not_committed(invocation, actor=_actor(user), note=note, live=live)


def _apply_committed(invocation: Invocation, *, actor: str, note: dict, external_resource_id: str, live: bool) -> bool:
    invocation_transition(
        invocation=invocation, src=State.OUTCOME_UNKNOWN, dst=State.COMMITTED, kind="resolved_committed", actor=actor,
        data={**note, "external_resource_id": external_resource_id},
        fields={"commit_status": Commit.COMMITTED, "external_resource_id": external_resource_id,
                "next_attempt_at": None, "error_code": "", "error_message": "", "error_detail": {}},
    )
    if not live:
        # COMMITTED → OBSERVED would claim a message was given back; the run has ended, so none is.
        _settle_idempotency(invocation, IdempotencyRecord.Status.SUCCEEDED)
        return False
    invocation_finish_with_message(
        invocation=invocation, src=State.COMMITTED, dst=State.OBSERVED, kind="observed", status="ok",
        value={"resolved_by": "support", "external_resource_id": external_resource_id,
               "message": "Support staff verified that this call took effect."},
        commit_status=Commit.COMMITTED, external_resource_id=external_resource_id,
        data={"resolution": "support", "decision_seq": note["decision_seq"]},
    )
    return True


def _apply_not_committed(invocation: Invocation, *, actor: str, note: dict, live: bool) -> bool:
    if live:
        invocation_finish_with_message(
            invocation=invocation, src=State.OUTCOME_UNKNOWN, dst=State.FAILED_BEFORE_COMMIT, kind="resolved_not_committed",
            status="error", error=NOT_COMMITTED_ERROR, commit_status=Commit.NOT_COMMITTED, data=note,
        )
        return True
    invocation_transition(
        invocation=invocation, src=State.OUTCOME_UNKNOWN, dst=State.FAILED_BEFORE_COMMIT, kind="resolved_not_committed",
        actor=actor, data=note,
        fields={"commit_status": Commit.NOT_COMMITTED, "result_status": "error", "result_value": None,
                "error_code": NOT_COMMITTED_ERROR["code"], "error_message": NOT_COMMITTED_ERROR["message"],
                "error_detail": NOT_COMMITTED_ERROR, "observed_at": timezone.now(), "next_attempt_at": None},
    )
    _settle_idempotency(invocation, IdempotencyRecord.Status.FAILED)
    return False


def _settle_idempotency(invocation: Invocation, status: str) -> None:
    IdempotencyRecord.objects.filter(invocation=invocation).update(status=status)


# --- four-eyes: confirm or reject a proposal ----------------------------------------------------

def _proposal_for(locked: Invocation, proposal_seq) -> PendingResolution:
    pending = pending_resolution(invocation=locked)
    try:
        seen = int(proposal_seq)
    except (TypeError, ValueError):
        seen = None
    if pending is None or pending.seq != seen:
        raise StaleProposal(
            "the proposed resolution you saw is no longer pending: review the call again",
            extra={"pending_seq": pending.seq if pending else None},
        )
    return pending


def resolution_confirm(*, invocation: Invocation, user, proposal_seq, reason: str) -> Resolution:
    """A second person confirms the pending proposal; the resolution is applied."""
    _require_resolver(user, invocation)
    reason = _required(reason, code="reason_required", what="a reason")
    try:
        with transaction.atomic():
            locked = _lock_unknown(invocation)
            pending = _proposal_for(locked, proposal_seq)
            if pending.proposed_by_id == user.pk:
                raise SecondPersonRequired(
                    "you proposed this resolution yourself: under the four-eyes rule a different person must confirm it"
                )
            decision = event_append(
                invocation=locked, kind="resolution_confirmed", actor=_actor(user),
                data={"proposal_seq": pending.seq, "action": pending.action, "reason": reason,
                      "proposed_by": pending.proposed_by, "confirmed_by": user.username},
            )
            emitted = _apply(
                locked, user=user, by=[pending.proposed_by, user.username], decision_seq=decision.seq,
                action=pending.action, external_resource_id=pending.external_resource_id, evidence=pending.evidence,
                reason=f"{pending.reason} / confirmed: {reason}",
            )
    except (TransitionConflict, IntegrityError):
        invocation.refresh_from_db()
        raise _already_resolved(invocation) from None
    invocation.refresh_from_db()
    return Resolution(outcome="applied", state=invocation.state, message_emitted=emitted)


def resolution_reject(*, invocation: Invocation, user, proposal_seq, reason: str) -> PendingResolution:
    """Reject (or, for its author, withdraw) the pending proposal; the call stays OUTCOME_UNKNOWN."""
    _require_resolver(user, invocation)
    reason = _required(reason, code="reason_required", what="a reason")
    with transaction.atomic():
        locked = _lock_unknown(invocation)
        pending = _proposal_for(locked, proposal_seq)
        event_append(
            invocation=locked, kind="resolution_rejected", actor=_actor(user),
            data={"proposal_seq": pending.seq, "action": pending.action, "reason": reason,
                  "proposed_by": pending.proposed_by, "rejected_by": user.username},
        )
    return pending


# --- re-send with the same key -------------------------------------------------------------------

def resolution_resend(*, invocation: Invocation, user, reason: str) -> Invocation:
    """Re-send a ``write_idempotent`` call with the *same* idempotency key (OUTCOME_UNKNOWN → EXECUTING).

    The claim — the conditional transition out of OUTCOME_UNKNOWN — happens here, so of two
    people (or a person and the reconciliation task) exactly one re-sends. The attempt is then
    sent from this request, as the reconciliation task does after a lookup proves absence: the
    execution task only claims OUTCOME_UNKNOWN when told it is a re-send, so a queued message
    would find nothing to do. If this process dies mid-send, the open attempt is recovered by
    the beat task like any other (sent → OUTCOME_UNKNOWN again).
    """
    _require_resolver(user, invocation)
    reason = _required(reason, code="reason_required", what="a reason")
    if invocation.tool_spec.side_effect_class != "write_idempotent":
        raise ApplicationError(
            "re-send is only for write_idempotent tools: this tool does not deduplicate by key, "
            "so a second request could act twice", code="resend_not_allowed",
        )
    with transaction.atomic():
        locked = _lock_unknown(invocation)
        pending = pending_resolution(invocation=locked)
        if pending is not None:
            raise ResolutionPending(f"{pending.proposed_by} proposed “{pending.label}”: confirm or reject it first")
        now = timezone.now()
        if locked.cancel_requested_at:
            raise ApplicationError("a cancel was requested for this call: resolve it by lookup or evidence instead",
                                   code="resend_cancelled")
        if locked.deadline and locked.deadline - now < timedelta(seconds=attempt_timeout(locked)) + RESEND_DEADLINE_MARGIN:
            raise ApplicationError("the call's deadline has passed (or is too close): resolve it by lookup or evidence instead",
                                   code="resend_deadline")
        event_append(invocation=locked, kind="support_resend", actor=_actor(user),
                     data={"reason": reason, "idempotency_key": locked.idempotency_key, "by": user.username})
        Invocation.objects.filter(pk=locked.pk, state=State.OUTCOME_UNKNOWN).update(next_attempt_at=now)
        claimed = execution_claim(invocation_id=locked.pk, resend=True)
        if claimed is None:
            raise _already_resolved(locked)
    execution_run(invocation=claimed[0], attempt=claimed[1])
    invocation.refresh_from_db()
    return invocation
