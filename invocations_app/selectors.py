"""Reads for the agent API, always scoped to the calling subject (404, never 403, across it)."""
from __future__ import annotations

import time

from django.core.exceptions import ValidationError as DjangoValidationError

from specs_app.models import Subject
from toolops.errors import NotFound
from toolops.runtime.states import TERMINAL, State

from .models import Event, Invocation, ModelCall, Run

# States in which nothing automatic will move the invocation any further by itself: terminal
# states, unknown outcomes (wait for reconciliation), and — until execution by workers lands —
# AUTHORIZED (awaiting a human, or awaiting execution) and PREPARED.
SETTLED_STATES = frozenset(TERMINAL | {State.OUTCOME_UNKNOWN, State.AUTHORIZED, State.PREPARED})


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
    """One of the subject's invocations; a confirmation past its expiry is expired on access."""
    invocation = _invocation_get(subject, invocation_id)
    if invocation.state == State.AUTHORIZED:
        from .confirmations import confirmations_expire_due_for

        if confirmations_expire_due_for(invocation=invocation):
            invocation = _invocation_get(subject, invocation_id)
    return invocation


def _invocation_get(subject: Subject, invocation_id) -> Invocation:
    qs = (
        Invocation.objects.select_related("proposal")
        .prefetch_related("confirmations__decided_by")
        .filter(subject=subject)
    )
    return _get(qs, invocation_id, "invocation")


def invocation_events(*, invocation: Invocation):
    return Event.objects.filter(invocation=invocation).order_by("seq")


def invocations_wait(*, invocations: list[Invocation], seconds: float, poll: float = 0.05) -> list[Invocation]:
    """Re-read ``invocations`` until each is settled or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    pending = [inv for inv in invocations if inv.state not in SETTLED_STATES]
    while pending and time.monotonic() < deadline:
        time.sleep(poll)
        for inv in pending:
            inv.refresh_from_db()
        pending = [inv for inv in pending if inv.state not in SETTLED_STATES]
    return invocations
