"""Reads for the agent API, always scoped to the calling subject (404, never 403, across it)."""
from __future__ import annotations

import time

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection

from specs_app.models import Subject
from toolops.errors import NotFound
from toolops.runtime.states import TERMINAL, State

from .models import Event, Invocation, ModelCall, ModelCallMessage, ModelCallTool, Run

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


def model_call_get(*, subject: Subject, model_call_id) -> ModelCall:
    return _get(ModelCall.objects.select_related("run").filter(run__subject=subject), model_call_id, "model call")


def invocation_get(*, subject: Subject, invocation_id) -> Invocation:
    """One of the subject's invocations (reads only: a confirmation past its time is expired by
    the beat task, and a decision on it is refused either way)."""
    return _invocation_get(subject, invocation_id)


def _invocation_get(subject: Subject, invocation_id) -> Invocation:
    qs = (
        Invocation.objects.select_related("proposal")
        .prefetch_related("confirmations__decided_by", "confirmations__approvals__user", "attempts")
        .filter(subject=subject)
    )
    return _get(qs, invocation_id, "invocation")


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


def model_calls_including(*, invocation: Invocation) -> list[str]:
    """Ids of the run's model calls whose context carried this invocation's tool message."""
    calls = ModelCall.objects.filter(run_id=invocation.run_id).order_by("created_at")
    if connection.vendor == "postgresql":
        return [str(pk) for pk in calls.filter(context__contains=[str(invocation.pk)]).values_list("pk", flat=True)]
    # SQLite has no JSON containment operator; a run has few model calls.
    return [str(c.pk) for c in calls.only("pk", "context") if str(invocation.pk) in (c.context or [])]


def tool_definition_seen(*, invocation: Invocation) -> dict | None:
    """The ToolSpec definition exactly as rendered for the model call that proposed this call."""
    row = (
        ModelCallTool.objects.filter(model_call_id=invocation.model_call_id, tool_spec_id=invocation.tool_spec_id)
        .select_related("model_call").only("rendered", "model_facing_name", "tool_ref", "model_call__format").first()
    )
    if row is None:
        return None
    return {"format": row.model_call.format, "model_facing_name": row.model_facing_name, "tool": row.tool_ref,
            "rendered": row.rendered}


def messages_carried(*, invocation: Invocation) -> list[dict]:
    """Every message the model read for this call — interim ones included — with the model call
    that carried it, oldest first (SPEC §12: the exact bytes, by their SHA-256)."""
    rows = ModelCallMessage.objects.filter(invocation=invocation).order_by("id").values(
        "model_call_id", "format", "kind", "sha256")
    return [{**row, "model_call_id": str(row["model_call_id"])} for row in rows]
