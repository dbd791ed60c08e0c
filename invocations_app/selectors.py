"""Reads for the agent API, always scoped to the calling subject (404, never 403, across it)."""
from __future__ import annotations

import functools
import time

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection
from django.db.models import prefetch_related_objects

from specs_app.models import Subject
from toolops.sql import model_field
from toolops.sql import (
    remember_related, select_instances_together, select_rows, select_rows_together, select_with_parent,
)
from toolops.errors import NotFound
from toolops.runtime.states import TERMINAL, State

from invocations_app.models import Attempt, Confirmation, Event, Invocation, ModelCall, ModelCallMessage, ModelCallTool, Run, ToolMessage

# Where ``?wait=`` stops: a terminal state, an unknown outcome (reconciliation takes its
# time), or an invocation awaiting a human's confirmation.
SETTLED_STATES = frozenset(TERMINAL | {State.OUTCOME_UNKNOWN})


def is_settled(invocation: Invocation) -> bool:
    if invocation.state in SETTLED_STATES:
        return True
    return invocation.state == State.AUTHORIZED and invocation.confirmations.filter(state="pending").exists()


def _get(qs, pk, what: str):
    try:
        return qs.get(pk=pk)
    except (qs.model.DoesNotExist, DjangoValidationError, ValueError):
        raise NotFound(f"no {what} {pk}") from None


def run_get(*, subject: Subject, run_id) -> Run:
    return _get(Run.objects.filter(subject=subject), run_id, "run")


def _one_with_parent(model, parent: str, where: str, params: list, *, missing: str):
    """The one row ``where`` selects, its ``parent`` loaded, by a lean statement
    (``toolops.sql.select_with_parent``, not a queryset built per request); ``NotFound``
    for no row or an id that is not one."""
    try:
        rows = select_with_parent(model, parent, where, params)
    except (DjangoValidationError, ValueError):
        rows = []
    if not rows:
        raise NotFound(missing)
    return rows[0]


def model_call_get(*, subject: Subject, model_call_id) -> ModelCall:
    """One of the subject's model calls, its run loaded (every proposal POST reads it)."""
    return _one_with_parent(ModelCall, "run", "a.id = %s AND b.subject_id = %s",
                            [(model_field(ModelCall, "pk"), model_call_id), (model_field(Run, "subject"), subject.pk)],
                            missing=f"no model call {model_call_id}")


def invocation_get(*, subject: Subject, invocation_id) -> Invocation:
    """One of the subject's invocations, its proposal loaded and its confirmations and attempts
    prefetched (every poll reads it). Reads only: a confirmation past its time is expired by the
    beat task, and a decision on it is refused either way."""
    invocation = _one_with_parent(Invocation, "proposal", "a.id = %s AND a.subject_id = %s",
                                  [(model_field(Invocation, "pk"), invocation_id), (model_field(Invocation, "subject"), subject.pk)],
                                  missing=f"no invocation {invocation_id}")
    # Lean reads instead of prefetch_related's querysets (built per request; ~1 ms of CPU per
    # poll on bench/load.py), in the related managers' own order.
    by_invocation = [("invocation", invocation.pk)]
    attempts, confirmations = select_instances_together([
        (Attempt, "invocation_id = %s ORDER BY number", by_invocation),
        (Confirmation, "invocation_id = %s ORDER BY created_at", by_invocation),
    ])
    remember_related(invocation, "attempts", attempts)
    if confirmations:  # a call that waited for a person: who decided, and the approvals
        prefetch_related_objects(confirmations, "decided_by", "approvals__user")
    remember_related(invocation, "confirmations", confirmations)
    return invocation


def invocation_events(*, invocation: Invocation):
    return Event.objects.filter(invocation=invocation).order_by("seq")


