"""docs/concepts/lifecycle.md and failures.md (the retry matrix, failure table row 6) with real parts:
every retry-matrix cell the demo services can provoke, and a worker pool process killed with SIGKILL in
the middle of an attempt.

Everything goes through the agent API, a real ``celery worker -B`` subprocess (Redis broker,
PostgreSQL) and the demo services over HTTP with injected faults; nothing is mocked. What was
sent is read back from the demo services' own request log (method, path, Idempotency-Key,
traceparent, status), what was decided from the invocation's attempts and event trace.

Designed behaviour asserted here (worker/claim.py, attempt.py, record.py, recovery.py + toolops/decisions/retry.py, execution.py):

* 429 (any class) — a refusal before processing: ``rate_limited``, nothing committed, retried
  with backoff whose floor is the tool's Retry-After; a write_idempotent retry re-sends the same key.
* 5xx on a read — ``transient``: retried with backoff.
* 5xx on a write — the tool may have committed before failing, so the commit is *unknown*:
  OUTCOME_UNKNOWN. write_idempotent is then looked up by key (absent → re-sent with the same
  key); write_unsafe waits for a human and is never re-sent.
* response timeout — write_idempotent: OUTCOME_UNKNOWN → lookup finds the effect → COMMITTED;
  write_unsafe with a lookup (payments.transfer@1, by client reference): the same, never re-sent;
  write_unsafe without one: OUTCOME_UNKNOWN, stays there.
* business rejection (422) — FAILED_BEFORE_COMMIT after one attempt, never retried.
* provably never reached (connection refused) — retried within the budget for every class,
  then FAILED_BEFORE_COMMIT; never OUTCOME_UNKNOWN.
* a worker killed after the request left — the message is redelivered (acks_late +
  reject_on_worker_lost), the open attempt is recovered once it cannot still be running:
  write_idempotent → OUTCOME_UNKNOWN → lookup → COMMITTED (one event); write_unsafe →
  OUTCOME_UNKNOWN for good (paid once).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from datetime import datetime
from urllib.parse import unquote

import pytest
from django.contrib.auth.models import User

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Attempt, Confirmation, Invocation
from specs_app.models import ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import demo_toolspec_data, make_demo_spec, make_grant

from tests.integration.conftest import remote_key_of, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.redis]

CALENDAR_ARGS = {"calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
PAYMENT_ARGS = {"to_account": "acct-123", "amount": {"amount": "12.50", "currency": "USD"}}
CLOSED_PORT = 9  # discard: nothing listens on loopback here (checked by `_assert_port_closed`)
FAST_RETRY = {"initial_interval": 0.2, "backoff_coefficient": 2, "maximum_interval": 1, "maximum_attempts": 2}
SETTLED = ("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN", "FAILED_AFTER_COMMIT")


# --- helpers --------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _closed_port_is_a_permitted_destination(settings):
    """The "never reached" cases point ToolSpec endpoints at a closed loopback port: the operator's
    egress allow-list must name it, or the egress policy (not the closed port) would answer.
    Autouse, so it is set before the worker starts (it reads the list from its environment)."""
    settings.TOOLOPS_EGRESS_ALLOW = [f"127.0.0.1:{CLOSED_PORT}"]


def _spec_copy(base: str, name: str, *, executor: dict | None = None, **changes) -> ToolSpec:
    """A published copy of a demo ToolSpec under a new name (same capabilities and grants);
    ``executor`` entries are merged into the demo's executor."""
    if executor:
        changes["executor"] = {**demo_toolspec_data(name=base)["executor"], **executor}
    return make_demo_spec(name=base, copy_as=name, **changes)


