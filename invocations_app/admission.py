"""Admission of a proposal (SPEC §3–§5, §8): one path from raw bytes to a recorded invocation.

``proposal_admit`` answers "already posted?" once, before any counter is spent; then the pure
admission plan (parse, validate, normalize, digest), the authorization decision, and
``record_admission`` writes proposal, invocation and its event chain in one round trip. A
concurrent re-post of the same proposal loses on the unique constraint and is answered as a
replay; an idempotency key already bound to another call is answered per SPEC §8.
"""
from __future__ import annotations

import functools
import json
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from specs_app.models import Subject, ToolSpec
from specs_app.selectors import tool_view
from toolops import otel
from toolops.db_batch import insert_rows, select_rows
from toolops.errors import ApplicationError, BudgetExhausted, Conflict
from toolops.runtime.admission import Step, admit
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.parser import ParserLimits, parser_record
from toolops.runtime.rendering import null_as_absent_of
from toolops.runtime.states import TERMINAL, State, TransitionNotAllowed, is_allowed
from toolops.runtime.tracecontext import TraceContext, new_span_id

from .authorization import authorization_decide
from .budgets import budget_give_back, budget_take, invocation_deadline, run_refusal
from .confirmations import confirmation_row
from .dispatch import enqueue_when_committed
from .models import Confirmation, Event, IdempotencyRecord, Invocation, ModelCall, ModelCallTool, Proposal, Run
from .runs import run_require_active
from .tool_messages import ending_message_rows
from .webhooks import webhook_confirmation_requested, webhook_invocation_settled


def parser_limits() -> ParserLimits:
    return ParserLimits(max_bytes=settings.TOOLOPS_PARSER_MAX_BYTES, max_depth=settings.TOOLOPS_PARSER_MAX_DEPTH)


def proposal_admit(
    *,
    model_call: ModelCall,
    subject: Subject,
    proposal_id: str,
    name: str,
    arguments_bytes: bytes,
    idempotency_key: str | None = None,
    trace: TraceContext | None = None,
    now: datetime | None = None,
    origin: dict | None = None,
) -> tuple[Invocation, bool]:
    """Record a proposal with its raw bytes and carry it through admission and authorization.

    Returns ``(invocation, created)``. Re-posting the same ``(model call, proposal_id)`` with
    the same name and bytes returns the existing invocation (``created=False``); with other
    bytes it is a ``Conflict`` (``proposal_conflict``). Rejections are states, not errors.
    ``origin`` says where the proposal came in beyond the REST API (e.g. the MCP session and
    JSON-RPC request id); it is stored on the proposal.
    """
    run = model_call.run
    # "Already posted?" is answered once, before any budget unit or grant limit is spent (and
    # before the run's state: a re-post after the run ended still gets its answer). A
    # concurrent re-post that slips past it loses on the unique (model call, proposal id)
    # constraint below, gives its units back, and is answered from the winner's row.
    existing = _replayed(model_call, proposal_id, name, arguments_bytes)
    if existing is not None:
        return existing, False
    if run.status != Run.Status.ACTIVE:
        _refuse(model_call, proposal_id, name, arguments_bytes, _ended_run_error(run))
    counted_budget = (run.budgets or {}).get("tool_calls") is not None
    if counted_budget:
        try:
            budget_take(run=run, key="tool_calls")
        except BudgetExhausted as exc:
            _refuse(model_call, proposal_id, name, arguments_bytes, exc)
    now = now or timezone.now()
    spec, visible, null_as_absent = _lookup_visible(model_call.pk, name)
    if spec is not None and spec.tenant_id not in (None, subject.tenant_id):
        # Another tenant's tool (only reachable if ownership changed after the listing):
        # answered exactly like a name the model was never shown.
        spec, null_as_absent = None, ()
    context = NormalizationContext(clock=now.astimezone(ZoneInfo(run.timezone)), timezone=run.timezone, locale=run.locale)
    limits = parser_limits()
    plan = admit(
        arguments_bytes=arguments_bytes, tool=tool_view(spec, null_as_absent=null_as_absent) if spec else None,
        visible_names=visible,
        tenant=subject.tenant.slug, context=context, limits=limits,
    )
    invocation_id = uuid.uuid4()
    auth = None
    if plan.final_state == State.VALIDATED:
        auth = authorization_decide(
            spec=spec, tenant=subject.tenant, subject=subject, run_id=run.pk, invocation_id=invocation_id,
            normalized_arguments=plan.normalized_arguments, now=now,
        )
    try:
        invocation = record_admission(
            model_call=model_call, run=run, subject=subject, proposal_id=proposal_id, name=name,
            arguments_bytes=arguments_bytes, spec=spec, plan=plan, auth=auth, context=context, limits=limits,
            idempotency_key=idempotency_key, trace=trace, invocation_id=invocation_id, origin=origin,
        )
    except (IntegrityError, IdempotencyHit) as exc:
        # Nothing of this call was written: give back what it took.
        if auth is not None:
            auth.release_reservations()
        if counted_budget:
            budget_give_back(run=run, key="tool_calls")
        if isinstance(exc, IdempotencyHit):
            record = exc.record
        else:
            # A unique constraint: the same proposal posted concurrently (answer from the
            # winner), or the same idempotency key claimed concurrently by another proposal.
            existing = _replayed(model_call, proposal_id, name, arguments_bytes)
            if existing is not None:
                return existing, False
            record = _idempotency_record(subject, spec, idempotency_key, run, proposal_id)
            if record is None:
                raise
        return _idempotent_replay(record, model_call=model_call, proposal_id=proposal_id, name=name,
                                  arguments_bytes=arguments_bytes, digest=plan.digest, spec=spec, now=now), False
    return invocation, True


