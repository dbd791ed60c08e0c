"""Execution end to end: API → confirmation → a real worker → the demo services over HTTP."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Confirmation, Invocation

from tests.integration.conftest import remote_key_of, wait_for

CALENDAR_ARGS = {"calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}


def _propose(agent, tool: str, arguments: dict, *, proposal_id: str = "call_1", headers=None):
    run = agent.run(timezone="Asia/Shanghai")
    call = agent.model_call(run["id"], tools=[tool])
    resp = agent.post(
        f"/api/v1/model-calls/{call['id']}/proposals",
        {"proposal_id": proposal_id, "name": tool, "arguments": json.dumps(arguments, ensure_ascii=False)},
        headers=headers,
    )
    assert resp.status_code == 201, resp.content
    return resp.json()


def _approve(invocation_id: str) -> None:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="looks right")


def _settled(agent, invocation_id: str, states=("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN")):
    def done():
        inv = agent.get(f"/api/v1/invocations/{invocation_id}").json()
        return inv if inv["state"] in states else None

    return wait_for(done, timeout=40)


@pytest.mark.django_db(transaction=True)
def test_it_runs_the_spec_14_example_end_to_end(demo_agent, worker, demo_services):
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS, headers={"HTTP_IDEMPOTENCY_KEY": "req-42:create-event:1"})
    assert inv["state"] == "AUTHORIZED" and inv["confirmation"]["state"] == "pending"
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED"
    assert done["result"]["commit_status"] == "committed"
    event_id = done["result"]["external_resource_id"]
    assert event_id.startswith("evt_")
    assert [e["id"] for e in demo_services.calendar_events("primary")] == [event_id]
    states = [e["to_state"] for e in demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").json()]
    path = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
    assert path == ["PROPOSED", "PARSED", "VALIDATED", "AUTHORIZED", "PREPARED", "EXECUTING", "COMMITTED", "OBSERVED"]
    message = demo_agent.get(f"/api/v1/invocations/{inv['id']}/tool-message", format="openai")
    assert message.status_code == 200
    body = json.loads(message.content)
    assert body["tool_call_id"] == "call_1"
    assert event_id in body["content"]
    sent = demo_services.requests_log("calendar")
    # The remote sees the key derived per tenant (docs/concepts/execution.md), never the runtime's raw key.
    assert {r.get("idempotency_key") for r in sent if r.get("method") == "POST"} == {remote_key_of(inv["id"])}


@pytest.mark.django_db(transaction=True)
def test_it_reconciles_a_dropped_response_into_one_committed_event(demo_agent, worker, demo_services):
    """docs/concepts/failures.md row 6: commit, then drop the response → OUTCOME_UNKNOWN → lookup → COMMITTED."""
    demo_services.fault("calendar", fault="commit_then_drop")
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"))
    assert done["state"] == "OBSERVED"
    events = demo_services.calendar_events("primary")
    assert len(events) == 1
    assert done["result"]["external_resource_id"] == events[0]["id"]
    kinds = [e["kind"] for e in demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").json()]
    assert "outcome_unknown" in kinds and "reconciliation_lookup" in kinds


@pytest.mark.django_db(transaction=True)
def test_it_runs_a_read_only_tool_without_a_human(demo_agent, worker):
    inv = _propose(demo_agent, "weather.get_forecast@1", {"city": "Paris", "date": "tomorrow"})
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED"
    assert done["result"]["status"] == "ok" and done["result"]["value_or_error"]["city"] == "Paris"
    assert done["result"]["commit_status"] == "not_applicable"
    assert len(done["attempts"]) == 1


@pytest.mark.django_db(transaction=True)
def test_it_leaves_an_unsafe_payment_unknown_when_the_answer_is_lost(demo_agent, worker, demo_services):
    demo_services.fault("payments", fault="commit_then_drop")
    inv = _propose(demo_agent, "payments.transfer@1", {"to_account": "acct-123", "amount": {"amount": "12.50", "currency": "USD"}})
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OUTCOME_UNKNOWN"
    assert len(demo_services.transfers("acct-123")) == 1  # paid once, never retried blindly
    assert Invocation.objects.get(pk=inv["id"]).attempt_count == 1


@pytest.mark.django_db(transaction=True)
def test_it_carries_the_callers_trace_to_events_worker_logs_and_the_tool(demo_agent, worker, demo_services):
    """docs/concepts/record.md: one traceparent from the agent runtime, seen everywhere the call went."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"HTTP_TRACEPARENT": f"00-{trace_id}-00f067aa0ba902b7-01"}
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS, headers=headers)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED" and done["trace_id"] == trace_id
    events = demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").json()
    assert {e["trace_id"] for e in events} == {trace_id}
    attempt_span = done["attempts"][0]["attempt_id"]
    sent = [r for r in demo_services.requests_log("calendar") if r.get("method") == "POST"]
    assert sent and sent[0]["traceparent"] == f"00-{trace_id}-{attempt_span}-01"
    worker_lines = [line for line in worker.output().splitlines() if f"trace_id={trace_id}" in line]
    assert any("attempt 1 of calendar.create_event@1 sent" in line and f"span_id={attempt_span}" in line for line in worker_lines)
    assert any(f"execute {inv['id']}" in line for line in worker_lines)


