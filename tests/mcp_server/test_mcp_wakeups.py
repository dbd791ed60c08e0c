"""A committed state change of an invocation wakes the front door's waiting handler (PostgreSQL
LISTEN/NOTIFY, migrations 0012 and 0016 + ``mcp_server/wakeups.py``) instead of a polling tick."""
from __future__ import annotations

import time

import anyio
import pytest
from django.db import connections

from invocations_app.cancellation import invocation_cancel
from mcp_server.wakeups import Wakeups
from tests.builders import admit_proposal, make_grant, make_subject, make_toolspec
from tests.conftest import require_postgres

pytestmark = pytest.mark.postgres


def test_a_committed_state_change_wakes_the_waiter_of_that_invocation_only(transactional_db):
    require_postgres()
    subject = make_subject()
    make_grant(subject=subject, tenant=subject.tenant)
    spec = make_toolspec()
    invocation = admit_proposal(subject=subject, spec=spec, arguments={"city": "Paris", "date": "2026-12-24"})
    other = admit_proposal(subject=subject, spec=spec, arguments={"city": "Lyon", "date": "2026-12-24"})
    assert invocation.state == other.state == "AUTHORIZED"  # no worker here: they stay put
    wakeups = Wakeups()

    def cancel():
        try:
            invocation_cancel(invocation=invocation, actor="test")
        finally:
            connections.close_all()  # this thread's own connection

    async def scenario():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wakeups.listen)
            with anyio.fail_after(10):
                while not wakeups.listening:
                    await anyio.sleep(0.01)
            mine, theirs = wakeups.arm(invocation.pk), wakeups.arm(other.pk)
            started = time.monotonic()
            await anyio.to_thread.run_sync(cancel)
            with anyio.fail_after(2):
                await mine.wait()
            woke_after = time.monotonic() - started
            assert not theirs.is_set()
            wakeups.disarm(invocation.pk, mine)
            wakeups.disarm(other.pk, theirs)
            assert wakeups.waiters == {}
            tasks.cancel_scope.cancel()
        return woke_after

    assert anyio.run(scenario) < 2


def test_the_announced_states_are_the_final_ones_and_outcome_unknown():
    """The migration writes its states out (a migration keeps its meaning): the state table's."""
    import importlib

    from toolops.runtime.states import TERMINAL, State

    migration = importlib.import_module("invocations_app.migrations.0016_invocation_state_notify_answers")
    assert set(migration.ANSWER_STATES) == {s.value for s in TERMINAL | {State.OUTCOME_UNKNOWN}}


def test_only_a_change_that_answers_something_is_announced(transactional_db):
    """A claim (→ EXECUTING) wakes nobody; the call's final transition does."""
    require_postgres()
    import psycopg

    from invocations_app.transitions import invocation_transition
    from mcp_server.wakeups import CHANNEL

    subject = make_subject()
    make_grant(subject=subject, tenant=subject.tenant)
    invocation = admit_proposal(subject=subject, spec=make_toolspec(), arguments={"city": "Paris", "date": "2026-12-24"})
    params = connections["default"].get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        invocation_transition(invocation=invocation, src="AUTHORIZED", dst="EXECUTING", kind="claimed")
        assert list(listener.notifies(timeout=0.5)) == []
        invocation_transition(invocation=invocation, src="EXECUTING", dst="OBSERVED", kind="observed",
                              fields={"commit_status": "not_applicable"})
        # Two allowed, so a late notice of the claim would show here rather than pass for this one.
        seen = [n.payload for n in listener.notifies(timeout=1.5, stop_after=2)]
    assert seen == [str(invocation.pk)]