def _ended_run_error(run: Run) -> ApplicationError:
    """Why a run that has ended takes no new proposal: a budget ended it, or its agent did."""
    if run.status == Run.Status.EXHAUSTED:
        return run_refusal(run)
    try:
        run_require_active(run)
    except Conflict as exc:
        return exc
    raise AssertionError("an active run has not ended")


def _refuse(model_call: ModelCall, proposal_id: str, name: str, arguments_bytes: bytes, error: ApplicationError):
    """Record the proposal as refused (no invocation, nothing spent) and raise ``error`` naming
    the recorded refusal, so a client can answer the model's tool call (``refusal_id``)."""
    try:
        with transaction.atomic():
            refused = Proposal.objects.create(
                model_call=model_call, proposal_id=proposal_id, name=name, arguments_bytes=arguments_bytes,
                parser=parser_record(parser_limits()), span_id=new_span_id(), refusal=error.code,
            )
    except IntegrityError:  # a concurrent post of the same proposal recorded it (or was admitted)
        existing = _replayed(model_call, proposal_id, name, arguments_bytes)
        if existing is not None:
            raise Conflict("this proposal was admitted by a concurrent post", code="proposal_conflict",
                           extra={"invocation_id": str(existing.pk)}) from None
        refused = Proposal.objects.get(model_call=model_call, proposal_id=proposal_id)
    error.extra = {**error.extra, **refusal_fields(refused)}
    raise error


def refusal_fields(proposal: Proposal) -> dict:
    """What an error refusing a recorded proposal carries: the refusal's id and whose tool call it was."""
    return {"refusal_id": str(proposal.pk), "proposal_id": proposal.proposal_id,
            "model_call_id": str(proposal.model_call_id), "name": proposal.name}