def _unsafe_without_lookup(name: str = "payments.transfer_nolookup", **changes) -> str:
    """payments.transfer without its client-reference lookup: the plain write_unsafe case, whose
    unknown outcome only a human can resolve. Returns the tool ref."""
    data = demo_toolspec_data(name="payments.transfer")
    data.update(name=name, **changes)
    data["executor"] = {k: v for k, v in data["executor"].items() if k not in ("lookup", "client_reference_header")}
    return toolspec_publish(spec=ToolSpec.objects.create(version=1, **data)).ref


def _propose(agent, tool: str, arguments: dict, *, proposal_id: str = "call_1") -> dict:
    run = agent.run(timezone="Asia/Shanghai")
    call = agent.model_call(run["id"], tools=[tool])
    resp = agent.post(
        f"/api/v1/model-calls/{call['id']}/proposals",
        {"proposal_id": proposal_id, "name": tool, "arguments": json.dumps(arguments, ensure_ascii=False)},
    )
    assert resp.status_code == 201, resp.content
    return resp.json()


def _approve(invocation_id: str) -> None:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="looks right")


def _get(agent, invocation_id: str) -> dict:
    return agent.get(f"/api/v1/invocations/{invocation_id}").json()


def _settled(agent, invocation_id: str, states=SETTLED, timeout: float = 40) -> dict:
    def done():
        inv = _get(agent, invocation_id)
        return inv if inv["state"] in states else None

    return wait_for(done, timeout=timeout, interval=0.2)


def _events(agent, invocation_id: str) -> list[dict]:
    return agent.get(f"/api/v1/invocations/{invocation_id}/events").json()


def _kinds(events: list[dict]) -> list[str]:
    return [e["kind"] for e in events]


def _path(events: list[dict]) -> list[str]:
    """The states the invocation went through, consecutive repeats collapsed."""
    states = [e["to_state"] for e in events if e["to_state"]]
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


def _posts(demo_services, service: str) -> list[dict]:
    return [r for r in demo_services.requests_log(service) if r["method"] == "POST"]


def _tool_message(agent, invocation_id: str, fmt: str) -> dict:
    resp = agent.get(f"/api/v1/invocations/{invocation_id}/tool-message", format=fmt)
    assert resp.status_code == 200, resp.content
    return json.loads(resp.content)


def _assert_attempt_trace(agent, invocation_id: str) -> list[dict]:
    """docs/concepts/failures.md last line: every attempt, backoff and jitter is an event, with the attempt id.

    * one ``attempt_started`` per attempt, carrying its number and attempt id (= span id);
    * one ``attempt_ended`` per failed attempt, carrying the outcome and the full decision;
    * one ``retry_scheduled`` per retry, carrying delay, backoff, jitter, reason and due time,
      and the delay is what full jitter + Retry-After floor promise.
    """
    events = _events(agent, invocation_id)
    attempts = list(Attempt.objects.filter(invocation_id=invocation_id).order_by("number"))
    started = [e for e in events if e["kind"] == "attempt_started"]
    assert [(e["data"]["attempt"], e["data"]["attempt_id"]) for e in started] == [(a.number, a.span_id) for a in attempts]
    assert all(e["span_id"] == e["data"]["attempt_id"] for e in started)
    ended = {e["data"]["attempt"]: e for e in events if e["kind"] == "attempt_ended"}
    for a in attempts:
        if a.failure_class and not a.outcome.get("abandoned"):
            e = ended[a.number]
            assert e["span_id"] == a.span_id
            assert e["data"]["outcome"]["failure_class"] == a.failure_class
            assert set(e["data"]["decision"]) >= {"action", "delay_seconds", "backoff_seconds", "jitter_seconds",
                                                  "reason", "retry_after_seconds"}
            assert e["data"]["decision"] == a.decision
    for e in (e for e in events if e["kind"] == "retry_scheduled"):
        d = e["data"]
        assert d["action"] in ("retry_now", "retry_after")
        assert {"delay_seconds", "backoff_seconds", "jitter_seconds", "reason", "due_at"} <= set(d)
        assert 0 <= d["jitter_seconds"] <= d["backoff_seconds"]
        # full jitter: delay = backoff - jitter, raised to the Retry-After floor when one came
        assert d["delay_seconds"] == pytest.approx(max(d["backoff_seconds"] - d["jitter_seconds"], d["retry_after_seconds"] or 0))
        datetime.fromisoformat(d["due_at"])
    return events


