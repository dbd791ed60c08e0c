"""The transition service and the DB trigger behind it: only docs/concepts/lifecycle.md edges, one winner per race;
and the log a read-only call leaves on its way through the worker."""
from __future__ import annotations

import threading
import uuid

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from invocations_app import admission, runs
from worker.attempt import execution_run
from worker.claim import execution_claim
from invocations_app.models import Event, Invocation, ModelCall, Proposal, Run
from invocations_app.transitions import TransitionConflict, event_append, invocation_transition
from devtools.demo import DEMO_TOOLSPECS
from specs_app.models import ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import make_grant, make_subject
from tests.conftest import require_postgres
from toolops.db_guards import birth_guard_suspended
from toolops.runtime.states import ALL_EDGES, BIRTH_STATES, State, TransitionNotAllowed

ALL_PAIRS = [(src, dst) for src in State for dst in State]


def make_invocation(*, state: State = State.PROPOSED) -> Invocation:
    """An invocation inserted directly in ``state``, whatever it is: the INSERT guard is
    suspended for this row (the transition tests need a start in every state)."""
    subject = make_subject()
    run = Run.objects.create(tenant=subject.tenant, subject=subject, trace_id=uuid.uuid4().hex)
    call = ModelCall.objects.create(run=run, span_id="a" * 16)
    proposal = Proposal.objects.create(model_call=call, proposal_id=uuid.uuid4().hex, name="x", arguments_bytes=b"{}", span_id="b" * 16)
    with transaction.atomic(), birth_guard_suspended(connection):
        return Invocation.objects.create(
            proposal=proposal, run=run, model_call=call, tenant=subject.tenant, subject=subject, state=state,
            trace_id=run.trace_id, span_id="c" * 16,
        )