def _replayed(model_call: ModelCall, proposal_id: str, name: str, arguments_bytes: bytes) -> Invocation | None:
    """The invocation of an earlier post of this proposal, None if there was none, or
    ``Conflict`` when it was posted with other content. One indexed read of the unique
    (model call, proposal id) pair — a lean statement, as every proposal pays for it."""
    rows = select_rows(
        Proposal, ("id", "name", "arguments_bytes", "replay_of", "refusal"), where="model_call_id = %s AND proposal_id = %s",
        params=[("model_call", model_call.pk), ("proposal_id", proposal_id)],
    )
    if not rows:
        return None
    prior_id, prior_name, prior_bytes, replay_of_id, refusal = rows[0]
    invocation = Invocation.objects.filter(proposal_id=prior_id).first() or (
        Invocation.objects.filter(pk=replay_of_id).first() if replay_of_id else None
    )
    if bytes(prior_bytes) != arguments_bytes or prior_name != name:
        raise Conflict(
            f"proposal {proposal_id!r} was already posted to this model call with other content",
            code="proposal_conflict",
            extra={"invocation_id": str(invocation.pk) if invocation else None},
        )
    if invocation is None and refusal:
        raise _recorded_refusal(Proposal.objects.select_related("model_call__run").get(pk=prior_id))
    return invocation


def _recorded_refusal(proposal: Proposal) -> ApplicationError:
    """The same answer as when the proposal was refused (a re-post is told again, never admitted)."""
    run = proposal.model_call.run
    if proposal.refusal == BudgetExhausted.code:
        error: ApplicationError = run_refusal(run) if run.status != Run.Status.ACTIVE else BudgetExhausted(
            "this proposal was refused: a run budget was used up")
    else:
        error = Conflict(f"this proposal was refused ({proposal.refusal})", code=proposal.refusal)
    error.extra = {**error.extra, **refusal_fields(proposal)}
    error.replayed = True
    return error


@functools.lru_cache(maxsize=2048)
def _visible_set(model_call_id) -> tuple[dict[str, ToolSpec], list[str], dict[str, tuple[str, ...]]]:
    """A model call's visible set by model-facing name and by ``name@version``, and per
    ``name@version`` the null-means-absent paths of a strict OpenAI rendering (if it was one).

    Cached per process: a model call's visible set, its renderings and published ToolSpecs
    never change, so the cache can only save queries, never change an answer.
    """
    by_name: dict[str, ToolSpec] = {}
    refs = []
    null_paths: dict[str, tuple[str, ...]] = {}
    for row in ModelCallTool.objects.select_related("tool_spec").filter(model_call_id=model_call_id):
        by_name[row.model_facing_name] = by_name[row.tool_ref] = row.tool_spec
        refs.append(row.tool_ref)
        null_paths[row.tool_ref] = null_as_absent_of(row.rendered, row.tool_spec.input_schema)
    return by_name, sorted(refs), null_paths


def _lookup_visible(model_call_id, name: str) -> tuple[ToolSpec | None, list[str], tuple[str, ...]]:
    """Exact lookup by model-facing name or ``name@version``; no near-name matching."""
    by_name, refs, null_paths = _visible_set(model_call_id)
    spec = by_name.get(name)
    return spec, refs, null_paths.get(spec.ref, ()) if spec else ()