def _assert_traceparents(requests_log: list[dict], invocation_id: str, method: str = "POST") -> None:
    """Each outbound attempt carried its own attempt's traceparent (docs/concepts/record.md)."""
    inv = Invocation.objects.get(pk=invocation_id)
    spans = [a.span_id for a in inv.attempts.order_by("number")]
    sent = [r["traceparent"] for r in requests_log if r["method"] == method]
    assert sent == [f"00-{inv.trace_id}-{s}-01" for s in spans]


def _assert_port_closed(port: int) -> None:
    with socket.socket() as s:
        s.settimeout(1)
        with pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))


def _quiet_period(worker, demo_services, service: str, invocation_id: str, state: str) -> None:
    """Nothing more happens: same state, same requests, after both beat tasks that could (wrongly)
    act on a settled invocation — enqueue_due and reconcile — ran again, read from the worker log."""
    def sent():  # (a delayed request's status is filled in later: compare what was sent)
        return [(r["seq"], r["method"], r["path"]) for r in demo_services.requests_log(service)]

    before = sent()
    worker.wait_for_beat("invocations.enqueue_due", "invocations.reconcile")
    assert Invocation.objects.get(pk=invocation_id).state == state
    assert sent() == before


# --- 1. the retry matrix, cell by cell ---------------------------------------------------------

def test_429_with_retry_after_on_write_idempotent_backs_off_and_resends_the_same_key(demo_agent, worker, demo_services):
    demo_services.fault("calendar", fault="status", status=429, retry_after=1, method="POST")
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])

    assert done["state"] == "OBSERVED", done
    first, second = done["attempts"]
    assert (first["failure_class"], first["commit"]) == ("rate_limited", "not_committed")
    assert first["decision"]["action"] == "retry_after" and first["decision"]["reason"] == "rate_limited_backoff"
    assert second["commit"] == "committed" and second["failure_class"] is None
    events = _assert_attempt_trace(demo_agent, inv["id"])
    [retry] = [e["data"] for e in events if e["kind"] == "retry_scheduled"]
    assert retry["retry_after_seconds"] == 1
    assert retry["delay_seconds"] >= 1  # Retry-After is a floor under the jittered backoff
    assert retry["backoff_seconds"] == 1.0 and 0 <= retry["jitter_seconds"] <= 1.0
    # the second attempt did not start before the delay the decision recorded
    gap = datetime.fromisoformat(second["started_at"]) - datetime.fromisoformat(first["ended_at"])
    assert gap.total_seconds() >= retry["delay_seconds"] - 0.05
    assert _path(events)[-3:] == ["EXECUTING", "COMMITTED", "OBSERVED"]
    assert "OUTCOME_UNKNOWN" not in _path(events)

    posts = _posts(demo_services, "calendar")
    assert [p["status"] for p in posts] == [429, 201]
    assert {p["idempotency_key"] for p in posts} == {remote_key_of(inv["id"])}
    _assert_traceparents(demo_services.requests_log("calendar"), inv["id"])
    events_created = demo_services.calendar_events("primary")
    assert [e["id"] for e in events_created] == [done["result"]["external_resource_id"]]


