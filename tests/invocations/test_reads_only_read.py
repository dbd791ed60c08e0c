"""Reads only read: no GET handler or selector writes a row (issue 10, item 4).

The confirmation queue badge polls every 5 s and agents poll their invocations, so a read that
writes turns polling into write load and makes the record depend on who looked. Expiry is the
beat task's job (``confirmations_expire_due``), and a decision on an overdue confirmation is
refused at decision time (tests/invocations/test_confirmations.py); a rejection's tool messages
are stored with the rejection itself. Each test counts the statements a request sends with
Django's ``CaptureQueriesContext`` and fails on any INSERT, UPDATE or DELETE.
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django.contrib.auth.models import User

from invocations_app.confirmations import confirmations_expire_due
from invocations_app.decision_links import decision_link_token
from specs_app.services import personal_token_issue
from invocations_app.models import Confirmation, ResultBody, ToolMessage
from tests.builders import allow_approving, CALENDAR_ARGS, admit_proposal, make_demo_spec, make_staff
from rest_framework.test import APIClient

from tests.builders import Agent, make_grant, make_subject, make_tenant, make_token

pytestmark = pytest.mark.django_db

WRITES = ("INSERT", "UPDATE", "DELETE")


def writes_of(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)]


def read(client, path, **params):
    with CaptureQueriesContext(connection) as ctx:
        resp = client.get(path, params)
    assert resp.status_code == 200, resp.content[:500]
    assert len(ctx.captured_queries) > 0, "the request ran no query at all: the check would be vacuous"
    return resp, writes_of(ctx)


@pytest.fixture
def overdue():
    """A pending confirmation past its time that the beat task has not seen yet."""
    calendar = make_demo_spec(name="calendar.create_event")
    subject = make_subject(tenant=make_tenant(slug="acme"), name="planner")
    make_grant(subject=subject, capability="calendar.write", operation_class="create", scope_kind="exact", scope_values=["primary"])
    invocation = admit_proposal(subject=subject, spec=calendar, arguments=CALENDAR_ARGS)
    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    Confirmation.objects.filter(pk=confirmation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    approver = make_staff(username="approver")
    allow_approving(user=approver, spec=calendar)
    client = Client()
    client.force_login(approver)
    return confirmation, client


def test_it_writes_nothing_when_the_queue_is_read_and_does_not_offer_an_overdue_confirmation(overdue):
    confirmation, client = overdue
    resp, writes = read(client, "/console/confirmations/")
    assert writes == []
    assert resp.context["pending"] == [] and resp.context["pending_total"] == 0  # the service would refuse it
    confirmation.refresh_from_db()
    assert confirmation.state == "pending" and confirmation.invocation.state == "AUTHORIZED"


def test_it_writes_nothing_when_the_count_badge_polls(overdue):
    confirmation, client = overdue
    resp, writes = read(client, "/console/confirmations/count.json")
    assert writes == [] and resp.json() == {"pending": 0}
    assert Confirmation.objects.get(pk=confirmation.pk).state == "pending"


def test_it_leaves_the_expiry_to_the_beat_task(overdue):
    confirmation, client = overdue
    assert confirmations_expire_due() == 1
    resp, writes = read(client, "/console/confirmations/")
    assert writes == []
    assert [c.state for c in resp.context["decided"]] == ["expired"]
    confirmation.invocation.refresh_from_db()
    assert confirmation.invocation.state == "CANCELLED_BEFORE_COMMIT"


def test_it_writes_nothing_when_the_record_and_the_dashboard_are_read(overdue):
    confirmation, _ = overdue
    admin = make_staff(username="root", superuser=True)
    client = Client()
    client.force_login(admin)
    for path in (f"/console/calls/{confirmation.invocation_id}/", f"/console/confirmations/{confirmation.pk}/",
                 "/console/unknown-outcomes/", "/console/unknown-outcomes/count.json", "/console/"):
        _, writes = read(client, path)
        assert writes == [], path


def test_it_writes_nothing_when_an_agent_reads_an_overdue_call(overdue):
    confirmation, _ = overdue
    # The agent API scopes by subject: read the overdue call as its own subject.
    _, token = make_token(subject=confirmation.subject)
    owner = Agent(APIClient(), token)
    # Authentication stamps a token's last use at most once a minute (auth.LAST_USED_RESOLUTION):
    # bookkeeping of the credential, not of the read. A first request takes that stamp.
    assert owner.get(f"/api/v1/runs/{confirmation.run_id}").status_code == 200
    with CaptureQueriesContext(connection) as ctx:
        resp = owner.get(f"/api/v1/invocations/{confirmation.invocation_id}")
        message = owner.get(f"/api/v1/invocations/{confirmation.invocation_id}/tool-message")
    assert resp.status_code == 200 and message.status_code == 200
    assert writes_of(ctx) == []
    assert resp.json()["state"] == "AUTHORIZED" and resp.json()["confirmation"]["state"] == "pending"
    assert "awaiting_confirmation" in message.content.decode()


def test_it_writes_nothing_when_a_person_reads_the_approvals_api_or_a_decision_link(overdue):
    confirmation, client = overdue
    _, secret = personal_token_issue(user=User.objects.get(username="approver"), label="bot")
    person = Agent(APIClient(), secret)
    assert person.get("/api/v1/confirmations").status_code == 200  # takes the token's last-use stamp
    with CaptureQueriesContext(connection) as ctx:
        listing = person.get("/api/v1/confirmations")
        detail = person.get(f"/api/v1/confirmations/{confirmation.pk}")
    assert listing.status_code == 200 and detail.status_code == 200
    assert writes_of(ctx) == []
    assert listing.json()["count"] == 0  # past its time: not offered, and not expired by a read either
    token = decision_link_token(confirmation=confirmation, user=User.objects.get(username="approver"),
                                expires_at=timezone.now() + timedelta(minutes=5))
    with CaptureQueriesContext(connection) as ctx:
        client.get(f"/console/confirmations/link/{token}/")
    assert writes_of(ctx) == []
    assert Confirmation.objects.get(pk=confirmation.pk).state == "pending"


def test_it_stores_a_rejections_tool_messages_with_the_rejection_and_reads_them_without_writing(agent, weather):
    run = agent.run()
    call = agent.model_call(run["id"])
    inv = agent.propose(call["id"], name=weather.ref, arguments='{"city": "Paris", "date": ').json()
    assert inv["state"] == "PARSE_REJECTED"
    # Stored by the admission that recorded the rejection, before anyone asked.
    assert ToolMessage.objects.filter(invocation_id=inv["id"]).count() == 3
    assert ResultBody.objects.filter(invocation_id=inv["id"]).count() == 1
    # (The token's last-use stamp was taken by the requests above.)
    stored = bytes(ToolMessage.objects.get(invocation_id=inv["id"], format="anthropic").message_bytes)
    with CaptureQueriesContext(connection) as ctx:
        resp = agent.get(f"/api/v1/invocations/{inv['id']}/tool-message", format="anthropic")
    assert resp.status_code == 200 and resp.content == stored
    assert writes_of(ctx) == []