def record_admission(
    *, model_call, run, subject, proposal_id, name, arguments_bytes, spec, plan, auth, context, limits,
    idempotency_key, trace, invocation_id=None, edited_from: Invocation | None = None, origin: dict | None = None,
) -> Invocation:
    """Write proposal, invocation and the event chain of its admission in one transaction.

    An invocation is born in the state its admission reached: every step of the chain
    (PROPOSED → PARSED → VALIDATED → AUTHORIZED …) is checked against the transition table and
    written as an event with its own seq. Nobody can observe the row before this commits, so
    this equals applying the transitions one by one — in one round trip instead of one per
    row. From here on every change goes through ``invocation_transition``.
    """
    trace_id = trace.trace_id if trace else run.trace_id
    proposal_span = new_span_id()
    confirmation_id = uuid.uuid4() if auth and auth.needs_human else None
    steps = [Step(State.PROPOSED, "proposed", {"name": name, "bytes": len(arguments_bytes), "proposal_span_id": proposal_span})]
    steps += plan.steps + (
        auth.steps(confirmation_id=str(confirmation_id) if confirmation_id else None, digest=plan.digest) if auth else []
    )
    _check_chain(steps)
    fields = _admission_fields(plan, auth)
    if auth and not auth.denied and not auth.needs_human:
        # Released to execute now; a call waiting for a person gets its deadline at approval.
        fields["deadline"] = invocation_deadline(spec=spec, run=run, released_at=timezone.now())
    proposal = Proposal(
        model_call=model_call, proposal_id=proposal_id, name=name, arguments_bytes=arguments_bytes,
        parsed_json=json.dumps(plan.parsed, ensure_ascii=False) if plan.steps[0].to_state == State.PARSED else "",
        parser=parser_record(limits), span_id=proposal_span, origin=origin or {},
    )
    invocation = Invocation(
        id=invocation_id or uuid.uuid4(), proposal=proposal, run=run, model_call=model_call,
        tenant_id=subject.tenant_id, subject=subject, tool_spec=spec, tool_name=spec.name if spec else "",
        tool_version=spec.version if spec else None, state=steps[-1].to_state, event_seq=len(steps),
        normalization_context=context.to_record(), idempotency_key=idempotency_key or f"{run.pk}:{proposal_id}",
        trace_id=trace_id, span_id=new_span_id(), edited_from=edited_from, **fields,
    )
    rows = [[proposal], [invocation], _chain_events(invocation, steps, proposal_span)]
    if invocation.state in TERMINAL:  # rejected: its tool messages are written with it, never by a read
        rows += ending_message_rows(invocation, error_code=invocation.error_code, error_message=invocation.error_message)
    confirmation = None
    if confirmation_id:
        confirmation = confirmation_row(invocation=invocation, expires_at=auth.confirmation_expires_at,
                                        confirmation_id=confirmation_id, **auth.confirmation_fields)
        rows.append([confirmation])
    claims_key = bool(spec and spec.side_effect_class != "read_only" and auth and not auth.denied)
    # One round trip for all rows (toolops.db_batch), atomic on its own. A write also claims its
    # idempotency key, which needs a read, so a transaction spans both; inside a caller's
    # transaction a savepoint keeps a lost race (IntegrityError) from breaking it.
    with transaction.atomic() if claims_key or connection.in_atomic_block else nullcontext():
        insert_rows(*rows)
        if claims_key:
            _idempotency_claim(invocation, spec, timezone.now())
        if auth and not auth.denied and not auth.needs_human:
            enqueue_when_committed(invocation)
        if otel.enabled():
            transaction.on_commit(lambda: _export_admission_span(invocation, proposal, trace))
        if confirmation is not None:
            webhook_confirmation_requested(confirmation)
        elif invocation.state in TERMINAL:
            webhook_invocation_settled(invocation)
    _related_as_written(invocation, confirmation)
    return invocation


def _related_as_written(invocation: Invocation, confirmation: Confirmation | None) -> None:
    """A new invocation's attempts and confirmations are what this admission wrote (none, or its
    one pending confirmation with no approvals): remember them on the instances as a prefetch
    would, so the answer is the admission's own snapshot and costs no further reads (the API's
    prefetch then skips them). Below Django's public API: ``_prefetched_objects_cache``, filled
    the way ``prefetch_related_objects`` fills it (docs/architecture.md)."""
    invocation._prefetched_objects_cache = {
        "attempts": _known(invocation.attempts, []),
        "confirmations": _known(invocation.confirmations, [confirmation] if confirmation else []),
    }
    if confirmation is not None:
        confirmation.decided_by = None
        confirmation._prefetched_objects_cache = {"approvals": _known(confirmation.approvals, [])}


def _known(manager, rows: list):
    queryset = manager.get_queryset()
    queryset._result_cache, queryset._prefetch_done = rows, True
    return queryset


def _export_admission_span(invocation: Invocation, proposal: Proposal, trace: TraceContext | None) -> None:
    otel.export_span(
        name="toolops.proposal", trace_id=invocation.trace_id, span_id=proposal.span_id,
        parent_span_id=trace.parent_span_id if trace else None, start=proposal.received_at, end=timezone.now(),
        error=invocation.state.endswith("REJECTED"),
        attributes={"toolops.name": proposal.name, "toolops.state": invocation.state, "toolops.invocation_id": str(invocation.pk)},
    )


# --- idempotency keys (SPEC §8) ---------------------------------------------------------------