def test_503_on_a_read_is_retried_with_backoff_and_observed(demo_agent, worker, demo_services):
    demo_services.fault("web", fault="status", status=503)
    url = f"{demo_services.base}/web/pages/small"
    inv = _propose(demo_agent, "web.fetch@1", {"url": url})
    done = _settled(demo_agent, inv["id"])

    assert done["state"] == "OBSERVED", done
    assert [(a["failure_class"], a["commit"]) for a in done["attempts"]] == [("transient", "not_applicable"), (None, "not_applicable")]
    assert done["attempts"][0]["decision"]["reason"] == "transient_backoff"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    [retry] = [e["data"] for e in events if e["kind"] == "retry_scheduled"]
    assert retry["backoff_seconds"] == 1.0 and retry["retry_after_seconds"] is None  # default policy, attempt 1
    assert _path(events)[-2:] == ["EXECUTING", "OBSERVED"]
    gets = [r for r in demo_services.requests_log("web")]
    assert [(g["method"], g["status"]) for g in gets] == [("GET", 503), ("GET", 200)]
    _assert_traceparents(gets, inv["id"], method="GET")
    assert "Packing for a short trip" in json.dumps(done["result"]["value_or_error"], ensure_ascii=False)


def test_503_on_write_idempotent_is_unknown_then_looked_up_and_resent_with_the_same_key(demo_agent, worker, demo_services):
    """A 5xx from a write may have committed: OUTCOME_UNKNOWN → lookup by key proves absence
    (the injected 503 answered before the service did anything) → re-send, same key → one event."""
    demo_services.fault("calendar", fault="status", status=503, method="POST")
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"))

    assert done["state"] == "OBSERVED", done
    first, second = done["attempts"]
    assert (first["failure_class"], first["commit"]) == ("transient", "unknown")
    assert second["commit"] == "committed"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert _path(events)[-5:] == ["EXECUTING", "OUTCOME_UNKNOWN", "EXECUTING", "COMMITTED", "OBSERVED"]
    [lookup] = [e["data"] for e in events if e["kind"] == "reconciliation_lookup"]
    assert lookup["committed"] is False and lookup["detail"] == {"status": 404}
    [resend] = [e for e in events if e["kind"] == "execution_started" and e["from_state"] == "OUTCOME_UNKNOWN"]
    assert resend["data"] == {"attempt": 2, "resend_same_key": True}

    log = demo_services.requests_log("calendar")
    key = remote_key_of(inv["id"])  # what the remote knows the call by: sent, looked up and re-sent
    assert [(r["method"], r["status"]) for r in log] == [("POST", 503), ("GET", 404), ("POST", 201)]
    assert unquote(log[1]["path"]).endswith(f"/calendar/events/by-key/{key}")
    assert {p["idempotency_key"] for p in _posts(demo_services, "calendar")} == {key}
    _assert_traceparents(log, inv["id"])
    assert [e["id"] for e in demo_services.calendar_events("primary")] == [done["result"]["external_resource_id"]]


def test_503_on_write_unsafe_is_unknown_and_never_resent(demo_agent, worker, demo_services):
    demo_services.fault("payments", fault="status", status=503, method="POST")
    inv = _propose(demo_agent, _unsafe_without_lookup(), PAYMENT_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])

    assert done["state"] == "OUTCOME_UNKNOWN", done
    [attempt] = done["attempts"]
    assert (attempt["failure_class"], attempt["commit"]) == ("transient", "unknown")
    assert attempt["decision"]["action"] == "reconcile" and attempt["decision"]["reason"] == "transient_may_have_committed"
    assert done["result"]["commit_status"] == "unknown" and done["error"]["code"] == "outcome_unknown"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert "retry_scheduled" not in _kinds(events) and "reconciliation_lookup" not in _kinds(events)
    assert Invocation.objects.get(pk=inv["id"]).next_attempt_at is None  # waits for a human
    _quiet_period(worker, demo_services, "payments", inv["id"], "OUTCOME_UNKNOWN")
    assert [p["status"] for p in _posts(demo_services, "payments")] == [503]
    assert demo_services.transfers("acct-123") == []  # the injected 503 answered before any work


