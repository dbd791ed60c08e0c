"""The transition service and the DB trigger behind it: only SPEC §2 edges, one winner per race."""
from __future__ import annotations

import threading
import uuid

import pytest
from django.db import IntegrityError, connection, connections, transaction

from invocations_app.models import Event, Invocation, ModelCall, Proposal, Run
from invocations_app.services import TransitionConflict, invocation_transition
from tests.builders import make_subject
from tests.conftest import require_postgres
from toolops.runtime.states import ALL_EDGES, State, TransitionNotAllowed

ALL_PAIRS = [(src, dst) for src in State for dst in State]


def make_invocation(*, state: State = State.PROPOSED) -> Invocation:
    """An invocation inserted directly in ``state`` (INSERT is not a transition)."""
    subject = make_subject()
    run = Run.objects.create(tenant=subject.tenant, subject=subject, trace_id=uuid.uuid4().hex)
    call = ModelCall.objects.create(run=run, span_id="a" * 16)
    proposal = Proposal.objects.create(model_call=call, proposal_id=uuid.uuid4().hex, name="x", arguments_bytes=b"{}", span_id="b" * 16)
    return Invocation.objects.create(
        proposal=proposal, run=run, model_call=call, tenant=subject.tenant, subject=subject, state=state,
        trace_id=run.trace_id, span_id="c" * 16,
    )


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
        Event.objects.filter(pk=event.pk).update(kind="rewritten")


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
