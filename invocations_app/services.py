"""Writes for runs, model calls, proposals and invocations.

Every state change goes through ``invocation_transition``: check the edge against the table,
then — in one transaction — a conditional ``UPDATE … WHERE id = ? AND state = src`` that also
bumps ``event_seq``, and the event insert carrying that seq. Zero rows changed means another
writer moved the invocation first: ``TransitionConflict``, never an overwrite. A database
trigger generated from the same table refuses any other edge, whoever writes.
"""
from __future__ import annotations

import functools
import json
import logging
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.db.models import Model
from django.utils import timezone

from specs_app.models import Subject, ToolSpec
from specs_app.selectors import tool_view, toolspec_renderable, toolspecs_visible_to_subject
from toolops import otel
from toolops.db_batch import execute_one, insert_returning_keys, insert_rows, set_clause
from toolops.errors import ApplicationError, BudgetExhausted, Conflict, UnknownTool
from toolops.runtime.admission import Step, admit
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.parser import ParserLimits, parser_record
from toolops.runtime.rendering import FORMATS, render_tool
from toolops.runtime.states import CANCELLABLE, TERMINAL, State, TransitionNotAllowed, is_allowed
from toolops.runtime.tracecontext import TraceContext, new_span_id, new_trace_id

from .budgets import budget_take
from .models import Confirmation, Event, IdempotencyRecord, Invocation, ModelCall, ModelCallTool, Proposal, Run

logger = logging.getLogger(__name__)


class TransitionConflict(Conflict):
    code = "transition_conflict"


def parser_limits() -> ParserLimits:
    return ParserLimits(max_bytes=settings.TOOLOPS_PARSER_MAX_BYTES, max_depth=settings.TOOLOPS_PARSER_MAX_DEPTH)


# --- transitions and events -------------------------------------------------------------

def invocation_transition(
    *,
    invocation: Invocation,
    src: str,
    dst: str,
    kind: str,
    data: dict | None = None,
    actor: str = "system",
    fields: dict[str, Any] | None = None,
    span_id: str | None = None,
    then: Sequence[dict] = (),
    rows: Sequence[Sequence[Model]] = (),
    statements: Sequence[tuple[str, list]] = (),
) -> Event:
    """Move ``invocation`` from ``src`` to ``dst`` and append its event, atomically.

    ``fields`` are further columns written by the same UPDATE (so they change only if the
    state does). ``then`` are events that follow at ``dst`` (dicts with ``kind``, ``data`` and
    optionally ``span_id``): the same UPDATE reserves their seqs and one INSERT writes them with
    the transition's. ``rows`` (groups of unsaved instances) and ``statements`` (``(sql,
    params)`` needing no answer) are written only if the transition happens, in the events'
    round trip (``toolops.db_batch``; event keys are not read back). Raises
    ``TransitionNotAllowed`` for an edge outside SPEC §2 and ``TransitionConflict`` when the
    invocation is no longer in ``src``.
    """
    if not is_allowed(src, dst):
        raise TransitionNotAllowed(src, dst)
    fields = dict(fields or {})
    fields["state"] = dst
    fields["updated_at"] = timezone.now()
    # No savepoint: the UPDATE and the events commit with the caller's transaction (or alone).
    # A lost race writes nothing, so the conflict is raised *after* the block and leaves the
    # caller's transaction usable; savepoints here cost two round trips per transition.
    with transaction.atomic(savepoint=False):
        row = _update_returning_seq(invocation.pk, fields, src=src, by=1 + len(then))
        if row is not None:
            first = row[0] - len(then)
            events = [Event(
                invocation_id=invocation.pk, seq=first, from_state=src, to_state=dst, kind=kind, data=data or {},
                actor=actor, trace_id=invocation.trace_id, span_id=span_id or invocation.span_id,
            )] + [Event(
                invocation_id=invocation.pk, seq=first + n, from_state=dst, to_state=dst, kind=extra["kind"],
                data=extra.get("data") or {}, actor=actor, trace_id=invocation.trace_id,
                span_id=extra.get("span_id") or invocation.span_id,
            ) for n, extra in enumerate(then, start=1)]
            insert_rows(events, *rows, then=statements)
    if row is None:
        raise TransitionConflict(f"invocation {invocation.pk} is no longer {src}", extra={"expected_state": src})
    for name, value in fields.items():
        setattr(invocation, name, value)
    invocation.event_seq = row[0]
    return events[0]