def test_timeout_on_write_idempotent_is_reconciled_by_lookup_into_the_one_event(demo_agent, worker, demo_services):
    """docs/concepts/failures.md row 6 with a real client timeout: the service commits, then answers after the
    client gave up (3 s > 1 s attempt timeout) → OUTCOME_UNKNOWN → lookup → COMMITTED, same id."""
    _spec_copy("calendar.create_event", "calendar.create_event_fast",
               timeout_policy={"attempt_timeout_seconds": 1, "deadline_seconds": 600})
    demo_services.fault("calendar", fault="commit_then_delay", seconds=3, method="POST")
    inv = _propose(demo_agent, "calendar.create_event_fast@1", CALENDAR_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"))

    assert done["state"] == "OBSERVED", done
    [attempt] = done["attempts"]
    assert (attempt["failure_class"], attempt["commit"]) == ("timeout_unknown", "unknown")
    assert attempt["decision"]["action"] == "reconcile" and attempt["decision"]["reason"] == "unknown_outcome_lookup_by_key"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert _path(events)[-4:] == ["EXECUTING", "OUTCOME_UNKNOWN", "COMMITTED", "OBSERVED"]
    created = demo_services.calendar_events("primary")
    assert len(created) == 1
    [lookup] = [e["data"] for e in events if e["kind"] == "reconciliation_lookup"]
    assert lookup["committed"] is True and lookup["external_resource_id"] == created[0]["id"]
    assert done["result"]["external_resource_id"] == created[0]["id"]
    [committed] = [e for e in events if e["to_state"] == "COMMITTED"]
    assert committed["data"]["by"] == "lookup"
    posts = _posts(demo_services, "calendar")
    assert len(posts) == 1 and posts[0]["idempotency_key"] == remote_key_of(inv["id"])


def test_timeout_on_write_unsafe_is_reconciled_by_its_client_reference_and_pays_once(demo_agent, worker, demo_services):
    """payments.transfer sends the derived key as X-Client-Reference and declares the lookup by it
    (issue 11): the payment that committed after the client gave up is found, never re-sent."""
    _spec_copy("payments.transfer", "payments.transfer_fast",
               timeout_policy={"attempt_timeout_seconds": 1, "deadline_seconds": 600})
    demo_services.fault("payments", fault="commit_then_delay", seconds=3, method="POST")
    inv = _propose(demo_agent, "payments.transfer_fast@1", PAYMENT_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"))

    assert done["state"] == "OBSERVED", done
    [attempt] = done["attempts"]
    assert (attempt["failure_class"], attempt["commit"]) == ("timeout_unknown", "unknown")
    assert attempt["decision"]["action"] == "reconcile" and attempt["decision"]["reason"] == "unknown_outcome_unsafe"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert "retry_scheduled" not in _kinds(events)
    assert [e for e in events if e["kind"] == "outcome_unknown"][0]["data"]["reconcile"] is True
    assert _path(events)[-4:] == ["EXECUTING", "OUTCOME_UNKNOWN", "COMMITTED", "OBSERVED"]
    [transfer] = demo_services.transfers("acct-123")  # it did pay — exactly once
    assert transfer["client_reference"] == remote_key_of(inv["id"])
    assert done["result"]["external_resource_id"] == transfer["id"]
    assert len(_posts(demo_services, "payments")) == 1
    assert Invocation.objects.get(pk=inv["id"]).attempt_count == 1


def test_business_rejection_fails_before_commit_after_one_attempt(demo_agent, worker, demo_services):
    demo_services.fault("calendar", fault="business_reject", message="calendar is locked", method="POST")
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])

    assert done["state"] == "FAILED_BEFORE_COMMIT", done
    assert done["error"]["code"] == "business_rejected"
    assert done["result"]["status"] == "error" and done["result"]["commit_status"] == "not_committed"
    [attempt] = done["attempts"]
    assert (attempt["failure_class"], attempt["commit"]) == ("business_rejected", "not_committed")
    assert attempt["decision"]["action"] == "stop" and attempt["decision"]["reason"] == "business_rejected"
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert "retry_scheduled" not in _kinds(events) and "OUTCOME_UNKNOWN" not in _path(events)

    openai = _tool_message(demo_agent, inv["id"], "openai")
    content = json.loads(openai["content"])
    assert openai["tool_call_id"] == "call_1"
    assert content["ok"] is False and content["error"]["code"] == "business_rejected"
    # The remote's own words reach the model only as marked untrusted data (issue 13 item 5).
    assert "calendar is locked" in content["error"]["remote_message"] and content["untrusted_note"]
    assert content["untrusted_fields"] == ["/remote_message"]
    assert _tool_message(demo_agent, inv["id"], "anthropic")["is_error"] is True
    assert _tool_message(demo_agent, inv["id"], "mcp")["isError"] is True

    _quiet_period(worker, demo_services, "calendar", inv["id"], "FAILED_BEFORE_COMMIT")
    assert [p["status"] for p in _posts(demo_services, "calendar")] == [422]
    assert demo_services.calendar_events("primary") == []