def invocations_wait(*, invocations: list[Invocation], seconds: float, poll: float = 0.05) -> list[Invocation]:
    """Re-read ``invocations`` until each is settled or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    pending = [inv for inv in invocations if not is_settled(inv)]
    while pending and time.monotonic() < deadline:
        time.sleep(poll)
        for inv in pending:
            inv.refresh_from_db()
        pending = [inv for inv in pending if not is_settled(inv)]
    return invocations


# The invocation record's reads (GET /invocations/{id} polls them): each is one indexed read of
# one table, sent as a lean prepared statement (toolops.sql.select_rows) — the ORM's query
# building costs more CPU than the reads themselves on this path (bench/load.py); the one
# immutable piece, the definition the model saw, is cached per process.

def model_calls_including(*, invocation: Invocation) -> list[str]:
    """Ids of the run's model calls whose context carried this invocation's tool message."""
    if connection.vendor == "postgresql":
        return [str(pk) for pk, in select_rows(*_model_calls_including_read(invocation))]
    # SQLite has no JSON containment operator; a run has few model calls.
    calls = ModelCall.objects.filter(run_id=invocation.run_id).order_by("created_at")
    return [str(c.pk) for c in calls.only("pk", "context") if str(invocation.pk) in (c.context or [])]


def _model_calls_including_read(invocation: Invocation) -> tuple:
    return (ModelCall, ["id"], "run_id = %s AND context @> %s ORDER BY created_at",
            [("run", invocation.run_id), ("context", [str(invocation.pk)])])


def invocation_record_links(*, invocation: Invocation) -> dict:
    """What the record adds to an invocation (docs/concepts/record.md): the definition the model saw, the
    model calls that carried its message, the formats its message was written in and every
    message the model read for it. The three reads go in one round trip on PostgreSQL (every
    poll of ``GET /invocations/{id}`` makes them)."""
    reads = [_tool_message_formats_read(invocation), _messages_carried_read(invocation)]
    if connection.vendor == "postgresql":
        formats, carried, including = select_rows_together([*reads, _model_calls_including_read(invocation)])
        including = [str(pk) for pk, in including]
    else:
        formats, carried = select_rows_together(reads)
        including = model_calls_including(invocation=invocation)
    return {
        "tool_definition_seen": tool_definition_seen(invocation=invocation),
        "included_in_model_calls": including,
        "tool_messages_available": sorted(fmt for fmt, in formats),
        "messages_carried": _carried(carried),
    }


def tool_definition_seen(*, invocation: Invocation) -> dict | None:
    """The ToolSpec definition exactly as rendered for the model call that proposed this call."""
    seen = _tool_definition_seen(invocation.model_call_id, invocation.tool_spec_id)
    return dict(seen) if seen is not None else None


@functools.lru_cache(maxsize=2048)
def _tool_definition_seen(model_call_id, tool_spec_id) -> dict | None:
    # A model call's visible tools and their renderings are written once, with the call, and
    # never change (like admission._visible_set): caching can only save the read.
    if tool_spec_id is None:
        return None
    row = (
        ModelCallTool.objects.filter(model_call_id=model_call_id, tool_spec_id=tool_spec_id)
        .select_related("model_call").only("rendered", "model_facing_name", "tool_ref", "model_call__format").first()
    )
    if row is None:
        return None
    return {"format": row.model_call.format, "model_facing_name": row.model_facing_name, "tool": row.tool_ref,
            "rendered": row.rendered}


def _tool_message_formats_read(invocation: Invocation) -> tuple:
    # The formats this invocation's tool message has been written in.
    return ToolMessage, ["format"], "invocation_id = %s", [("invocation", invocation.pk)]


def _messages_carried_read(invocation: Invocation) -> tuple:
    # Every message the model read for this call — interim ones included — with the model call
    # that carried it, oldest first (docs/concepts/record.md: the exact bytes, by their SHA-256).
    return (ModelCallMessage, ["model_call", "format", "kind", "sha256"], "invocation_id = %s ORDER BY id",
            [("invocation", invocation.pk)])


def _carried(rows) -> list[dict]:
    return [{"model_call_id": str(call_id), "format": fmt, "kind": kind, "sha256": sha256}
            for call_id, fmt, kind, sha256 in rows]
