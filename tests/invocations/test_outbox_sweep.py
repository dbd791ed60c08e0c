"""The outbox sweep (invocations_app/dispatch.py): every call that should be running and has no
live message gets one — once per period, never one a worker holds locked — read back from the
real Redis broker queue."""
from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta

import psycopg
import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from invocations_app.dispatch import ready_invocations_sweep
from invocations_app.models import Confirmation, Invocation
from tests.builders import PlantedWorld
from tests.conftest import require_postgres, require_redis
from toolops.celery import app as celery_app
from toolops.runtime.states import State


@pytest.fixture
def broker_queue(settings):
    """The broker queue, emptied; ``sent()`` lists the invocation ids of the messages in it."""
    require_redis()
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.fail("the sweep tests read the Redis broker queue: CELERY_BROKER_URL=redis://...")
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)

    class Queue:
        @staticmethod
        def sent() -> list[str]:
            messages = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
            return sorted(json.loads(base64.b64decode(m["body"]))[0][0] for m in messages)

    yield Queue
    with celery_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


def _later(world: PlantedWorld, periods: float = 2) -> object:
    return world.now + timedelta(seconds=periods * django_settings.TOOLOPS_SWEEP_SECONDS)


def _confirming(world: PlantedWorld, inv: Invocation, state: str) -> Invocation:
    Invocation.objects.filter(pk=inv.pk).update(authorization={"decision": "confirm"})
    confirmation = world.pending_confirmation(inv, ago=timedelta(minutes=1))
    Confirmation.objects.filter(pk=confirmation.pk).update(state=state)
    return inv


@pytest.mark.django_db
def test_the_sweep_sends_every_call_that_should_be_running_and_nothing_else(broker_queue):
    w = PlantedWorld()
    prepared_write = w.invocation(State.PREPARED, spec=w.calendar)
    auto_read = w.invocation(State.AUTHORIZED)  # read-only, no confirmation: the case the old beat missed
    approved_read = _confirming(w, w.invocation(State.AUTHORIZED), Confirmation.Status.APPROVED)
    retry_due = w.invocation(State.EXECUTING, attempts=("transient",))
    Invocation.objects.filter(pk=retry_due.pk).update(next_attempt_at=w.now)
    # Not to be sent: waiting for a person, a write waiting for its confirmation, a retry not
    # due yet, an attempt running, finished calls.
    _confirming(w, w.invocation(State.AUTHORIZED), Confirmation.Status.PENDING)
    w.invocation(State.AUTHORIZED, spec=w.calendar)
    not_due = w.invocation(State.EXECUTING, attempts=("transient",))
    Invocation.objects.filter(pk=not_due.pk).update(next_attempt_at=_later(w, 10))
    w.invocation(State.EXECUTING, attempts=("running",))
    w.invocation(State.OBSERVED, attempts=("",))
    w.invocation(State.CANCELLED_BEFORE_COMMIT)

    expected = sorted(str(i.pk) for i in (prepared_write, auto_read, approved_read, retry_due))
    sent = ready_invocations_sweep(now=_later(w))
    assert broker_queue.sent() == expected, {"auto": auto_read.pk, "approved": approved_read.pk, "due": retry_due.pk}
    assert sent == 4


@pytest.mark.django_db
def test_a_ready_call_is_sent_once_per_period_and_only_after_it_had_a_period_to_be_claimed(broker_queue):
    w = PlantedWorld()
    inv = w.invocation(State.AUTHORIZED)
    assert ready_invocations_sweep(now=w.now) == 0  # just admitted: its own message is on its way
    first = _later(w)
    assert ready_invocations_sweep(now=first) == 1
    assert ready_invocations_sweep(now=first) == 0  # stamped: a backlog is not re-sent every beat
    assert ready_invocations_sweep(now=first + timedelta(seconds=django_settings.TOOLOPS_SWEEP_SECONDS)) == 1
    assert broker_queue.sent() == [str(inv.pk)] * 2


@pytest.mark.django_db
def test_the_sweep_is_bounded_by_its_batch_oldest_first(broker_queue):
    w = PlantedWorld()
    calls = [w.invocation(State.AUTHORIZED) for _ in range(5)]
    for n, inv in enumerate(calls):
        Invocation.objects.filter(pk=inv.pk).update(updated_at=w.now - timedelta(seconds=100 - n))
    assert ready_invocations_sweep(now=_later(w), batch=3) == 3
    assert broker_queue.sent() == sorted(str(i.pk) for i in calls[:3])
    assert ready_invocations_sweep(now=_later(w), batch=3) == 2  # the rest on the next run


@pytest.mark.django_db(transaction=True)
def test_the_sweep_skips_a_row_another_transaction_holds_locked(broker_queue):
    """FOR UPDATE SKIP LOCKED: a row a worker is claiming right now is neither waited for nor sent."""
    require_postgres()
    w = PlantedWorld()
    locked, free = w.invocation(State.AUTHORIZED), w.invocation(State.AUTHORIZED)
    db = connection.settings_dict
    holder = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=False)
    try:
        holder.execute("SELECT id FROM invocations_app_invocation WHERE id = %s FOR UPDATE", (locked.pk,))
        result = {}
        sweeper = threading.Thread(target=lambda: result.update(sent=ready_invocations_sweep(now=_later(w))))
        sweeper.start()
        sweeper.join(timeout=10)
        assert not sweeper.is_alive(), "the sweep waited for a locked row"
        assert result["sent"] == 1 and broker_queue.sent() == [str(free.pk)]
    finally:
        holder.rollback()
        holder.close()
    assert ready_invocations_sweep(now=_later(w)) == 1  # released: its turn now
    assert broker_queue.sent() == sorted([str(free.pk), str(locked.pk)])