@pytest.mark.parametrize(
    "base, copy_name, arguments, side_effect_class",
    [
        ("web.fetch", "web.fetch_unreachable", {"url": f"http://127.0.0.1:{CLOSED_PORT}/web/pages/small"}, "read_only"),
        ("calendar.create_event", "calendar.create_event_unreachable", CALENDAR_ARGS, "write_idempotent"),
        ("payments.transfer", "payments.transfer_unreachable", PAYMENT_ARGS, "write_unsafe"),
    ],
    ids=["read_only", "write_idempotent", "write_unsafe"],
)
def test_provably_never_reached_is_retried_within_budget_for_every_class(
    demo_agent, worker, demo_services, base, copy_name, arguments, side_effect_class
):
    """Connection refused: the request never left, so even write_unsafe is retried — and never
    becomes OUTCOME_UNKNOWN. The budget (maximum_attempts=2) ends it: FAILED_BEFORE_COMMIT."""
    _assert_port_closed(CLOSED_PORT)
    executor = None if base == "web.fetch" else {"url": f"http://127.0.0.1:{CLOSED_PORT}/{base.split('.')[0]}/x"}
    _spec_copy(base, copy_name, retry_policy=FAST_RETRY, executor=executor)
    if base == "web.fetch":  # a URL from the model: its grant must name the address
        make_grant(capability="web.read", subject=demo_agent.subject, scope_kind="url_prefix",
                   scope_values=[f"http://127.0.0.1:{CLOSED_PORT}/"])
    inv = _propose(demo_agent, f"{copy_name}@1", arguments)
    if side_effect_class != "read_only":
        _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])

    assert done["state"] == "FAILED_BEFORE_COMMIT", done
    assert done["error"]["code"] == "not_reached"
    commit = "not_applicable" if side_effect_class == "read_only" else "not_committed"
    assert [(a["failure_class"], a["commit"]) for a in done["attempts"]] == [("not_reached", commit)] * 2
    first, last = (a["decision"] for a in done["attempts"])
    assert first["action"] in ("retry_now", "retry_after") and first["reason"] == "not_reached_retry"
    assert first["backoff_seconds"] == 0.2 and first["delay_seconds"] <= 0.2
    assert (last["action"], last["reason"]) == ("stop", "max_attempts")
    events = _assert_attempt_trace(demo_agent, inv["id"])
    assert _kinds(events).count("retry_scheduled") == 1
    assert "OUTCOME_UNKNOWN" not in _path(events)
    assert done["result"]["commit_status"] == "not_committed"
    assert json.loads(_tool_message(demo_agent, inv["id"], "openai")["content"])["ok"] is False


# --- retry budget on the "5xx from a write_idempotent" path ------------------------------------

