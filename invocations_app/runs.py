"""Writes for runs and model calls: open and end a run, record what one model request is shown."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from specs_app.models import Subject, ToolSpec
from specs_app.selectors import (
    tenant_person_named, toolspec_renderable, toolspecs_offered_to_subject, toolspecs_visible_to_subject,
)
from toolops.errors import ApplicationError, Conflict, UnknownTool
from toolops.model_io.rendering import FORMATS, render_tool
from toolops.runtime.tracecontext import TraceContext, new_span_id, new_trace_id
from toolops.runtime.zones import is_iana_zone

from invocations_app.budgets import budget_take
from invocations_app.models import Invocation, ModelCall, ModelCallMessage, ModelCallTool, Run
from invocations_app.tool_messages import carried_message_rows


def run_create(*, subject: Subject, budgets: dict, timezone_name: str, locale: str, metadata: dict, trace: TraceContext | None,
               on_behalf_of: str = "") -> Run:
    """Open a Run for ``subject``; its trace continues the caller's or starts a new one.

    ``on_behalf_of``: the person the run acts for, as the agent names them (username or email).
    It is resolved now to one user of the subject's tenant (``tenant_person_named``; an unknown,
    look-alike-ambiguous or invisibly altered name is refused, ``unknown_person``) and that user
    is stored: they never approve the run's calls. A subject an admin bound to a person
    (``Subject.acts_for``) acts for them in every run it opens, named or not; naming someone else
    is refused (``on_behalf_of_conflict``)."""
    # An IANA name, not merely something zoneinfo can load: "localtime" would make normalization
    # (and so the digest) depend on the host, and "UTC+8" style offsets are no zone at all.
    if not is_iana_zone(timezone_name):
        raise ApplicationError(f"unknown IANA timezone {timezone_name!r}", code="invalid_timezone")
    declared = (on_behalf_of or "").strip()
    return Run.objects.create(
        tenant_id=subject.tenant_id, subject=subject, budgets=budgets, timezone=timezone_name, locale=locale,
        metadata=metadata, trace_id=trace.trace_id if trace else new_trace_id(), on_behalf_of=declared,
        on_behalf_of_user_id=_run_person_id(subject=subject, declared=declared),
    )


def _run_person_id(*, subject: Subject, declared: str) -> int | None:
    """The user a new run of ``subject`` acts for: the one ``declared`` names, else the subject's."""
    if not declared:
        return subject.acts_for_id
    person = tenant_person_named(tenant=subject.tenant, name=declared)
    if subject.acts_for_id is not None and person.pk != subject.acts_for_id:
        bound = get_user_model().objects.get(pk=subject.acts_for_id).get_username()
        raise ApplicationError(
            f"this agent acts for {bound} (set by an admin); on_behalf_of names {person.get_username()}: leave "
            "on_behalf_of out, or use an agent that acts for that person", code="on_behalf_of_conflict",
            extra={"acts_for": bound},
        )
    return person.pk


def run_finish(*, run: Run, reason: str = "finished by the agent runtime") -> Run:
    """End an active run (idempotent for an already-ended run)."""
    Run.objects.filter(pk=run.pk, status=Run.Status.ACTIVE).update(
        status=Run.Status.FINISHED, ended_at=timezone.now(), end_reason=reason
    )
    run.refresh_from_db()
    return run


def run_require_active(run: Run) -> None:
    if run.status != Run.Status.ACTIVE:
        raise Conflict(f"run {run.pk} has ended ({run.status}: {run.end_reason})", code="run_ended")


def _require_own_context(run: Run, context: list[str]) -> list[Invocation]:
    """The invocations the context names, all of the run's tenant. Another tenant's id is refused
    exactly like one that does not exist, so the answer tells nothing about other tenants."""
    wanted = {str(c) for c in context}
    if not wanted:
        return []
    found = list(Invocation.objects.filter(pk__in=wanted, tenant_id=run.tenant_id).select_related("proposal", "tool_spec"))
    missing = sorted(wanted - {str(inv.pk) for inv in found})
    if missing:
        raise ApplicationError("context names invocations that do not exist in this tenant", code="unknown_context",
                               extra={"invocation_ids": missing})
    return found


def model_call_create(*, run: Run, tool_refs: list[str] | None, fmt: str, context: list[str]) -> ModelCall:
    """Record one model request with the exact tool versions it is shown, rendered in ``fmt``.

    Without ``tool_refs`` the model sees the newest published version of every tool offered
    to the run's subject (a quarantined import is not). Named ``tool_refs`` are what the client
    showed its model, recorded as they are: any published version visible to the subject (a
    quarantined one too — admission refuses its calls); an unknown or unpublished reference is
    refused (``unknown_tool``).
    """
    if fmt not in FORMATS:
        raise ApplicationError(f"format must be one of {', '.join(FORMATS)}", code="invalid_format")
    run_require_active(run)
    specs = _resolve_tool_refs(run.subject, tool_refs)
    carried = _require_own_context(run, context)
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
        # The exact message each context invocation gave the model — interim ones included.
        ModelCallMessage.objects.bulk_create(carried_message_rows(invocations=carried, fmt=fmt, model_call=call))
    return call


def _resolve_tool_refs(subject: Subject, tool_refs: list[str] | None) -> list[ToolSpec]:
    if tool_refs is None:
        newest: dict[str, ToolSpec] = {}
        for spec in toolspecs_offered_to_subject(subject=subject):
            if spec.name not in newest or spec.version > newest[spec.name].version:
                newest[spec.name] = spec
        return sorted(newest.values(), key=lambda s: s.name)
    by_ref = {spec.ref: spec for spec in toolspecs_visible_to_subject(subject=subject)}
    missing = [ref for ref in tool_refs if ref not in by_ref]
    if missing:
        raise UnknownTool(f"not published or not visible: {', '.join(missing)}", extra={"unknown": missing})
    if len(set(tool_refs)) != len(tool_refs):
        raise ApplicationError("a tool is listed twice", code="duplicate_tool")
    return [by_ref[ref] for ref in tool_refs]
