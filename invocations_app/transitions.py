"""The transitions kernel: every state change of an invocation, and every event, goes through here.

``invocation_transition`` checks the edge against the table, then — in one transaction — runs a
conditional ``UPDATE … WHERE id = ? AND state = src`` that also bumps ``event_seq``, and inserts
the event carrying that seq. Zero rows changed means another writer moved the invocation first:
``TransitionConflict``, never an overwrite. A database trigger generated from the same table
(``toolops.db_guards``) refuses any other edge, whoever writes.

This module imports nothing of this app but its models and its signals (a call reaching a terminal
state is announced from here, ``signals.invocation_settled``; the outgoing webhooks listen, the
kernel does not know them): every other service builds on it.
"""
from __future__ import annotations

from typing import Any, Sequence

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from toolops.sql import Counted, execute_counted_then, execute_one, insert_returning_keys, insert_rows, update_bumping_counter
from toolops.errors import Conflict
from toolops.runtime.states import TERMINAL, TransitionNotAllowed, is_allowed

from invocations_app.models import Event, Invocation
from invocations_app import signals


class TransitionConflict(Conflict):
    code = "transition_conflict"


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
    first: Counted | None = None,
) -> Event:
    """Move ``invocation`` from ``src`` to ``dst`` and append its event, atomically.

    ``fields`` are further columns written by the same UPDATE (so they change only if the
    state does). ``then`` are events that follow at ``dst`` (dicts with ``kind``, ``data`` and
    optionally ``span_id``): the same UPDATE reserves their seqs and one INSERT writes them with
    the transition's. ``rows`` (groups of unsaved instances) and ``statements`` (``(sql,
    params)`` needing no answer) are written only if the transition happens, in the events'
    round trip (``toolops.sql``; event keys are not read back). Raises
    ``TransitionNotAllowed`` for an edge outside docs/concepts/lifecycle.md and ``TransitionConflict`` when the
    invocation is no longer in ``src``. ``first``: a statement run just before the UPDATE, in
    its round trip, whatever the UPDATE finds (the attempt this transition records, closed).
    """
    if not is_allowed(src, dst):
        raise TransitionNotAllowed(src, dst)
    fields = {**(fields or {}), "state": dst, "updated_at": timezone.now()}
    # No savepoint: the UPDATE and the events commit with the caller's transaction (or alone).
    # A lost race writes nothing, so the conflict is raised *after* the block and leaves the
    # caller's transaction usable; savepoints here cost two round trips per transition.
    with transaction.atomic(savepoint=False):
        row = _update_returning_seq(invocation.pk, fields, src=src, by=1 + len(then), first=first)
        if row is not None:
            events = _transition_events(invocation, src=src, dst=dst, kind=kind, data=data, actor=actor, span_id=span_id,
                                        then=then, first=row[0] - len(then))
            insert_rows(events, *rows, then=statements)
    if row is None:
        raise TransitionConflict(f"invocation {invocation.pk} is no longer {src}", extra={"expected_state": src})
    for name, value in fields.items():
        setattr(invocation, name, value)
    invocation.event_seq = row[0]
    if dst in TERMINAL:
        # Receivers write in the caller's transaction (the webhook outbox: sent after it commits).
        signals.invocation_settled.send(sender=Invocation, invocation=invocation)
    return events[0]


def transition_in_batch(
    *, invocation: Invocation, src: str, dst: str, kind: str, data: dict | None = None, fields: dict[str, Any] | None = None,
    then: Sequence[dict] = (),
) -> tuple[list[Event], tuple[str, list], dict[str, Any]]:
    """``invocation_transition`` for a row being written in the caller's own batch (so its
    ``event_seq`` is known and nothing is read back): its events, its conditional UPDATE and the
    fields that UPDATE sets, for the caller to send with its other statements and to set on the
    instance once written. Admission claims a read's first attempt this way."""
    if not is_allowed(src, dst):
        raise TransitionNotAllowed(src, dst)
    fields = {**(fields or {}), "state": dst, "updated_at": timezone.now()}
    by = 1 + len(then)
    events = _transition_events(invocation, src=src, dst=dst, kind=kind, data=data, actor="system", span_id=None,
                                then=then, first=invocation.event_seq + 1)
    statement = _update_sql(invocation.pk, fields, src=src, by=by, returning=False)
    return events, statement, {**fields, "event_seq": invocation.event_seq + by}


def _transition_events(invocation: Invocation, *, src: str, dst: str, kind: str, data: dict | None, actor: str,
                       span_id: str | None, then: Sequence[dict], first: int) -> list[Event]:
    """The transition's event at seq ``first`` and the ``then`` events that follow it at ``dst``."""
    return [Event(
        invocation_id=invocation.pk, seq=first, from_state=src, to_state=dst, kind=kind, data=data or {},
        actor=actor, trace_id=invocation.trace_id, span_id=span_id or invocation.span_id,
    )] + [Event(
        invocation_id=invocation.pk, seq=first + n, from_state=dst, to_state=dst, kind=extra["kind"],
        data=extra.get("data") or {}, actor=actor, trace_id=invocation.trace_id,
        span_id=extra.get("span_id") or invocation.span_id,
    ) for n, extra in enumerate(then, start=1)]


def _update_returning_seq(pk, fields: dict[str, Any], *, src: str | None = None, by: int = 1,
                          first: Counted | None = None) -> tuple[int, str] | None:
    """``UPDATE … SET …, event_seq = event_seq + by WHERE id = pk [AND state = src] RETURNING event_seq, state``.

    Raw SQL because the ORM's ``update()`` cannot return the bumped counter, and reading it
    back would cost a second round trip on the hottest path. Values are prepared by each
    field so JSON, UUID and datetime columns are written exactly as the ORM would.
    """
    update = _update_sql(pk, fields, src=src, by=by, returning=True)
    rows = execute_one(*update) if first is None else execute_counted_then(first, *update)
    return (rows[0][0], rows[0][1]) if rows else None


def _update_sql(pk, fields: dict[str, Any], *, src: str | None, by: int, returning: bool) -> tuple[str, list]:
    return update_bumping_counter(Invocation, pk, fields, counter="event_seq", by=by, expected_state=src, returning=returning)


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
