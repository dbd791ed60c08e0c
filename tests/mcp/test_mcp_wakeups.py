"""A committed state change of an invocation wakes the front door's waiting handler (PostgreSQL
LISTEN/NOTIFY, migration 0009 + ``invocations_app/mcp/wakeups.py``) instead of a polling tick."""
from __future__ import annotations

import time

import anyio
import pytest
from django.db import connections

from invocations_app.cancellation import invocation_cancel
from invocations_app.mcp.wakeups import Wakeups
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