def _update_returning_seq(pk, fields: dict[str, Any], *, src: str | None = None, by: int = 1) -> tuple[int, str] | None:
    """``UPDATE … SET …, event_seq = event_seq + by WHERE id = pk [AND state = src] RETURNING event_seq, state``.

    Raw SQL because the ORM's ``update()`` cannot return the bumped counter, and reading it
    back would cost a second round trip on the hottest path. Values are prepared by each
    field so JSON, UUID and datetime columns are written exactly as the ORM would.
    """
    meta = Invocation._meta
    conn = connections[DEFAULT_DB_ALIAS]  # the wrapper itself: each access through the proxy costs µs
    quote = conn.ops.quote_name
    assignments, params = set_clause(Invocation, fields, conn)
    seq_col = quote("event_seq")
    assignments.append(f"{seq_col} = {seq_col} + {int(by)}")
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {quote(meta.pk.column)} = %s"
        + (f" AND {quote('state')} = %s" if src is not None else "")
        + f" RETURNING {seq_col}, {quote('state')}"
    )
    params.append(meta.pk.get_db_prep_value(pk, conn))
    if src is not None:
        params.append(src)
    rows = execute_one(sql, params)
    return (rows[0][0], rows[0][1]) if rows else None


def event_append(*, invocation: Invocation, kind: str, data: dict | None = None, actor: str = "system", span_id: str | None = None) -> Event:
    """Append a non-transition event (a decision, an attempt detail) with the next seq.

    The seq bump is the row lock: one UPDATE … RETURNING instead of SELECT … FOR UPDATE + UPDATE.
    """
    with transaction.atomic(savepoint=False):  # nothing to undo on its own: no savepoint round trips
        row = _update_returning_seq(invocation.pk, {})
        if row is None:
            raise Invocation.DoesNotExist(f"invocation {invocation.pk} does not exist")
        seq, state = row
        event = Event(
            invocation_id=invocation.pk, seq=seq, from_state=state, to_state=state, kind=kind,
            data=data or {}, actor=actor, trace_id=invocation.trace_id, span_id=span_id or invocation.span_id,
        )
        insert_returning_keys([event])
    return event


# --- runs and model calls -----------------------------------------------------------------

def run_create(*, subject: Subject, budgets: dict, timezone_name: str, locale: str, metadata: dict, trace: TraceContext | None) -> Run:
    """Open a Run for ``subject``; its trace continues the caller's or starts a new one."""
    try:
        ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ApplicationError(f"unknown IANA timezone {timezone_name!r}", code="invalid_timezone") from None
    return Run.objects.create(
        tenant_id=subject.tenant_id, subject=subject, budgets=budgets, timezone=timezone_name, locale=locale,
        metadata=metadata, trace_id=trace.trace_id if trace else new_trace_id(),
    )


def run_finish(*, run: Run, reason: str = "finished by the agent runtime") -> Run:
    """End an active run (idempotent for an already-ended run)."""
    Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE).update(
        status=Run.Status.FINISHED, ended_at=timezone.now(), end_reason=reason
    )
    run.refresh_from_db()
    return run


def _require_active(run: Run) -> None:
    if run.status != Run.Status.ACTIVE:
        raise Conflict(f"run {run.pk} has ended ({run.status}: {run.end_reason})", code="run_ended")


def model_call_create(*, run: Run, tool_refs: list[str] | None, fmt: str, context: list[str]) -> ModelCall:
    """Record one model request with the exact tool versions it is shown, rendered in ``fmt``.

    Without ``tool_refs`` the model sees the newest published version of every tool visible
    to the run's subject. An unknown or unpublished reference is refused (``unknown_tool``).
    """
    if fmt not in FORMATS:
        raise ApplicationError(f"format must be one of {', '.join(FORMATS)}", code="invalid_format")
    _require_active(run)
    specs = _resolve_tool_refs(run.subject, tool_refs)
    budget_take(run=run, key="model_calls")
    with transaction.atomic():
        call = ModelCall.objects.create(run=run, format=fmt, context=[str(c) for c in context], span_id=new_span_id())
        ModelCallTool.objects.bulk_create(
            ModelCallTool(
                model_call=call, tool_spec=spec, model_facing_name=spec.model_facing_name, tool_ref=spec.ref,
                rendered=render_tool(toolspec_renderable(spec), fmt),
            )
            for spec in specs
        )
    return call


def _resolve_tool_refs(subject: Subject, tool_refs: list[str] | None) -> list[ToolSpec]:
    visible = toolspecs_visible_to_subject(subject=subject)
    if tool_refs is None:
        newest: dict[str, ToolSpec] = {}
        for spec in visible:
            if spec.name not in newest or spec.version > newest[spec.name].version:
                newest[spec.name] = spec
        return sorted(newest.values(), key=lambda s: s.name)
    by_ref = {spec.ref: spec for spec in visible}
    missing = [ref for ref in tool_refs if ref not in by_ref]
    if missing:
        raise UnknownTool(f"not published or not visible: {', '.join(missing)}", extra={"unknown": missing})
    if len(set(tool_refs)) != len(tool_refs):
        raise ApplicationError("a tool is listed twice", code="duplicate_tool")
    return [by_ref[ref] for ref in tool_refs]


