"""The worker re-checks the digest before sending (docs/concepts/lifecycle.md invariant 3,
docs/concepts/confirmation.md): arguments changed in the database after a human approved them are never
sent.

Real parts: PostgreSQL, Redis, a `celery worker -B` process started *after* the tampering, and
the demo calendar service over HTTP, whose request log proves nothing was sent.
"""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.db import connection

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Attempt, Confirmation, Event, Invocation

from tests.integration.conftest import Worker, wait_for

CALENDAR_ARGS = {"calendar_id": "primary", "title": "Dinner", "start": "2026-07-20T19:00:00+08:00", "duration_minutes": 60}


def _propose(agent) -> dict:
    run = agent.run(timezone="Asia/Shanghai")
    call = agent.model_call(run["id"], tools=["calendar.create_event@1"])
    resp = agent.post(
        f"/api/v1/model-calls/{call['id']}/proposals",
        {"proposal_id": "call_tamper", "name": "calendar.create_event@1", "arguments": json.dumps(CALENDAR_ARGS)},
    )
    assert resp.status_code == 201, resp.content
    return resp.json()


def _tamper_normalized_arguments(invocation_id: str, **changes) -> None:
    """A raw UPDATE of the stored arguments only: the digest column and the approval stay as they were."""
    inv = Invocation.objects.get(pk=invocation_id)
    field = Invocation._meta.get_field("normalized_arguments")
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Invocation._meta.db_table} SET {field.column} = %s WHERE id = %s",
            [field.get_db_prep_save({**inv.normalized_arguments, **changes}, connection), inv.pk],
        )
        assert cursor.rowcount == 1


@pytest.mark.django_db(transaction=True)
def test_it_refuses_arguments_tampered_after_approval_and_sends_nothing(demo_agent, worker_env, demo_services, tmp_path):
    inv = _propose(demo_agent)
    assert inv["state"] == "AUTHORIZED" and inv["confirmation"]["state"] == "pending"
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=inv["id"], state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=inv["digest"], reason="dinner is fine")
    assert Invocation.objects.get(pk=inv["id"]).state == "PREPARED"  # approved; its task waits in the queue

    _tamper_normalized_arguments(inv["id"], title="Transfer all funds", calendar_id="boss")
    stored = Invocation.objects.get(pk=inv["id"])
    assert stored.digest == inv["digest"] and stored.normalized_arguments["title"] == "Transfer all funds"

    worker = Worker(worker_env, tmp_path / "worker.log").start()
    try:
        def settled():
            current = Invocation.objects.get(pk=inv["id"])
            return current if current.state == "FAILED_BEFORE_COMMIT" else None

        done = wait_for(settled, timeout=60)
    finally:
        worker.stop()
        print(worker.output()[-4000:])

    assert done.error_code == "digest_mismatch"
    assert done.commit_status == "not_committed"
    assert Event.objects.filter(invocation_id=inv["id"], kind="digest_mismatch", to_state="FAILED_BEFORE_COMMIT").exists()
    attempts = list(Attempt.objects.filter(invocation_id=inv["id"]))
    assert len(attempts) == 1 and attempts[0].sent_at is None  # claimed, never sent
    # Nothing reached the calendar: no request at all, no event in either calendar.
    assert demo_services.requests_log("calendar") == []
    assert demo_services.calendar_events("primary") == [] and demo_services.calendar_events("boss") == []
    # The model is told the call did not happen.
    message = demo_agent.get(f"/api/v1/invocations/{inv['id']}/tool-message", format="openai")
    assert message.status_code == 200 and "digest_mismatch" in message.content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_still_sends_untampered_approved_arguments(demo_agent, worker_env, demo_services, tmp_path):
    """The control: the same flow without the UPDATE is sent once."""
    inv = _propose(demo_agent)
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=inv["id"], state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=inv["digest"], reason="ok")
    worker = Worker(worker_env, tmp_path / "worker.log").start()
    try:
        done = wait_for(lambda: Invocation.objects.filter(pk=inv["id"], state="OBSERVED").first(), timeout=60)
    finally:
        worker.stop()
    assert done.commit_status == "committed"
    assert [e["title"] for e in demo_services.calendar_events("primary")] == ["Dinner"]