@pytest.mark.django_db(transaction=True)
def test_it_answers_the_eight_questions_of_the_record_for_the_spec_14_call(demo_agent, worker):
    """docs/concepts/record.md through the API, for the worked example of docs/concepts/lifecycle.md."""
    import base64

    from invocations_app.models import ToolMessage

    raw = json.dumps(CALENDAR_ARGS, ensure_ascii=False)
    run = demo_agent.run(timezone="Asia/Shanghai")
    call = demo_agent.model_call(run["id"], tools=["calendar.create_event@1"], format="anthropic")
    inv = demo_agent.post(f"/api/v1/model-calls/{call['id']}/proposals",
                          {"proposal_id": "toolu_1", "name": "calendar-create_event_v1", "arguments": raw}).json()
    _approve(inv["id"])
    _settled(demo_agent, inv["id"])
    later = demo_agent.model_call(run["id"], tools=["calendar.create_event@1"], context=[inv["id"]])
    record = demo_agent.get(f"/api/v1/invocations/{inv['id']}").json()
    # 1. which ToolSpec version, rendered as the model saw it
    seen = record["tool_definition_seen"]
    assert (seen["tool"], seen["format"], seen["rendered"]["name"]) == ("calendar.create_event@1", "anthropic", "calendar-create_event_v1")
    # 2. the raw proposal bytes
    assert base64.b64decode(record["proposal"]["arguments_bytes_b64"]) == raw.encode()
    # 3. what the parser, validator and normalizer produced, with versions and context
    assert record["proposal"]["parser"]["name"] == "toolops.strict_json"
    assert record["validation"]["schema"]["validator"] == "jsonschema" and record["validation"]["schema"]["valid"]
    assert record["normalization_context"]["timezone"] == "Asia/Shanghai"
    assert record["normalized_arguments"]["start"] == "2026-07-20T09:00:00+08:00"
    # 4. who authorized it with which capability, and who confirmed which digest
    assert record["authorization"]["decision"] == "confirm"
    assert record["authorization"]["capabilities"][0]["capability"] == "calendar.write"
    assert record["confirmation"]["state"] == "approved" and record["confirmation"]["decided_by"] == "approver"
    assert record["confirmation"]["digest"] == record["digest"]
    # 5. the invocation and every attempt, with timings
    attempt = record["attempts"][0]
    assert attempt["started_at"] <= attempt["sent_at"] <= attempt["ended_at"] and attempt["commit"] == "committed"
    # 6. commit status
    assert record["result"]["commit_status"] == "committed" and record["result"]["external_resource_id"].startswith("evt_")
    # 7. the exact tool-message bytes
    served = demo_agent.get(f"/api/v1/invocations/{inv['id']}/tool-message", format="anthropic").content
    assert served == bytes(ToolMessage.objects.get(invocation_id=inv["id"], format="anthropic").message_bytes)
    assert json.loads(served)["tool_use_id"] == "toolu_1"
    # 8. which later model call's context included them
    assert record["included_in_model_calls"] == [later["id"]]