def _insert(proposal: Proposal, state: State) -> Invocation:
    return Invocation.objects.create(
        proposal=proposal, run=proposal.model_call.run, model_call=proposal.model_call, tenant=proposal.model_call.run.tenant,
        subject=proposal.model_call.run.subject, state=state, trace_id="1" * 32, span_id="c" * 16,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("state", list(State))
def test_it_has_the_database_refuse_an_invocation_born_in_a_state_admission_does_not_reach(state):
    """The INSERT guard: inserting a COMMITTED (or EXECUTING, OBSERVED, …) invocation directly fails."""
    proposal = make_invocation(state=State.VALIDATED).proposal  # a run and model call to hang it on
    fresh = Proposal.objects.create(model_call=proposal.model_call, proposal_id=uuid.uuid4().hex, name="x",
                                    arguments_bytes=b"{}", span_id="b" * 16)
    try:
        with transaction.atomic():
            inv = _insert(fresh, state)
    except IntegrityError:
        assert state not in BIRTH_STATES, f"DB refused to insert an invocation in {state}, which admission reaches"
    else:
        assert state in BIRTH_STATES, f"DB accepted an invocation born in {state}"
        assert Invocation.objects.get(pk=inv.pk).state == state


def test_it_has_the_sqlite_trigger_refuse_a_committed_birth_too():
    """The SQLite guard, checked on an in-memory SQLite database whatever database the suite runs on."""
    import sqlite3

    from toolops.db_guards import INVOCATION_TABLE, _sqlite_birth_trigger

    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE {INVOCATION_TABLE} (id INTEGER PRIMARY KEY, state TEXT)")
    db.execute(_sqlite_birth_trigger())
    db.execute(f"INSERT INTO {INVOCATION_TABLE} (state) VALUES ('PREPARED')")
    with pytest.raises(sqlite3.IntegrityError, match="born only in a state admission reaches"):
        db.execute(f"INSERT INTO {INVOCATION_TABLE} (state) VALUES ('COMMITTED')")
    assert [row[0] for row in db.execute(f"SELECT state FROM {INVOCATION_TABLE}")] == ["PREPARED"]


@pytest.mark.django_db
def test_it_refuses_every_edge_not_in_the_table_before_touching_the_db():
    inv = make_invocation()
    refused = [(s, d) for s, d in ALL_PAIRS if (s, d) not in ALL_EDGES]
    assert len(refused) == 15 * 15 - len(ALL_EDGES)
    for src, dst in refused:
        with pytest.raises(TransitionNotAllowed):
            invocation_transition(invocation=inv, src=src, dst=dst, kind="t")
    assert not Event.objects.filter(invocation=inv).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("src,dst", sorted(ALL_EDGES))
def test_it_performs_every_edge_in_the_table(src, dst):
    inv = make_invocation(state=src)
    event = invocation_transition(invocation=inv, src=src, dst=dst, kind="t", data={"why": "test"})
    inv.refresh_from_db()
    assert inv.state == dst and inv.event_seq == 1
    assert (event.seq, event.from_state, event.to_state) == (1, src, dst)


@pytest.mark.django_db
@pytest.mark.parametrize("src", list(State))
def test_it_has_the_database_refuse_edges_outside_the_table(src):
    """The trigger guards writes that bypass the service (raw ORM update)."""
    inv = make_invocation(state=src)
    for dst in State:
        if dst == src:
            continue
        allowed = (src, dst) in ALL_EDGES
        try:
            with transaction.atomic():
                Invocation.objects.filter(pk=inv.pk).update(state=dst)
                raise _Rollback
        except IntegrityError:
            assert not allowed, f"DB refused allowed edge {src}->{dst}"
        except _Rollback:
            assert allowed, f"DB accepted forbidden edge {src}->{dst}"


class _Rollback(Exception):
    pass


@pytest.mark.django_db
def test_it_raises_a_conflict_when_the_state_moved_underneath():
    inv = make_invocation(state=State.PARSED)
    stale = Invocation.objects.get(pk=inv.pk)
    invocation_transition(invocation=inv, src=State.PARSED, dst=State.VALIDATED, kind="t")
    with pytest.raises(TransitionConflict):
        invocation_transition(invocation=stale, src=State.PARSED, dst=State.VALIDATION_REJECTED, kind="t")
    assert list(Event.objects.filter(invocation=inv).values_list("to_state", flat=True)) == ["VALIDATED"]


@pytest.mark.django_db
def test_it_keeps_events_append_only_in_the_database():
    inv = make_invocation(state=State.PARSED)
    event = invocation_transition(invocation=inv, src=State.PARSED, dst=State.VALIDATED, kind="t")
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.filter(invocation=inv, seq=event.seq).update(kind="rewritten")


@pytest.mark.django_db(transaction=True)
def test_it_lets_exactly_one_of_two_concurrent_transitions_win():
    """Two real PostgreSQL connections race PARSED→VALIDATED vs PARSED→VALIDATION_REJECTED."""
    require_postgres()
    inv = make_invocation(state=State.PARSED)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def contender(dst: State) -> None:
        try:
            with transaction.atomic():
                barrier.wait(timeout=10)
                invocation_transition(invocation=Invocation.objects.get(pk=inv.pk), src=State.PARSED, dst=dst, kind="race")
            outcomes.append("won")
        except TransitionConflict:
            outcomes.append("lost")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=contender, args=(d,)) for d in (State.VALIDATED, State.VALIDATION_REJECTED)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["lost", "won"]
    assert Event.objects.filter(invocation_id=inv.pk).count() == 1
    inv.refresh_from_db()
    assert inv.event_seq == 1
    assert connection.vendor == "postgresql"


@pytest.mark.django_db
def test_it_writes_the_events_that_follow_a_transition_with_the_next_seqs():
    inv = make_invocation(state=State.AUTHORIZED)
    first = invocation_transition(
        invocation=inv, src=State.AUTHORIZED, dst=State.EXECUTING, kind="execution_started",
        then=[{"kind": "attempt_started", "data": {"attempt": 1}, "span_id": "d" * 16}],
    )
    appended = event_append(invocation=inv, kind="detail")
    events = list(Event.objects.filter(invocation=inv).order_by("seq"))
    assert [(e.seq, e.kind, e.from_state, e.to_state, e.span_id) for e in events] == [
        (1, "execution_started", "AUTHORIZED", "EXECUTING", "c" * 16),
        (2, "attempt_started", "EXECUTING", "EXECUTING", "d" * 16),
        (3, "detail", "EXECUTING", "EXECUTING", "c" * 16),
    ]
    assert (first.seq, first.kind, appended.seq, appended.pk) == (1, "execution_started", 3, events[2].pk)
    inv.refresh_from_db()
    assert inv.event_seq == 3