# --- proposals --------------------------------------------------------------------------

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
    _require_active(run)
    if (run.budgets or {}).get("tool_calls") is not None:
        # Counted budget: a re-post must not spend a unit, so look for it first.
        existing = _replayed(model_call, proposal_id, name, arguments_bytes)
        if existing is not None:
            return existing, False
        _take_tool_call(run, model_call, proposal_id, name, arguments_bytes)
    now = now or timezone.now()
    spec, visible = _lookup_visible(model_call.pk, name)
    context = NormalizationContext(clock=now.astimezone(ZoneInfo(run.timezone)), timezone=run.timezone, locale=run.locale)
    limits = parser_limits()
    plan = admit(
        arguments_bytes=arguments_bytes, tool=tool_view(spec) if spec else None, visible_names=visible,
        tenant=subject.tenant.slug, context=context, limits=limits,
    )
    invocation_id = uuid.uuid4()
    auth = None
    try:
        auth = _authorize_admitted(plan, spec, subject, run, invocation_id, now, model_call, proposal_id, name, arguments_bytes)
        invocation = record_admission(
            model_call=model_call, run=run, subject=subject, proposal_id=proposal_id, name=name,
            arguments_bytes=arguments_bytes, spec=spec, plan=plan, auth=auth, context=context, limits=limits,
            idempotency_key=idempotency_key, trace=trace, invocation_id=invocation_id, origin=origin,
        )
    except (IntegrityError, IdempotencyHit) as exc:
        # A unique constraint: a re-post of this proposal, or an idempotency key already in use.
        if auth is not None:
            auth.release_reservations()
        existing = _replayed(model_call, proposal_id, name, arguments_bytes)
        if existing is not None:
            return existing, False
        record = exc.record if isinstance(exc, IdempotencyHit) else _idempotency_record(subject, spec, idempotency_key, run, proposal_id)
        if record is None:
            raise
        return _idempotent_replay(record, model_call=model_call, proposal_id=proposal_id, name=name,
                                  arguments_bytes=arguments_bytes, digest=plan.digest, spec=spec, now=now), False
    except _Replayed as replay:
        return replay.invocation, False
    return invocation, True


def _take_tool_call(run, model_call, proposal_id, name, arguments_bytes) -> None:
    """Spend one ``tool_calls`` unit, or record the refused proposal and raise ``BudgetExhausted``."""
    try:
        budget_take(run=run, key="tool_calls")
    except BudgetExhausted:
        try:
            with transaction.atomic():
                Proposal.objects.create(
                    model_call=model_call, proposal_id=proposal_id, name=name, arguments_bytes=arguments_bytes,
                    parser=parser_record(parser_limits()), span_id=new_span_id(), refusal="budget_exhausted",
                )
        except IntegrityError:
            pass  # already recorded by a concurrent post of the same proposal
        raise


def _authorize_admitted(plan, spec, subject, run, invocation_id, now, model_call, proposal_id, name, arguments_bytes):
    if plan.final_state != State.VALIDATED:
        return None
    from .authorization import authorization_decide  # authorization builds on this module

    return authorization_decide(
        spec=spec, tenant=subject.tenant, subject=subject, run_id=run.pk, invocation_id=invocation_id,
        normalized_arguments=plan.normalized_arguments, now=now,
        # A re-post must not spend a unit of a counting limit: check for it before reserving.
        before_reserve=lambda: _raise_if_replayed(model_call, proposal_id, name, arguments_bytes),
    )


class _Replayed(Exception):
    def __init__(self, invocation: Invocation):
        self.invocation = invocation


def _raise_if_replayed(model_call, proposal_id, name, arguments_bytes) -> None:
    existing = _replayed(model_call, proposal_id, name, arguments_bytes)
    if existing is not None:
        raise _Replayed(existing)


def _replayed(model_call: ModelCall, proposal_id: str, name: str, arguments_bytes: bytes) -> Invocation | None:
    prior = (
        Proposal.objects.filter(model_call=model_call, proposal_id=proposal_id)
        .select_related("replay_of").order_by().first()
    )
    if prior is None:
        return None
    invocation = Invocation.objects.filter(proposal=prior).first() or prior.replay_of
    if bytes(prior.arguments_bytes) != arguments_bytes or prior.name != name:
        raise Conflict(
            f"proposal {proposal_id!r} was already posted to this model call with other content",
            code="proposal_conflict",
            extra={"invocation_id": str(invocation.pk) if invocation else None},
        )
    return invocation