class IdempotencyHit(Exception):
    """The key is already bound to an invocation; the admission transaction is rolled back."""

    def __init__(self, record: IdempotencyRecord):
        self.record = record


def _idempotency_claim(invocation: Invocation, spec: ToolSpec, now: datetime) -> None:
    """Bind (tenant, name@version, key) to this invocation, or raise ``IdempotencyHit``.

    An expired record is taken over only when the ToolSpec says ``new_call``; under
    ``reject`` the reuse is refused — never a guess.
    """
    expires = now + timedelta(seconds=spec.idempotency_retention_seconds)
    scope = {"tenant_id": invocation.tenant_id, "tool_ref": spec.ref, "key": invocation.idempotency_key}
    record = IdempotencyRecord.objects.select_for_update().filter(**scope).first()
    if record is None:
        IdempotencyRecord.objects.create(**scope, digest=invocation.digest, invocation=invocation, created_at=now, expires_at=expires)
        return
    if record.expires_at <= now and spec.expired_key_policy == "new_call":
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            digest=invocation.digest, invocation=invocation, status=IdempotencyRecord.Status.IN_PROGRESS,
            created_at=now, expires_at=expires,
        )
        return
    raise IdempotencyHit(record)


def _idempotency_record(subject, spec, key, run, proposal_id) -> IdempotencyRecord | None:
    if spec is None:
        return None
    return IdempotencyRecord.objects.filter(
        tenant_id=subject.tenant_id, tool_ref=spec.ref, key=key or f"{run.pk}:{proposal_id}"
    ).select_related("invocation").first()


def _idempotent_replay(record, *, model_call, proposal_id, name, arguments_bytes, digest, spec, now) -> Invocation:
    """Record the proposal as a replay of the key's invocation, then answer per SPEC §8."""
    original = record.invocation
    try:
        with transaction.atomic():
            Proposal.objects.create(
                model_call=model_call, proposal_id=proposal_id, name=name, arguments_bytes=arguments_bytes,
                parser=parser_record(parser_limits()), span_id=new_span_id(), replay_of=original,
            )
    except IntegrityError:
        pass  # the same proposal posted concurrently: it is recorded once
    extra = {"invocation_id": str(original.pk), "state": original.state}
    if record.expires_at <= now:
        raise ApplicationError("this idempotency key has expired and the tool's policy is to reject it",
                               code="idempotency_key_expired", status=422, extra=extra)
    if record.digest != digest:
        raise ApplicationError("this idempotency key was used with different arguments",
                               code="idempotency_key_reused", status=422, extra=extra)
    original.refresh_from_db()
    if original.state not in TERMINAL:
        raise Conflict("the call with this idempotency key is still in progress",
                       code="idempotency_key_in_use", extra={**extra, "state": original.state})
    return original


def _check_chain(steps: list[Step]) -> None:
    for before, after in zip(steps, steps[1:]):
        if before.to_state != after.to_state and not is_allowed(before.to_state, after.to_state):
            raise TransitionNotAllowed(before.to_state, after.to_state)


def _admission_fields(plan, auth) -> dict[str, Any]:
    fields: dict[str, Any] = {"validation": plan.validation, "normalization_trace": plan.normalization_trace}
    if plan.final_state == State.VALIDATED:
        fields.update(normalized_arguments=plan.normalized_arguments, digest=plan.digest)
    if plan.error:
        fields.update(error_code=plan.error["code"], error_message=plan.error["message"], error_detail=plan.error["detail"])
    if auth:
        fields.update(authorization=auth.record, **auth.error_fields())
    return fields


def _chain_events(invocation: Invocation, steps: list[Step], proposal_span: str) -> list[Event]:
    events, state = [], ""
    for seq, step in enumerate(steps, start=1):
        events.append(Event(
            invocation_id=invocation.pk, seq=seq, from_state=state, to_state=step.to_state, kind=step.kind, data=step.data,
            trace_id=invocation.trace_id, span_id=proposal_span if seq == 1 else invocation.span_id,
        ))
        state = step.to_state
    return events