def test_503s_on_write_idempotent_respect_maximum_attempts(demo_agent, worker, demo_services):
    """docs/concepts/failures.md '429 / transient 5xx × write_idempotent: backoff, same key' within the ToolSpec's
    budget. With maximum_attempts=2 and two 503s queued, at most 2 POSTs may be sent; the lookup
    proves nothing was created, so the call ends FAILED_BEFORE_COMMIT (budget spent). Today the
    second attempt's own decision says stop/max_attempts, and a third POST is sent anyway."""
    _spec_copy("calendar.create_event", "calendar.create_event_budget", retry_policy=FAST_RETRY)
    demo_services.fault("calendar", fault="status", status=503, method="POST", count=2)
    inv = _propose(demo_agent, "calendar.create_event_budget@1", CALENDAR_ARGS)
    _approve(inv["id"])
    # Either it stops (right), or it keeps re-sending until the 3rd POST passes (the bug).
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"), timeout=60)
    posts = _posts(demo_services, "calendar")
    assert len(posts) <= FAST_RETRY["maximum_attempts"], [(p["status"], p["at"]) for p in posts]
    assert done["state"] == "FAILED_BEFORE_COMMIT"
    assert demo_services.calendar_events("primary") == []


# --- 2. a worker pool process killed with SIGKILL mid-attempt ----------------------------------

def test_two_recoverers_of_one_abandoned_attempt_recover_it_once(demo_agent, demo_services):
    """The deterministic interleaving of the two recovery paths the worker runs concurrently:
    both read the open attempt, then both recover it. The second must be a no-op."""
    from toolops.errors import ApplicationError

    from worker.claim import execution_claim, open_attempt
    from worker.recovery import recover_abandoned

    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])  # PREPARED; no worker runs in this test, the attempt is driven here
    invocation, attempt = execution_claim(invocation_id=inv["id"])
    Attempt.objects.filter(pk=attempt.pk).update(sent_at=attempt.started_at)  # sent, then the worker died

    def load():
        fresh = Invocation.objects.select_related("tool_spec").get(pk=inv["id"])
        return fresh, open_attempt(fresh)

    (inv_a, seen_by_task), (inv_b, seen_by_beat) = load(), load()
    assert seen_by_task is not None and seen_by_beat is not None
    recover_abandoned(invocation=inv_a, attempt=seen_by_task)
    closed_at = Attempt.objects.get(pk=attempt.pk).ended_at
    error = None
    try:
        recover_abandoned(invocation=inv_b, attempt=seen_by_beat)
    except ApplicationError as exc:  # TransitionConflict
        error = exc
    kinds = _kinds(_events(demo_agent, inv["id"]))
    assert Invocation.objects.get(pk=inv["id"]).state == "OUTCOME_UNKNOWN"
    observed = {"error": repr(error) if error else None, "abandoned_events": kinds.count("attempt_abandoned"),
                "ended_at_kept": Attempt.objects.get(pk=attempt.pk).ended_at == closed_at}
    assert observed == {"error": None, "abandoned_events": 1, "ended_at_kept": True}

