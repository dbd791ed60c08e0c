"""Run budgets and call deadlines end to end (issue 13 items 2 and 3;
docs/concepts/execution.md).

Real PostgreSQL, Redis, a Celery worker with beat and the demo services over HTTP:

* a counted budget refuses *further* work and never undoes admitted work — 10 concurrent
  proposals against ``tool_calls: 3`` → 3 run to OBSERVED, 7 refused (each a recorded refusal
  with its id), none cancelled; a batch answers one entry per tool call;
* only the wall clock cancels what has not crossed the commit boundary;
* ``cost`` is what the tool reports (the demo web service's ``X-Cost``), else the ToolSpec's;
* every call has a deadline: ``maximum_attempts: 0`` stops there; a ``Retry-After`` HTTP-date
  is honoured, and one past the deadline ends the call FAILED_BEFORE_COMMIT
  ``deadline_exceeded``; a confirmed call's deadline starts at approval.
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.db import connections
from rest_framework.test import APIClient

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Confirmation, Invocation, Proposal, Run
from tests.builders import Agent, make_demo_spec

from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.redis]

WEATHER = "weather.get_forecast@1"
WEATHER_ARGS = json.dumps({"city": "Paris", "date": "2026-07-20"})
CALENDAR_ARGS = {"calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
SETTLED = ("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN", "CANCELLED_BEFORE_COMMIT", "AUTHORIZATION_REJECTED")


@pytest.fixture(autouse=True)
def _no_faults_left(demo_services):
    demo_services.reset()
    yield
    demo_services.reset()


def _settled(agent, invocation_id: str, timeout: float = 40) -> dict:
    def done():
        inv = agent.get(f"/api/v1/invocations/{invocation_id}").json()
        return inv if inv["state"] in SETTLED else None

    return wait_for(done, timeout=timeout, interval=0.2)


def _call(agent, tools: list[str], **run) -> tuple[dict, dict]:
    r = agent.run(**run)
    return r, agent.model_call(r["id"], tools=tools)


def _propose(agent, call: dict, name: str, arguments: str, proposal_id: str):
    return agent.post(f"/api/v1/model-calls/{call['id']}/proposals",
                      {"proposal_id": proposal_id, "name": name, "arguments": arguments})


# --- budget semantics (docs/concepts/execution.md: refuses *further* work) -----------------------

def test_ten_concurrent_proposals_against_three_tool_calls_run_three_and_refuse_seven(demo_agent, worker):
    run, call = _call(demo_agent, [WEATHER], budgets={"tool_calls": 3})
    barrier = threading.Barrier(10)
    answers: dict[int, tuple[int, dict]] = {}

    def post(i: int) -> None:
        agent = Agent(APIClient(), demo_agent.token)  # a client (and database connection) per thread
        try:
            barrier.wait(timeout=10)
            resp = _propose(agent, call, WEATHER, WEATHER_ARGS, f"call_{i}")
            answers[i] = (resp.status_code, resp.json())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    admitted = [body for code, body in answers.values() if code == 201]
    refused = [body for code, body in answers.values() if code == 429]
    assert (len(admitted), len(refused)) == (3, 7), sorted(code for code, _ in answers.values())
    assert {body["code"] for body in refused} == {"budget_exhausted"}
    recorded = {str(pk) for pk in Proposal.objects.filter(model_call_id=call["id"], refusal="budget_exhausted").values_list("pk", flat=True)}
    assert {body["refusal_id"] for body in refused} == recorded and len(recorded) == 7
    ends = [_settled(demo_agent, body["id"]) for body in admitted]
    assert [e["state"] for e in ends] == ["OBSERVED"] * 3, [(e["state"], e["error"]) for e in ends]
    assert not Invocation.objects.filter(run_id=run["id"], state="CANCELLED_BEFORE_COMMIT").exists()
    after = demo_agent.get(f"/api/v1/runs/{run['id']}").json()
    assert (after["state"], after["end_reason"], after["used"]["tool_calls"]) == ("exhausted", "tool_calls budget exhausted", 3)


def test_a_batch_over_the_budget_answers_every_tool_call_and_runs_the_admitted_one(demo_agent, worker):
    run, call = _call(demo_agent, [WEATHER], budgets={"tool_calls": 1})
    batch = {"tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": WEATHER, "arguments": WEATHER_ARGS}},
        {"id": "call_b", "type": "function", "function": {"name": WEATHER, "arguments": WEATHER_ARGS}},
    ]}
    resp = demo_agent.post(f"/api/v1/model-calls/{call['id']}/proposals", batch)
    assert resp.status_code == 201, resp.content
    first, second = resp.json()["invocations"]
    assert first["proposal"]["proposal_id"] == "call_a" and first["state"] == "AUTHORIZED"
    assert (second["kind"], second["proposal"]["proposal_id"], second["error"]["code"]) == ("refusal", "call_b", "budget_exhausted")
    assert second["error"]["detail"]["budget"] == "tool_calls"
    assert Proposal.objects.get(pk=second["id"]).refusal == "budget_exhausted"
    assert _settled(demo_agent, first["id"])["state"] == "OBSERVED"  # admitted within the budget: never undone
    again = demo_agent.post(f"/api/v1/model-calls/{call['id']}/proposals", batch)
    assert again.status_code == 200
    assert [e["id"] for e in again.json()["invocations"]] == [first["id"], second["id"]]


def test_the_wall_clock_cancels_a_call_still_waiting_for_a_person(demo_agent, worker):
    run, call = _call(demo_agent, ["calendar.create_event@1"], budgets={"wall_seconds": 2})
    resp = _propose(demo_agent, call, "calendar.create_event@1", json.dumps(CALENDAR_ARGS), "call_1")
    inv = resp.json()
    assert (inv["state"], inv["deadline"]) == ("AUTHORIZED", None)  # its clock starts at approval
    ended = _settled(demo_agent, inv["id"], timeout=30)  # the beat notices the run's clock
    assert (ended["state"], ended["error"]["code"]) == ("CANCELLED_BEFORE_COMMIT", "cancelled")
    assert "wall_seconds" in ended["error"]["message"]
    assert Confirmation.objects.get(invocation_id=inv["id"]).state == "cancelled"
    assert Run.objects.get(pk=run["id"]).end_reason == "wall_seconds budget exhausted"
    assert ended["attempts"] == []  # nothing was sent


def test_cost_is_what_the_tool_reports_and_a_result_over_it_stands(demo_agent, demo_services, worker):
    spec = make_demo_spec(name="web.fetch", copy_as="web.fetch_metered",
                          executor={"kind": "http", "method": "GET", "url": "{url}", "untrusted_pointers": ["/text"],
                                    "cost_header": "X-Cost", "cost": "100"})
    run, call = _call(demo_agent, [spec.ref], budgets={"cost": "0.5"})
    small = _propose(demo_agent, call, spec.ref, json.dumps({"url": f"{demo_services.base}/web/pages/small"}), "call_1").json()
    assert _settled(demo_agent, small["id"])["state"] == "OBSERVED"
    charged = Run.objects.get(pk=run["id"]).cost_used
    assert Decimal("0") < charged < Decimal("0.5")  # the page's X-Cost, not the declared 100
    large = _propose(demo_agent, call, spec.ref, json.dumps({"url": f"{demo_services.base}/web/pages/large"}), "call_2").json()
    assert _settled(demo_agent, large["id"])["state"] == "OBSERVED"  # admitted with budget left: it stands
    after = Run.objects.get(pk=run["id"])
    assert after.cost_used > Decimal("0.5") and (after.status, after.end_reason) == ("exhausted", "cost budget exhausted")
    refused = _propose(demo_agent, call, spec.ref, json.dumps({"url": f"{demo_services.base}/web/pages/small"}), "call_3")
    assert refused.status_code == 429 and refused.json()["budget"] == "cost"


# --- deadlines (docs/concepts/execution.md) ---------------------------------------------------------

def test_unlimited_attempts_stop_at_the_deadline(demo_agent, demo_services, worker):
    spec = make_demo_spec(name="web.fetch", copy_as="web.fetch_unlimited",
                          timeout_policy={"attempt_timeout_seconds": 2, "deadline_seconds": 3},
                          retry_policy={"initial_interval": 0.2, "backoff_coefficient": 1, "maximum_interval": 0.2, "maximum_attempts": 0})
    demo_services.fault("web", fault="status", status=503, count=1000)
    run, call = _call(demo_agent, [spec.ref])
    started = time.monotonic()
    inv = _propose(demo_agent, call, spec.ref, json.dumps({"url": f"{demo_services.base}/web/pages/small"}), "call_1").json()
    assert inv["deadline"] is not None
    assert datetime.fromisoformat(inv["deadline"]) - datetime.fromisoformat(inv["created_at"]) <= timedelta(seconds=3.1)
    ended = _settled(demo_agent, inv["id"], timeout=30)
    assert (ended["state"], ended["error"]["code"]) == ("FAILED_BEFORE_COMMIT", "deadline_exceeded")
    assert len(ended["attempts"]) >= 2 and time.monotonic() - started < 20


def _approve(invocation_id: str) -> None:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="ok")


def test_a_retry_after_http_date_is_honoured(demo_agent, demo_services, worker):
    spec = make_demo_spec(name="calendar.create_event", copy_as="calendar.create_event_dated",
                          retry_policy={"initial_interval": 0.1, "backoff_coefficient": 1, "maximum_interval": 0.1, "maximum_attempts": 3})
    run, call = _call(demo_agent, [spec.ref])
    inv = _propose(demo_agent, call, spec.ref, json.dumps(CALENDAR_ARGS), "call_1").json()
    demo_services.fault("calendar", fault="status", status=429, retry_after_date=3, method="POST")
    _approve(inv["id"])
    ended = _settled(demo_agent, inv["id"])
    assert ended["state"] == "OBSERVED"
    first, second = ended["attempts"][:2]
    waited = datetime.fromisoformat(second["started_at"]) - datetime.fromisoformat(first["ended_at"])
    assert 1 <= first["decision"]["retry_after_seconds"] <= 3
    assert waited >= timedelta(seconds=first["decision"]["retry_after_seconds"] - 0.1)


def test_a_retry_after_past_the_deadline_fails_before_the_commit_boundary(demo_agent, demo_services, worker):
    spec = make_demo_spec(name="calendar.create_event", copy_as="calendar.create_event_short",
                          timeout_policy={"attempt_timeout_seconds": 2, "deadline_seconds": 10})
    run, call = _call(demo_agent, [spec.ref])
    inv = _propose(demo_agent, call, spec.ref, json.dumps(CALENDAR_ARGS), "call_1").json()
    demo_services.fault("calendar", fault="status", status=429, retry_after_date=120, method="POST")
    _approve(inv["id"])
    ended = _settled(demo_agent, inv["id"])
    assert (ended["state"], ended["error"]["code"], ended["result"]["commit_status"]) == (
        "FAILED_BEFORE_COMMIT", "deadline_exceeded", "not_committed")
    assert len(ended["attempts"]) == 1 and demo_services.calendar_events("primary") == []


def test_a_confirmed_calls_deadline_starts_at_approval(demo_agent, demo_services, worker):
    spec = make_demo_spec(name="calendar.create_event", copy_as="calendar.create_event_quick",
                          timeout_policy={"attempt_timeout_seconds": 2, "deadline_seconds": 2})
    run, call = _call(demo_agent, [spec.ref])
    inv = _propose(demo_agent, call, spec.ref, json.dumps(CALENDAR_ARGS), "call_1").json()
    time.sleep(2.5)  # longer than the tool's own deadline: a person's time does not count against it
    _approve(inv["id"])
    ended = _settled(demo_agent, inv["id"])
    assert ended["state"] == "OBSERVED", ended["error"]
    approved_at = datetime.fromisoformat(ended["confirmation"]["decided_at"])
    assert approved_at < datetime.fromisoformat(ended["deadline"]) <= approved_at + timedelta(seconds=2.1)
