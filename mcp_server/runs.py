"""Which Run an MCP request belongs to (docs/reference/mcp.md documents the rule).

1. ``_meta["dev.toolops/run"]`` names a run of this subject: that run (REST-created runs, with
   their budgets, timezone and locale, can be driven by an MCP client this way).
2. Otherwise a 2025-11-25 session (``Mcp-Session-Id``) is one run, opened on its first
   tools/list or tools/call.
3. Otherwise (2026-07-28 requests and stateless clients carry no session): one run per subject
   per UTC day.
Runs opened here take the subject's time zone and locale (``Subject.timezone``/``locale``, set by
an admin; UTC/en-US by default); a run named by rule 1 keeps its own.
Runs the front door opens carry ``mcp_key`` (``session:<id>`` / ``day:<date>``); a unique
constraint on (subject, mcp_key) makes concurrent first requests agree on one run.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from specs_app.models import Subject
from toolops.sql import select_with_parent
from toolops.errors import ApplicationError
from toolops.runtime.storable import printable
from toolops.runtime.tracecontext import TraceContext

from invocations_app.models import ModelCall, Run
from invocations_app.runs import run_create

RUN_META_KEY = "dev.toolops/run"


@dataclass(frozen=True)
class RunRule:
    kind: str  # "meta" | "session" | "day"
    key: str


def run_rule(*, session_id: str | None, meta: dict) -> RunRule:
    if meta.get(RUN_META_KEY):
        return RunRule("meta", str(meta[RUN_META_KEY]))
    if session_id:
        return RunRule("session", f"session:{session_id}")
    return RunRule("day", f"day:{timezone.now().date().isoformat()}")


def mcp_run_get_or_open(*, subject: Subject, rule: RunRule, trace: TraceContext | None) -> Run:
    """The run ``rule`` names, opened on first use (race-safe)."""
    if rule.kind == "meta":
        try:
            return Run.objects.get(pk=rule.key, subject=subject)
        except (Run.DoesNotExist, DjangoValidationError, ValueError):
            raise ApplicationError(f"{RUN_META_KEY} names no run of this agent: {printable(rule.key)}",
                                   code="unknown_run") from None
    run = Run.objects.filter(subject=subject, mcp_key=rule.key).first()
    if run is not None:
        return run
    try:
        with transaction.atomic():
            run = run_create(subject=subject, budgets=dict(settings.TOOLOPS_MCP_RUN_BUDGETS),
                             # The agent's zone and locale, set by an admin (UTC / en-US unless set).
                             timezone_name=subject.timezone, locale=subject.locale,
                             metadata={"opened_by": "mcp", "rule": rule.kind}, trace=trace)
            Run.objects.filter(pk=run.pk).update(mcp_key=rule.key)
    except IntegrityError:
        # A concurrent first request opened it; the loser's run rolled back with its key.
        return Run.objects.get(subject=subject, mcp_key=rule.key)
    run.mcp_key = rule.key
    return run



def mcp_run_and_listing(*, subject: Subject, rule: RunRule, trace: TraceContext | None) -> tuple[Run, ModelCall | None]:
    """The run ``rule`` names and its most recent model call (the listing a tools/call is
    resolved against; None when the run has none yet): one indexed read in the usual case,
    without building a queryset (this runs on every tools/call)."""
    run_fields = Run._meta
    if rule.kind == "meta":
        try:
            key, where = (run_fields.pk, uuid.UUID(rule.key)), "b.id = %s"
        except ValueError:  # not a run id: mcp_run_get_or_open says so
            key = None
    else:
        key, where = (run_fields.get_field("mcp_key"), rule.key), "b.mcp_key = %s"
    if key is not None:
        latest = select_with_parent(
            ModelCall, "run", f"{where} AND b.subject_id = %s ORDER BY a.created_at DESC LIMIT 1",
            [key, (run_fields.get_field("subject"), subject.pk)],
        )
        if latest:
            return latest[0].run, latest[0]
    return mcp_run_get_or_open(subject=subject, rule=rule, trace=trace), None