def _pids_talking_to(port: int) -> set[int]:
    """PIDs owning an established TCP connection to 127.0.0.1:port (the in-flight attempt)."""
    out = subprocess.run(["ss", "-Htnp", "state", "established", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=True).stdout
    return {int(p) for p in re.findall(r"pid=(\d+)", out)}


def _kill_the_attempt(worker, demo_services, invocation_id: str, service: str) -> int:
    """Wait until the request is really in flight, then SIGKILL the pool process sending it.

    ``sent_at`` is stamped just before the request leaves, so we also wait for the demo
    service to have logged the POST (it then sits in the injected delay). Only the pool child
    holding the connection is killed: ``worker.kill_children()`` would also kill the embedded
    beat process (a child of the same parent), and with it the periodic recovery and
    reconciliation this test is about.
    """
    wait_for(lambda: Attempt.objects.filter(invocation_id=invocation_id, sent_at__isnull=False).exists(), timeout=30)
    wait_for(lambda: _posts(demo_services, service), timeout=10)
    port = int(demo_services.base.rsplit(":", 1)[1])
    children = set(worker.child_pids())
    victims = wait_for(lambda: _pids_talking_to(port) & children, timeout=5)
    assert len(victims) == 1, victims
    [pid] = victims
    os.kill(pid, signal.SIGKILL)
    # the attempt is still open: nobody recorded anything for it
    assert Attempt.objects.get(invocation_id=invocation_id, number=1).ended_at is None
    return pid


def _assert_killed_and_redelivered(worker, pid: int) -> None:
    """The main process saw the pool child die, and the same message (same task id) came back."""
    log = worker.output()
    assert re.search(rf"pid:{pid} exited with 'signal 9 \(SIGKILL\)'", log), log[-3000:]
    assert "WorkerLostError" in log
    received = re.findall(r"Task invocations\.execute\[([0-9a-f-]+)\] received", log)
    assert any(received.count(task_id) >= 2 for task_id in set(received)), received


def test_sigkill_mid_attempt_on_write_idempotent_recovers_into_exactly_one_event(demo_agent, worker, demo_services):
    demo_services.fault("calendar", fault="delay", seconds=4, method="POST")  # claim key, sleep, then commit
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    _approve(inv["id"])
    pid = _kill_the_attempt(worker, demo_services, inv["id"], "calendar")

    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"), timeout=60)
    assert done["state"] == "OBSERVED", done
    created = demo_services.calendar_events("primary")
    assert len(created) == 1  # the server finished the delayed request although its client died
    assert done["result"]["external_resource_id"] == created[0]["id"]
    posts = _posts(demo_services, "calendar")
    assert posts and {p["idempotency_key"] for p in posts} == {remote_key_of(inv["id"])}
    events = _assert_attempt_trace(demo_agent, inv["id"])
    abandoned = [e["data"] for e in events if e["kind"] == "attempt_abandoned"]
    assert abandoned == [{"attempt": 1, "sent": True}]
    assert "OUTCOME_UNKNOWN" in _path(events)
    lookups = [e["data"] for e in events if e["kind"] == "reconciliation_lookup"]
    assert lookups and lookups[-1]["committed"] is True
    first = Attempt.objects.get(invocation_id=inv["id"], number=1)
    assert first.ended_at is not None and first.commit == "unknown" and first.outcome == {"abandoned": True}
    _assert_killed_and_redelivered(worker, pid)


def test_sigkill_mid_attempt_on_write_unsafe_leaves_it_unknown_and_pays_once(demo_agent, worker, demo_services):
    demo_services.fault("payments", fault="delay", seconds=4, method="POST")
    inv = _propose(demo_agent, _unsafe_without_lookup(), PAYMENT_ARGS)
    _approve(inv["id"])
    pid = _kill_the_attempt(worker, demo_services, inv["id"], "payments")

    done = _settled(demo_agent, inv["id"], timeout=60)
    assert done["state"] == "OUTCOME_UNKNOWN", done
    wait_for(lambda: demo_services.transfers("acct-123"), timeout=10)  # the server finishes its delay
    _quiet_period(worker, demo_services, "payments", inv["id"], "OUTCOME_UNKNOWN")
    assert len(demo_services.transfers("acct-123")) == 1  # never twice paid
    assert len(_posts(demo_services, "payments")) == 1  # never re-sent
    [attempt] = Attempt.objects.filter(invocation_id=inv["id"])
    assert attempt.commit == "unknown" and attempt.outcome == {"abandoned": True}
    events = _events(demo_agent, inv["id"])
    assert [e["data"] for e in events if e["kind"] == "attempt_abandoned"] == [{"attempt": 1, "sent": True}]
    assert "reconciliation_lookup" not in _kinds(events)
    assert Invocation.objects.get(pk=inv["id"]).next_attempt_at is None
    _assert_killed_and_redelivered(worker, pid)
