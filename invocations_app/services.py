"""Writes for runs, model calls, proposals and invocations.

Every state change goes through ``invocation_transition``: check the edge against the table,
then — in one transaction — a conditional ``UPDATE … WHERE id = ? AND state = src`` that also
bumps ``event_seq``, and the event insert carrying that seq. Zero rows changed means another
writer moved the invocation first: ``TransitionConflict``, never an overwrite. A database
trigger generated from the same table refuses any other edge, whoever writes.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from specs_app.models import Subject, ToolSpec
from specs_app.selectors import tool_view, toolspec_renderable, toolspecs_visible_to_subject
from toolops.errors import ApplicationError, Conflict, UnknownTool
from toolops.runtime.admission import admit
from toolops.runtime.normalizers import NormalizationContext
from toolops.runtime.parser import ParserLimits, parser_record
from toolops.runtime.rendering import FORMATS, parse_tool_ref, render_tool
from toolops.runtime.states import State, TransitionNotAllowed, is_allowed
from toolops.runtime.tracecontext import TraceContext, new_span_id, new_trace_id

from .models import Event, Invocation, ModelCall, ModelCallTool, Proposal, Run

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
) -> Event:
    """Move ``invocation`` from ``src`` to ``dst`` and append its event, atomically.

    ``fields`` are further columns written by the same UPDATE (so they change only if the
    state does). Raises ``TransitionNotAllowed`` for an edge outside SPEC §2 and
    ``TransitionConflict`` when the invocation is no longer in ``src``.
    """
    if not is_allowed(src, dst):
        raise TransitionNotAllowed(src, dst)
    fields = dict(fields or {})
    fields["state"] = dst
    fields["updated_at"] = timezone.now()
    with transaction.atomic():
        seq = _conditional_update(invocation.pk, src, fields)
        if seq is None:
            raise TransitionConflict(f"invocation {invocation.pk} is no longer {src}", extra={"expected_state": src})
        event = Event.objects.create(
            invocation_id=invocation.pk,
            seq=seq,
            from_state=src,
            to_state=dst,
            kind=kind,
            data=data or {},
            actor=actor,
            trace_id=invocation.trace_id,
            span_id=span_id or invocation.span_id,
        )
    for name, value in fields.items():
        setattr(invocation, name, value)
    invocation.event_seq = seq
    return event


def _conditional_update(pk, src: str, fields: dict[str, Any]) -> int | None:
    """``UPDATE … SET …, event_seq = event_seq + 1 WHERE id = pk AND state = src RETURNING event_seq``.

    Raw SQL because the ORM's ``update()`` cannot return the bumped counter, and reading it
    back would cost a second round trip on the hottest path. Values are prepared by each
    field so JSON, UUID and datetime columns are written exactly as the ORM would.
    """
    meta = Invocation._meta
    assignments, params = [], []
    for name, value in fields.items():
        field = meta.get_field(name)
        assignments.append(f"{connection.ops.quote_name(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    seq_col = connection.ops.quote_name("event_seq")
    sql = (
        f"UPDATE {connection.ops.quote_name(meta.db_table)} SET {', '.join(assignments)}, {seq_col} = {seq_col} + 1 "
        f"WHERE {connection.ops.quote_name(meta.pk.column)} = %s AND {connection.ops.quote_name('state')} = %s "
        f"RETURNING {seq_col}"
    )
    params += [meta.pk.get_db_prep_value(pk, connection), src]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None


def event_append(*, invocation: Invocation, kind: str, data: dict | None = None, actor: str = "system", span_id: str | None = None) -> Event:
    """Append a non-transition event (a decision, an attempt detail) with the next seq."""
    with transaction.atomic():
        locked = Invocation.objects.select_for_update().only("event_seq", "state").get(pk=invocation.pk)
        seq = locked.event_seq + 1
        Invocation.objects.filter(pk=invocation.pk).update(event_seq=seq)
        return Event.objects.create(
            invocation_id=invocation.pk, seq=seq, from_state=locked.state, to_state=locked.state, kind=kind,
            data=data or {}, actor=actor, trace_id=invocation.trace_id, span_id=span_id or invocation.span_id,
        )


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
    with transaction.atomic():
        call = ModelCall.objects.create(run=run, format=fmt, context=[str(c) for c in context], span_id=new_span_id())
        ModelCallTool.objects.bulk_create(
            ModelCallTool(
                model_call=call, tool_spec=spec, model_facing_name=spec.model_facing_name, tool_ref=spec.ref,
                rendered=render_tool(toolspec_renderable(spec), fmt),
            )
            for spec in specs
        )
        Run.objects.filter(pk=run.pk).update(model_calls_used=F("model_calls_used") + 1)
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
) -> tuple[Invocation, bool]:
    """Record a proposal with its raw bytes and carry it through admission.

    Returns ``(invocation, created)``. Re-posting the same ``(model call, proposal_id)`` with
    the same name and bytes returns the existing invocation (``created=False``); with other
    bytes it is a ``Conflict`` (``proposal_conflict``). Rejections are states, not errors.
    """
    run = model_call.run
    existing = _replayed(model_call, proposal_id, name, arguments_bytes)
    if existing is not None:
        return existing, False
    _require_active(run)
    mct = _lookup_visible(model_call, name)
    context = NormalizationContext(
        clock=(now or timezone.now()).astimezone(ZoneInfo(run.timezone)), timezone=run.timezone, locale=run.locale
    )
    limits = parser_limits()
    plan = admit(
        arguments_bytes=arguments_bytes,
        tool=tool_view(mct.tool_spec) if mct else None,
        visible_names=[t.tool_ref for t in model_call.visible_tools.all()] if mct is None else [],
        tenant=subject.tenant.slug,
        context=context,
        limits=limits,
    )
    try:
        invocation = _record_admission(
            model_call=model_call, run=run, subject=subject, proposal_id=proposal_id, name=name,
            arguments_bytes=arguments_bytes, mct=mct, plan=plan, context=context, limits=limits,
            idempotency_key=idempotency_key, trace=trace,
        )
    except IntegrityError:
        # A concurrent post of the same proposal won the unique (model_call, proposal_id) race.
        existing = _replayed(model_call, proposal_id, name, arguments_bytes)
        if existing is None:
            raise
        return existing, False
    if invocation.state == State.VALIDATED:
        from .authorization import invocation_authorize  # authorization builds on this module

        invocation_authorize(invocation=invocation)
    return invocation, True


def _replayed(model_call: ModelCall, proposal_id: str, name: str, arguments_bytes: bytes) -> Invocation | None:
    prior = Proposal.objects.filter(model_call=model_call, proposal_id=proposal_id).select_related("invocation").first()
    if prior is None:
        return None
    if bytes(prior.arguments_bytes) != arguments_bytes or prior.name != name:
        raise Conflict(
            f"proposal {proposal_id!r} was already posted to this model call with other content",
            code="proposal_conflict",
            extra={"invocation_id": str(prior.invocation.pk)},
        )
    return prior.invocation


def _lookup_visible(model_call: ModelCall, name: str) -> ModelCallTool | None:
    """Exact lookup in the call's visible set, by model-facing name or ``name@version``."""
    try:
        parse_tool_ref(name)
        field = "tool_ref"
    except ValueError:
        field = "model_facing_name"
    return (
        ModelCallTool.objects.select_related("tool_spec").filter(model_call=model_call, **{field: name}).first()
    )