@functools.lru_cache(maxsize=2048)
def _visible_set(model_call_id) -> tuple[dict[str, ToolSpec], list[str]]:
    """A model call's visible set by model-facing name and by ``name@version``.

    Cached per process: a model call's visible set and published ToolSpecs never change, so
    the cache can only save queries, never change an answer.
    """
    by_name: dict[str, ToolSpec] = {}
    refs = []
    for row in ModelCallTool.objects.select_related("tool_spec").filter(model_call_id=model_call_id):
        by_name[row.model_facing_name] = by_name[row.tool_ref] = row.tool_spec
        refs.append(row.tool_ref)
    return by_name, sorted(refs)


def _lookup_visible(model_call_id, name: str) -> tuple[ToolSpec | None, list[str]]:
    """Exact lookup by model-facing name or ``name@version``; no near-name matching."""
    by_name, refs = _visible_set(model_call_id)
    return by_name.get(name), refs


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
    if confirmation_id:
        rows.append([confirmation_row(invocation=invocation, expires_at=auth.confirmation_expires_at, confirmation_id=confirmation_id)])
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
    return invocation


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
                       code="idempotency_in_progress", extra={**extra, "state": original.state})
    return original


def enqueue_when_committed(invocation: Invocation) -> None:
    """Hand a ready invocation (PREPARED, or AUTHORIZED read-only) to the workers after commit."""
    from .tasks import enqueue_execution  # tasks build on services

    enqueue_execution(invocation.pk, traceparent=f"00-{invocation.trace_id}-{invocation.span_id}-01")


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


def render_arguments(arguments) -> str:
    """What the approver reads: one ``field: value`` line per top-level argument."""
    if not isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True)
    lines = []
    for key in sorted(arguments):
        value = arguments[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
        lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def confirmation_row_create(*, invocation: Invocation, expires_at, confirmation_id=None) -> Confirmation:
    """Save the pending confirmation of an invocation (caller's transaction)."""
    confirmation = confirmation_row(invocation=invocation, expires_at=expires_at, confirmation_id=confirmation_id)
    confirmation.save(force_insert=True)
    return confirmation


def confirmation_row(*, invocation: Invocation, expires_at, confirmation_id=None) -> Confirmation:
    """The (unsaved) pending confirmation of an invocation, bound to its digest."""
    return Confirmation(
        id=confirmation_id or uuid.uuid4(), invocation=invocation, tool_spec_id=invocation.tool_spec_id, tenant_id=invocation.tenant_id,
        subject_id=invocation.subject_id, run_id=invocation.run_id, digest=invocation.digest,
        arguments=invocation.normalized_arguments, rendering=render_arguments(invocation.normalized_arguments),
        expires_at=expires_at,
    )


def invocation_cancel(*, invocation: Invocation, actor: str, reason: str = "") -> Invocation:
    """Cancel (SPEC §7). Before the commit boundary: CANCELLED_BEFORE_COMMIT, nothing is sent.
    While an attempt is in flight: recorded, honoured only if the outcome proves nothing was
    committed. After the boundary (or when it may have been crossed): ``Conflict`` — the effect
    stands and only later steps stop."""
    invocation.refresh_from_db()
    if invocation.state == State.EXECUTING:
        updated = Invocation.objects.filter(pk=invocation.pk, state=State.EXECUTING, cancel_requested_at__isnull=True).update(
            cancel_requested_at=timezone.now()
        )
        if updated:
            event_append(invocation=invocation, kind="cancel_requested", data={"reason": reason}, actor=actor)
        invocation.refresh_from_db()
        return invocation
    if State(invocation.state) not in CANCELLABLE:
        raise Conflict(
            f"invocation is {invocation.state}; it can no longer be cancelled (the effect, if any, stands)",
            code="not_cancellable", extra={"state": invocation.state},
        )
    try:
        with transaction.atomic():
            invocation_transition(
                invocation=invocation, src=invocation.state, dst=State.CANCELLED_BEFORE_COMMIT, kind="cancelled",
                data={"reason": reason}, actor=actor,
                fields={"error_code": "cancelled", "error_message": reason or "cancelled before the commit boundary"},
            )
            # A confirmation still waiting for a human has nothing left to decide.
            Confirmation.objects.filter(invocation=invocation, state=Confirmation.Status.PENDING).update(
                state=Confirmation.Status.CANCELLED, decided_at=timezone.now(), reason=reason or "call cancelled"
            )
    except TransitionConflict:
        invocation.refresh_from_db()
        raise Conflict(
            f"invocation moved to {invocation.state} meanwhile", code="not_cancellable", extra={"state": invocation.state}
        ) from None
    return invocation