# --- the worker's path for a read-only call ------------------------------------------------

WEATHER = next(s for s in DEMO_TOOLSPECS if s["name"] == "weather.get_forecast")
# bench/execution.py's WORKER_WRITES: its bare task does as many INSERTs as this path writes.
WORKER_WRITES = 9


def admitted_read() -> Invocation:
    subject = make_subject()
    spec = toolspec_publish(spec=ToolSpec.objects.create(**{**WEATHER, "version": 1}))
    make_grant(subject=subject)
    run = runs.run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="c1", name=spec.ref,
                                     arguments_bytes=b'{"city": "Oslo", "date": "2026-07-20"}')
    assert inv.state == State.AUTHORIZED
    return inv


@pytest.mark.django_db
def test_it_carries_a_read_to_observed_with_every_step_in_the_log():
    inv = admitted_read()
    with CaptureQueriesContext(connection) as queries:
        invocation, attempt = execution_claim(invocation_id=inv.pk)
        execution_run(invocation=invocation, attempt=attempt)
    # Statements, not round trips: some travel together as one statement list (toolops.sql).
    statements = [s.strip() for q in queries.captured_queries for s in q["sql"].split(";\n")]
    writes = [s for s in statements if s.split()[0].upper() in ("INSERT", "UPDATE")]
    assert len(writes) == WORKER_WRITES, writes
    attempt.refresh_from_db()
    # A read counts as sent from its claim: recovery retries it either way.
    assert attempt.sent_at == attempt.started_at and attempt.ended_at and attempt.commit == "not_applicable"
    events = list(Event.objects.filter(invocation=inv).order_by("seq"))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [(e.kind, e.from_state, e.to_state) for e in events[-3:]] == [
        ("execution_started", "AUTHORIZED", "EXECUTING"),
        ("attempt_started", "EXECUTING", "EXECUTING"),
        ("observed", "EXECUTING", "OBSERVED"),
    ]
    assert events[-2].span_id == attempt.span_id and events[-2].data == {"attempt": 1, "attempt_id": attempt.span_id}
    inv.refresh_from_db()
    assert (inv.state, inv.event_seq, inv.attempt_count) == (State.OBSERVED, len(events), 1)
    assert inv.tool_messages.count() == 3


@pytest.mark.django_db
def test_recording_a_success_sends_the_attempts_close_with_the_final_update_and_never_overwrites_another_close():
    from worker.record import _close_attempt, execution_record
    from toolops.decisions.execution import Commit, ExecutionOutcome

    inv = admitted_read()
    invocation, attempt = execution_claim(invocation_id=inv.pk)
    # A recoverer that judged the worker gone closed the attempt first; the read's answer still lands.
    assert _close_attempt(attempt, commit=Commit.NOT_COMMITTED, failure_class="not_reached", outcome={"abandoned": True})
    attempt.ended_at = None  # the worker's own copy never saw that close
    with CaptureQueriesContext(connection) as queries:
        execution_record(invocation=invocation, attempt=attempt, sent_as="read_only",
                         outcome=ExecutionOutcome(commit=Commit.NOT_APPLICABLE, value={"ok": True}))
    closing = [q["sql"] for q in queries.captured_queries if '"invocations_app_attempt"' in q["sql"]]
    assert len(closing) == 1
    if connection.vendor == "postgresql":  # one round trip: the close, then the invocation's UPDATE
        assert closing[0].startswith('UPDATE "invocations_app_attempt"') and 'UPDATE "invocations_app_invocation"' in closing[0]
    attempt.refresh_from_db()
    assert (attempt.outcome, attempt.failure_class) == ({"abandoned": True}, "not_reached")  # only one closer wins
    inv.refresh_from_db()
    assert inv.state == State.OBSERVED