def _record_admission(*, model_call, run, subject, proposal_id, name, arguments_bytes, mct, plan, context, limits, idempotency_key, trace) -> Invocation:
    spec = mct.tool_spec if mct else None
    trace_id = trace.trace_id if trace else run.trace_id
    with transaction.atomic():
        proposal = Proposal.objects.create(
            model_call=model_call, proposal_id=proposal_id, name=name, arguments_bytes=arguments_bytes,
            parsed=None, parser=parser_record(limits), span_id=new_span_id(),
        )
        invocation = Invocation.objects.create(
            proposal=proposal, run=run, model_call=model_call, tenant_id=subject.tenant_id, subject=subject,
            tool_spec=spec, tool_name=spec.name if spec else "", tool_version=spec.version if spec else None,
            state=State.PROPOSED, event_seq=1, normalization_context=context.to_record(),
            idempotency_key=idempotency_key or f"{run.pk}:{proposal_id}",
            trace_id=trace_id, span_id=new_span_id(),
        )
        Event.objects.create(
            invocation=invocation, seq=1, from_state="", to_state=State.PROPOSED, kind="proposed",
            data={"name": name, "bytes": len(arguments_bytes), "proposal_span_id": proposal.span_id},
            trace_id=trace_id, span_id=proposal.span_id,
        )
        _apply_plan(invocation, proposal, plan)
    return invocation


def _apply_plan(invocation: Invocation, proposal: Proposal, plan) -> None:
    state = State.PROPOSED
    for step in plan.steps:
        fields: dict[str, Any] = {}
        if step.to_state == State.PARSED:
            Proposal.objects.filter(pk=proposal.pk).update(parsed=plan.parsed)
            proposal.parsed = plan.parsed
        if step.to_state in (State.VALIDATED, State.VALIDATION_REJECTED):
            fields.update(validation=plan.validation, normalization_trace=plan.normalization_trace)
        if step.to_state == State.VALIDATED:
            fields.update(normalized_arguments=plan.normalized_arguments, digest=plan.digest)
        if plan.error and step is plan.steps[-1]:
            fields.update(error_code=plan.error["code"], error_message=plan.error["message"], error_detail=plan.error["detail"])
        invocation_transition(invocation=invocation, src=state, dst=step.to_state, kind=step.kind, data=step.data, fields=fields)
        state = step.to_state


def invocation_cancel(*, invocation: Invocation, actor: str, reason: str = "") -> Invocation:
    """Cancel before the commit boundary; after it the effect stands (``Conflict``)."""
    from toolops.runtime.states import CANCELLABLE

    invocation.refresh_from_db()
    if State(invocation.state) not in CANCELLABLE:
        raise Conflict(
            f"invocation is {invocation.state}; it can no longer be cancelled",
            code="not_cancellable",
            extra={"state": invocation.state},
        )
    try:
        invocation_transition(
            invocation=invocation, src=invocation.state, dst=State.CANCELLED_BEFORE_COMMIT, kind="cancelled",
            data={"reason": reason}, actor=actor,
            fields={"error_code": "cancelled", "error_message": reason or "cancelled before the commit boundary"},
        )
    except TransitionConflict:
        invocation.refresh_from_db()
        raise Conflict(
            f"invocation moved to {invocation.state} meanwhile", code="not_cancellable", extra={"state": invocation.state}
        ) from None
    return invocation
