"""Idempotency keys (docs/concepts/execution.md), cancellation (docs/concepts/lifecycle.md) and results
back to the model (docs/concepts/results.md) — rows 7 to 9 of the failure table (docs/concepts/failures.md)
— through the REST API, against real parts: PostgreSQL, a Celery worker on Redis, the demo services
over HTTP. Nothing is mocked.
"""
from __future__ import annotations

import base64
import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from invocations_app.confirmations import confirmation_approve, confirmations_expire_due
from invocations_app.models import (
    Attempt, Confirmation, Event, IdempotencyRecord, Invocation, Proposal, ResultBody, ToolMessage,
)
from specs_app.models import ToolSpec
from tests.builders import Agent, make_demo_spec, make_grant

from tests.integration.conftest import remote_key_of, wait_for

# --- shared helpers ---------------------------------------------------------------------------

TOKEN = "tko_integration_token"  # the token the demo_agent fixture installs
CAL = "calendar.create_event@1"
WEB = "web.fetch@1"
CAL_ARGS = {"calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
# The same meaning in other bytes: other key order and whitespace, so the same digest.
CAL_ARGS_OTHER_BYTES = '{ "duration_minutes" : 10,\n  "start":"2026-07-20T09:00:00+08:00", "title":"带护照", "calendar_id":"primary" }'
FORMATS = ("openai", "anthropic", "mcp")
INJECTION_MARK = "Ignore previous instructions"
TERMINAL_WAIT = ("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN", "CANCELLED_BEFORE_COMMIT", "FAILED_AFTER_COMMIT")


def _model_call(agent, tools) -> str:
    run = agent.run(timezone="Asia/Shanghai")
    return agent.model_call(run["id"], tools=list(tools))["id"]


def _post(agent, call_id: str, proposal_id: str, tool: str, arguments, *, key: str | None = None):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else None
    return agent.post(f"/api/v1/model-calls/{call_id}/proposals",
                      {"proposal_id": proposal_id, "name": tool, "arguments": raw}, headers=headers)


def _created(resp) -> dict:
    assert resp.status_code == 201, resp.content
    return resp.json()


def _problem(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.content
    assert resp["Content-Type"] == "application/problem+json"
    body = resp.json()
    assert body["code"] == code, body
    return body


def _approve(invocation_id: str) -> None:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="looks right")


def _settled(agent, invocation_id: str, states=TERMINAL_WAIT, timeout: float = 40) -> dict:
    def done():
        inv = agent.get(f"/api/v1/invocations/{invocation_id}").json()
        return inv if inv["state"] in states else None

    return wait_for(done, timeout=timeout)


def _events(agent, invocation_id: str) -> list[dict]:
    resp = agent.get(f"/api/v1/invocations/{invocation_id}/events")
    assert resp.status_code == 200, resp.content
    return resp.json()


def _tool_message(agent, invocation_id: str, fmt: str) -> tuple[bytes, dict]:
    resp = agent.get(f"/api/v1/invocations/{invocation_id}/tool-message", format=fmt)
    assert resp.status_code == 200, resp.content
    return resp.content, json.loads(resp.content)


def _payload(fmt: str, message: dict) -> dict:
    """The model-facing payload inside one ecosystem's tool message."""
    if fmt == "openai":
        return json.loads(message["content"])
    if fmt == "anthropic":
        [block] = message["content"]
        return json.loads(block["text"])
    [block] = message["content"]
    assert json.loads(block["text"]) == message["structuredContent"]
    return message["structuredContent"]


def _calendar_posts(demo_services) -> list[dict]:
    return [r for r in demo_services.requests_log("calendar") if r["method"] == "POST"]


# Official SDK types (test-only dependencies; the runtime emits plain dicts). OpenAI's and
# Anthropic's params are TypedDicts that ignore unknown keys, so the keys are compared too;
# MCP's pydantic models ignore unknown keys, so the model is dumped back and compared.
def _check_typed_dict(td: type, value: dict, nested: dict | None = None) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(td).validate_python(value)
    allowed = td.__required_keys__ | td.__optional_keys__
    assert set(value) <= allowed, f"{td.__name__} does not declare {sorted(set(value) - allowed)}"
    assert td.__required_keys__ <= set(value)
    for key, item_td in (nested or {}).items():
        for item in value[key] if isinstance(value[key], list) else [value[key]]:
            _check_typed_dict(item_td, item)


def _check_sdk(fmt: str, message: dict, *, is_error: bool) -> None:
    if fmt == "openai":
        from openai.types.chat import ChatCompletionToolMessageParam

        _check_typed_dict(ChatCompletionToolMessageParam, message)
    elif fmt == "anthropic":
        from anthropic.types import TextBlockParam, ToolResultBlockParam

        _check_typed_dict(ToolResultBlockParam, message, nested={"content": TextBlockParam})
        assert message["is_error"] is is_error
    else:
        from mcp import types as mcp_types

        parsed = mcp_types.CallToolResult.model_validate(message)
        assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == message
        assert parsed.is_error is is_error


def _strings(payload):
    """Every string (keys too) of a tool message's payload, with whether the message's one mark
    names it: it sits at or under one of ``untrusted_fields`` in ``result`` (or ``error``)."""
    marked = [tuple(f.split("/")[1:]) if f else () for f in payload.get("untrusted_fields", [])]

    def walk(node, path, within):
        inside = within is not None and any(path[len(within):len(within) + len(m)] == m for m in marked) \
            if within is not None else False
        if isinstance(node, str):
            yield node, inside
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, path + (str(i),), within)
        elif isinstance(node, dict):
            for key, value in node.items():
                yield key, False
                starts = within if within is not None else (path + (key,) if path == () and key in ("result", "error") else None)
                yield from walk(value, path + (key,), starts)

    yield from walk(payload, (), None)


# ============================================================================================
# 1. Idempotency-key contract (docs/concepts/execution.md, failure row 7)
# ============================================================================================

@pytest.mark.django_db(transaction=True)
def test_a_new_proposal_with_a_used_key_replays_the_observed_call(demo_agent, worker, demo_services):
    key = "req-42:create-event:1"
    call = _model_call(demo_agent, [CAL])
    first = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key=key))
    _approve(first["id"])
    done = _settled(demo_agent, first["id"])
    assert done["state"] == "OBSERVED" and done["result"]["commit_status"] == "committed"
    event_id = done["result"]["external_resource_id"]

    # A new proposal (new tool_call id), same meaning in other bytes, same key: the original.
    replay = _post(demo_agent, call, "call_2", CAL, CAL_ARGS_OTHER_BYTES, key=key)
    assert replay.status_code == 200, replay.content
    body = replay.json()
    assert body["id"] == first["id"] and body["state"] == "OBSERVED"
    assert body["result"]["external_resource_id"] == event_id
    assert body["result"] == done["result"]

    # The same from a later run of the agent (another run and model call, same tenant and key).
    later_call = _model_call(demo_agent, [CAL])
    again = _post(demo_agent, later_call, "call_1", CAL, CAL_ARGS, key=key)
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    # Re-posting the recorded replay proposal itself is answered the same way.
    repost = _post(demo_agent, call, "call_2", CAL, CAL_ARGS_OTHER_BYTES, key=key)
    assert repost.status_code == 200 and repost.json()["id"] == first["id"]

    worker.wait_for_beat("invocations.enqueue_due")  # a beat cycle: nothing may pick the replays up
    assert Invocation.objects.filter(idempotency_key=key).count() == 1
    assert Attempt.objects.filter(invocation_id=first["id"]).count() == 1
    assert [e["id"] for e in demo_services.calendar_events("primary")] == [event_id]
    assert len(_calendar_posts(demo_services)) == 1

    # The replays are recorded, with their raw bytes, pointing at the original.
    replays = Proposal.objects.filter(replay_of_id=first["id"]).order_by("received_at")
    assert [(p.proposal_id, str(p.model_call_id)) for p in replays] == [("call_2", call), ("call_1", later_call)]
    assert bytes(replays[0].arguments_bytes) == CAL_ARGS_OTHER_BYTES.encode("utf-8")
    assert bytes(replays[1].arguments_bytes) == json.dumps(CAL_ARGS, ensure_ascii=False).encode("utf-8")
    assert not Invocation.objects.filter(proposal__in=replays).exists()


@pytest.mark.django_db(transaction=True)
def test_a_key_still_in_progress_is_reported_and_not_executed_twice(demo_agent, settings, demo_services):
    settings.TOOLOPS_DEMO_SERVICES_URL = demo_services.base
    demo_services.reset()
    key = "req-43:in-progress"
    call = _model_call(demo_agent, [CAL])
    first = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key=key))
    assert first["state"] == "AUTHORIZED" and first["confirmation"]["state"] == "pending"

    body = _problem(_post(demo_agent, call, "call_2", CAL, CAL_ARGS, key=key), 409, "idempotency_key_in_use")
    assert body["invocation_id"] == first["id"] and body["state"] == "AUTHORIZED"

    # Approved and PREPARED (no worker yet): still in progress.
    _approve(first["id"])
    body = _problem(_post(demo_agent, call, "call_3", CAL, CAL_ARGS_OTHER_BYTES, key=key), 409, "idempotency_key_in_use")
    assert body["invocation_id"] == first["id"] and body["state"] == "PREPARED"

    assert Invocation.objects.filter(idempotency_key=key).count() == 1
    assert Confirmation.objects.filter(invocation__idempotency_key=key).count() == 1
    assert set(Proposal.objects.filter(replay_of_id=first["id"]).values_list("proposal_id", flat=True)) == {"call_2", "call_3"}
    assert _calendar_posts(demo_services) == []


@pytest.mark.django_db(transaction=True)
def test_a_key_reused_with_other_arguments_is_rejected(demo_agent):
    key = "req-44:reuse"
    call = _model_call(demo_agent, [CAL])
    first = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key=key))
    other = {**CAL_ARGS, "duration_minutes": 20}
    body = _problem(_post(demo_agent, call, "call_2", CAL, other, key=key), 422, "idempotency_key_reused")
    assert body["invocation_id"] == first["id"]
    # The same from another run: the scope is (tenant, name@version, key), not the run.
    later = _model_call(demo_agent, [CAL])
    _problem(_post(demo_agent, later, "call_1", CAL, {**CAL_ARGS, "title": "另一个"}, key=key), 422, "idempotency_key_reused")

    assert Invocation.objects.filter(idempotency_key=key).count() == 1
    record = IdempotencyRecord.objects.get(key=key)
    assert record.digest == first["digest"] and str(record.invocation_id) == first["id"]
    rejected = Proposal.objects.get(model_call_id=call, proposal_id="call_2")
    assert bytes(rejected.arguments_bytes) == json.dumps(other, ensure_ascii=False).encode("utf-8")


@pytest.mark.django_db(transaction=True)
def test_an_expired_key_follows_the_toolspec_policy(demo_agent):
    """`reject` (the default): 422 idempotency_key_expired. `new_call`: a new invocation."""
    new_call_spec = make_demo_spec(name="calendar.create_event", copy_as="calendar.create_event2", expired_key_policy="new_call")
    assert ToolSpec.objects.get(name="calendar.create_event", version=1).expired_key_policy == "reject"
    key = "req-45:expiring"
    call = _model_call(demo_agent, [CAL, new_call_spec.ref])

    rejecting = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key=key))
    taking_over = _created(_post(demo_agent, call, "call_2", new_call_spec.ref, CAL_ARGS, key=key))
    assert taking_over["state"] == "AUTHORIZED"  # same key, other tool: another scope
    # Before expiry both refuse a second use.
    _problem(_post(demo_agent, call, "call_3", CAL, CAL_ARGS, key=key), 409, "idempotency_key_in_use")
    _problem(_post(demo_agent, call, "call_4", new_call_spec.ref, CAL_ARGS, key=key), 409, "idempotency_key_in_use")

    past = timezone.now() - timedelta(seconds=1)
    assert IdempotencyRecord.objects.filter(key=key).update(expires_at=past) == 2

    body = _problem(_post(demo_agent, call, "call_5", CAL, CAL_ARGS, key=key), 422, "idempotency_key_expired")
    assert body["invocation_id"] == rejecting["id"]
    assert Invocation.objects.filter(idempotency_key=key, tool_spec__name="calendar.create_event").count() == 1

    fresh = _created(_post(demo_agent, call, "call_6", new_call_spec.ref, CAL_ARGS, key=key))
    assert fresh["id"] != taking_over["id"] and fresh["idempotency_key"] == key
    record = IdempotencyRecord.objects.get(key=key, tool_ref=new_call_spec.ref)
    assert str(record.invocation_id) == fresh["id"] and record.expires_at > timezone.now()
    assert record.status == "in_progress"
    # And the new binding is a binding: a further use is in progress again.
    _problem(_post(demo_agent, call, "call_7", new_call_spec.ref, CAL_ARGS, key=key), 409, "idempotency_key_in_use")


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_posts_with_one_key_make_one_call_and_one_event(demo_agent, worker, demo_services):
    key = "req-46:stampede"
    call = _model_call(demo_agent, [CAL])
    n = 50
    barrier = threading.Barrier(n)
    answers: list = [None] * n

    def post(i: int) -> None:
        try:
            agent = Agent(APIClient(), TOKEN)
            barrier.wait(timeout=30)
            resp = _post(agent, call, f"call_{i:02d}", CAL, CAL_ARGS, key=key)
            answers[i] = (resp.status_code, resp.json())
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            answers[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not [a for a in answers if not isinstance(a, tuple)], answers

    created = [body for status, body in answers if status == 201]
    assert len(created) == 1, sorted({status for status, _ in answers})
    original = created[0]["id"]
    for status, body in answers:
        if status == 201:
            continue
        assert status in (200, 409), (status, body)
        if status == 409:
            assert body["code"] == "idempotency_key_in_use" and body["invocation_id"] == original
        else:
            assert body["id"] == original

    assert Invocation.objects.filter(idempotency_key=key).count() == 1
    assert Proposal.objects.filter(model_call_id=call).count() == n
    assert Proposal.objects.filter(model_call_id=call, replay_of_id=original).count() == n - 1
    assert Confirmation.objects.filter(invocation__idempotency_key=key).count() == 1

    _approve(original)
    done = _settled(demo_agent, original)
    assert done["state"] == "OBSERVED" and len(done["attempts"]) == 1
    events = demo_services.calendar_events("primary")
    assert [e["id"] for e in events] == [done["result"]["external_resource_id"]]
    posts = _calendar_posts(demo_services)
    assert len(posts) == 1 and posts[0]["idempotency_key"] == remote_key_of(original)
    # Once observed, the key answers with the original result.
    late = _post(demo_agent, call, "call_late", CAL, CAL_ARGS, key=key)
    assert late.status_code == 200 and late.json()["id"] == original


# ============================================================================================
# 2. Cancellation (docs/concepts/lifecycle.md, failure row 9)
# ============================================================================================

@pytest.mark.django_db(transaction=True)
def test_cancel_before_the_boundary_prevents_the_call(demo_agent, settings, demo_services):
    """Pending confirmation, and PREPARED with no worker: CANCELLED_BEFORE_COMMIT, nothing sent.

    The execution task is then run in this process (as a late delivery would): it must refuse."""
    from worker.tasks import invocation_execute_task

    settings.TOOLOPS_DEMO_SERVICES_URL = demo_services.base
    demo_services.reset()
    call = _model_call(demo_agent, [CAL])

    pending = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key="req-47:a"))
    resp = demo_agent.post(f"/api/v1/invocations/{pending['id']}/cancel", {"reason": "user changed their mind"})
    assert resp.status_code == 200, resp.content
    assert resp.json()["state"] == "CANCELLED_BEFORE_COMMIT" and resp.json()["error"]["code"] == "cancelled"

    prepared = _created(_post(demo_agent, call, "call_2", CAL, {**CAL_ARGS, "title": "第二个"}, key="req-47:b"))
    _approve(prepared["id"])
    assert Invocation.objects.get(pk=prepared["id"]).state == "PREPARED"
    resp = demo_agent.post(f"/api/v1/invocations/{prepared['id']}/cancel", {})
    assert resp.status_code == 200 and resp.json()["state"] == "CANCELLED_BEFORE_COMMIT"

    for inv in (pending, prepared):
        assert invocation_execute_task(inv["id"]) == "nothing_to_do"
        after = demo_agent.get(f"/api/v1/invocations/{inv['id']}").json()
        assert after["state"] == "CANCELLED_BEFORE_COMMIT" and after["attempts"] == []
        assert [e["kind"] for e in _events(demo_agent, inv["id"])][-1] == "cancelled"
        # A cancelled call reports itself to the model as an error, not committed.
        raw, message = _tool_message(demo_agent, inv["id"], "openai")
        payload = _payload("openai", message)
        assert payload["ok"] is False and payload["error"]["code"] == "cancelled"
        assert payload["commit_status"] == "not_committed"
    # Nothing is left to approve: the cancel closed the waiting confirmation.
    assert not Confirmation.objects.filter(invocation_id=pending["id"], state="pending").exists()
    assert Invocation.objects.get(pk=pending["id"]).state == "CANCELLED_BEFORE_COMMIT"
    assert demo_services.requests_log("calendar") == []
    assert demo_services.calendar_events("primary") == []


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_call_awaiting_confirmation_closes_its_confirmation(demo_agent):
    call = _model_call(demo_agent, [CAL])
    cancelled = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key="req-48:a"))
    waiting = _created(_post(demo_agent, call, "call_2", CAL, {**CAL_ARGS, "title": "还在等"}, key="req-48:b"))
    assert demo_agent.post(f"/api/v1/invocations/{cancelled['id']}/cancel", {}).status_code == 200
    seen = demo_agent.get(f"/api/v1/invocations/{cancelled['id']}").json()
    pending_left = Confirmation.objects.filter(invocation_id=cancelled["id"], state="pending").exists()

    # Both confirmations fall due; the periodic expiry must still expire the other one.
    Confirmation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    try:
        confirmations_expire_due()
        crashed = None
    except Exception as exc:  # noqa: BLE001
        crashed = exc
    assert crashed is None, f"confirmations_expire_due raised {crashed!r}"
    assert Invocation.objects.get(pk=waiting["id"]).state == "CANCELLED_BEFORE_COMMIT"
    assert not pending_left and seen["confirmation"]["state"] != "pending"


@pytest.mark.django_db(transaction=True)
def test_cancel_during_an_in_flight_write_is_recorded_and_the_committed_effect_stands(demo_agent, worker, demo_services):
    demo_services.fault("calendar", fault="delay", seconds=3, method="POST")
    call = _model_call(demo_agent, [CAL])
    inv = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key="req-49:in-flight"))
    _approve(inv["id"])

    def in_flight():
        body = demo_agent.get(f"/api/v1/invocations/{inv['id']}").json()
        return body if body["state"] == "EXECUTING" and body["attempts"] and body["attempts"][0]["sent_at"] else None

    wait_for(in_flight, timeout=20, interval=0.05)
    resp = demo_agent.post(f"/api/v1/invocations/{inv['id']}/cancel", {"reason": "too late?"})
    assert resp.status_code == 202, resp.content  # the cancel contract: accepted, honoured only if nothing commits
    assert resp.json()["state"] == "EXECUTING" and resp.json()["cancel_requested"] is True
    assert Invocation.objects.get(pk=inv["id"]).cancel_requested_at is not None

    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED", done
    assert done["result"]["commit_status"] == "committed"  # the write committed: the effect stands
    [event] = demo_services.calendar_events("primary")
    assert done["result"]["external_resource_id"] == event["id"]
    kinds = [e["kind"] for e in _events(demo_agent, inv["id"])]
    assert "cancel_requested" in kinds
    assert kinds.index("cancel_requested") < kinds.index("committed")
    path = [e["to_state"] for e in _events(demo_agent, inv["id"])]
    assert "CANCELLED_BEFORE_COMMIT" not in path and "FAILED_BEFORE_COMMIT" not in path
    assert len(_calendar_posts(demo_services)) == 1


@pytest.mark.django_db(transaction=True)
def test_after_the_commit_cancel_is_refused_and_a_terminal_call_emits_nothing_more(demo_agent, worker, demo_services):
    call = _model_call(demo_agent, [CAL])
    inv = _created(_post(demo_agent, call, "call_1", CAL, CAL_ARGS, key="req-50:done"))
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED"

    events_before = _events(demo_agent, inv["id"])
    messages_before = {fmt: _tool_message(demo_agent, inv["id"], fmt)[0] for fmt in FORMATS}

    body = _problem(demo_agent.post(f"/api/v1/invocations/{inv['id']}/cancel", {"reason": "undo"}), 409, "not_cancellable")
    assert body["state"] == "OBSERVED"
    after = demo_agent.get(f"/api/v1/invocations/{inv['id']}").json()
    assert after["state"] == "OBSERVED" and after["result"] == done["result"]
    assert Invocation.objects.get(pk=inv["id"]).cancel_requested_at is None
    assert len(demo_services.calendar_events("primary")) == 1  # the event stays

    worker.wait_for_beat("invocations.enqueue_due", "invocations.reconcile")  # nothing acts on it again
    assert _events(demo_agent, inv["id"]) == events_before
    assert Event.objects.filter(invocation_id=inv["id"]).count() == len(events_before)
    assert {fmt: _tool_message(demo_agent, inv["id"], fmt)[0] for fmt in FORMATS} == messages_before
    assert {fmt: bytes(ToolMessage.objects.get(invocation_id=inv["id"], format=fmt).message_bytes) for fmt in FORMATS} == messages_before
    assert ToolMessage.objects.filter(invocation_id=inv["id"]).count() == 3
    assert ResultBody.objects.filter(invocation_id=inv["id"]).count() == 1
    assert Attempt.objects.filter(invocation_id=inv["id"]).count() == 1
    assert len(_calendar_posts(demo_services)) == 1


# ============================================================================================
# 3. Results back to the model (docs/concepts/results.md)
# ============================================================================================

@pytest.mark.django_db(transaction=True)
def test_a_large_page_is_truncated_and_pages_back_byte_for_byte(demo_agent, worker, demo_services):
    url = f"{demo_services.base}/web/pages/large"
    call = _model_call(demo_agent, [WEB])
    inv = _created(_post(demo_agent, call, "call_big", WEB, {"url": url}))
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED", done
    stored = ResultBody.objects.get(invocation_id=inv["id"])
    full_stored = bytes(stored.body)
    assert stored.total_bytes == len(full_stored) > 200_000

    payloads = {}
    for fmt in FORMATS:
        raw, message = _tool_message(demo_agent, inv["id"], fmt)
        assert raw == bytes(ToolMessage.objects.get(invocation_id=inv["id"], format=fmt).message_bytes)
        _check_sdk(fmt, message, is_error=False)
        payloads[fmt] = _payload(fmt, message)
        if fmt == "openai":
            assert message["tool_call_id"] == "call_big"
        if fmt == "anthropic":
            assert message["tool_use_id"] == "call_big"
    assert payloads["openai"] == payloads["anthropic"] == payloads["mcp"]
    payload = payloads["openai"]
    assert payload["ok"] is True and payload["truncated"] is True
    assert len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()) <= 2048
    result = payload["result"]
    assert result["total_bytes"] == len(full_stored) and result["next_cursor"]
    assert "/text" in payload["untrusted_fields"]  # the page's text, named once for the whole preview

    # Continue from the message's cursor, page by page.
    pieces, cursor, pages = [result["preview"].encode("utf-8")], result["next_cursor"], 0
    while cursor:
        resp = demo_agent.get(f"/api/v1/invocations/{inv['id']}/result", cursor=cursor)
        assert resp.status_code == 200, resp.content
        page = resp.json()
        chunk = base64.b64decode(page["chunk_b64"])
        assert len(chunk) == page["chunk_bytes"] <= 16384 and page["total_bytes"] == len(full_stored)
        chunk.decode("utf-8")  # every page ends on a character boundary
        pieces.append(chunk)
        cursor, pages = page["next_cursor"], pages + 1
    assert pages > 1
    assert b"".join(pieces) == full_stored

    # From the start, without the preview: the same bytes.
    pieces, cursor = [], None
    while True:
        page = demo_agent.get(f"/api/v1/invocations/{inv['id']}/result", **({"cursor": cursor} if cursor else {})).json()
        pieces.append(base64.b64decode(page["chunk_b64"]))
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert b"".join(pieces) == full_stored

    # The whole page as the service serves it, in the tool's own shape (the message marks it).
    page_text = requests.get(url, timeout=10).text
    value = json.loads(full_stored)
    assert value["text"] == page_text and value["content_type"].startswith("text/html")
    assert "/text" in payload["untrusted_fields"] and payload["untrusted_note"]

    _problem(demo_agent.get(f"/api/v1/invocations/{inv['id']}/result", cursor="not-a-cursor!"), 400, "invalid_cursor")


@pytest.mark.django_db(transaction=True)
def test_injected_instructions_come_back_only_as_marked_untrusted_data(demo_agent, worker, demo_services):
    url = f"{demo_services.base}/web/pages/injection"
    assert INJECTION_MARK in requests.get(url, timeout=10).text
    call = _model_call(demo_agent, [WEB])
    inv = _created(_post(demo_agent, call, "call_inj", WEB, {"url": url}))
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED", done

    for fmt in FORMATS:
        raw, message = _tool_message(demo_agent, inv["id"], fmt)
        _check_sdk(fmt, message, is_error=False)
        payload = _payload(fmt, message)
        assert payload["truncated"] is False  # the structure is checkable, not only a preview string
        assert "/text" in payload["untrusted_fields"] and payload["untrusted_note"]
        assert INJECTION_MARK in payload["result"]["text"]
        outside = [s for s, inside in _strings(payload) if not inside and INJECTION_MARK in s]
        assert outside == [], f"{fmt}: injected text outside the marked fields"
        # Nothing in the envelope around the payload carries it either.
        envelope = {k: v for k, v in message.items() if k not in ("content", "structuredContent")}
        assert INJECTION_MARK not in json.dumps(envelope, ensure_ascii=False)
        assert raw.count(INJECTION_MARK.encode()) == (2 if fmt == "mcp" else 1) * sum(
            s.count(INJECTION_MARK) for s, inside in _strings(payload) if inside
        )
    # The invocation is a read: nothing moved money on the page's say-so.
    assert demo_services.transfers("attacker-1") == []
    assert not Invocation.objects.filter(tool_name="payments.transfer").exists()


@pytest.mark.django_db(transaction=True)
def test_the_calendar_credential_never_leaves_the_server_side(demo_agent, worker, demo_services):
    secret = settings.TOOLOPS_TOOL_SECRETS["DEMO_CALENDAR_TOKEN"]
    assert secret and len(secret) >= 8
    call = _model_call(demo_agent, [CAL])
    created = _post(demo_agent, call, "call_1", CAL, CAL_ARGS, key="req-51:secret")
    inv = _created(created)
    _approve(inv["id"])
    done = _settled(demo_agent, inv["id"])
    assert done["state"] == "OBSERVED"

    seen: list[bytes] = [created.content]
    seen.append(demo_agent.get(f"/api/v1/invocations/{inv['id']}").content)
    seen.append(demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").content)
    seen += [_tool_message(demo_agent, inv["id"], fmt)[0] for fmt in FORMATS]
    seen.append(demo_agent.get(f"/api/v1/invocations/{inv['id']}/result").content)
    seen += [bytes(m.message_bytes) for m in ToolMessage.objects.filter(invocation_id=inv["id"])]
    seen += [bytes(b.body) for b in ResultBody.objects.filter(invocation_id=inv["id"])]
    seen.append(json.dumps([e.data for e in Event.objects.filter(invocation_id=inv["id"])], ensure_ascii=False).encode())
    seen.append(json.dumps([a.outcome for a in Attempt.objects.filter(invocation_id=inv["id"])], ensure_ascii=False).encode())
    row = Invocation.objects.get(pk=inv["id"])
    seen.append(json.dumps([row.result_value, row.error_detail, row.authorization, row.normalization_context],
                           ensure_ascii=False, default=str).encode())
    seen.append(worker.output().encode())
    leaks = [i for i, blob in enumerate(seen) if secret.encode() in blob]
    assert leaks == []
    # The demo calendar's request log records no Authorization header, so it cannot show that
    # the credential was sent; test_an_echoed_credential_... proves that against a capturing server.
    assert "authorization" not in {k.lower() for k in demo_services.requests_log("calendar")[0]}


# --- a tool that echoes its credential back ------------------------------------------------------

class _EchoServer:
    """A tool API that records each request's headers and echoes the Authorization header back."""

    def __init__(self):
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                auth = self.headers.get("Authorization", "")
                received.append({"path": self.path, "authorization": auth, "traceparent": self.headers.get("traceparent")})
                if self.path.startswith("/reject"):
                    status, body = 422, {"error": "bad_token", "message": f"token {auth} may not read this"}
                else:
                    status, body = 200, {"you_sent": auth, "text": f"hello; your token is {auth}"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo_server():
    server = _EchoServer()
    yield server
    server.close()


def _echo_spec() -> ToolSpec:
    return make_demo_spec(name="web.fetch", copy_as="web.fetch_authed", executor={
        "kind": "http", "method": "GET", "url": "{url}", "headers": {"Authorization": "secret:DEMO_CALENDAR_TOKEN"},
    })


def _run_echo(demo_agent, echo_server, path: str, proposal_id: str) -> tuple[dict, list[bytes]]:
    spec = ToolSpec.objects.filter(name="web.fetch_authed").first() or _echo_spec()
    # The demo web.read grant names only the demo pages: the echo server needs its own URL scope
    # (naming its loopback address, which the egress deny-list otherwise refuses).
    make_grant(capability="web.read", subject=demo_agent.subject, scope_kind="url_prefix",
               scope_values=[f"{echo_server.base}/"])
    call = _model_call(demo_agent, [spec.ref])
    inv = _created(_post(demo_agent, call, proposal_id, spec.ref, {"url": f"{echo_server.base}{path}"}))
    done = _settled(demo_agent, inv["id"], states=("OBSERVED", "FAILED_BEFORE_COMMIT"))
    surfaces = {
        "tool messages": b"".join(_tool_message(demo_agent, inv["id"], fmt)[0] for fmt in FORMATS),
        "invocation resource": demo_agent.get(f"/api/v1/invocations/{inv['id']}").content,
        "events resource": demo_agent.get(f"/api/v1/invocations/{inv['id']}/events").content,
        "stored Event.data": json.dumps([e.data for e in Event.objects.filter(invocation_id=inv["id"])]).encode(),
    }
    return done, surfaces


@pytest.mark.django_db(transaction=True)
def test_an_echoed_credential_is_redacted_from_the_tool_message(demo_agent, worker, echo_server):
    """The executor does send the credential; echoed back, the model never sees it."""
    secret = settings.TOOLOPS_TOOL_SECRETS["DEMO_CALENDAR_TOKEN"]
    done, surfaces = _run_echo(demo_agent, echo_server, "/ok", "call_echo")
    assert done["state"] == "OBSERVED"
    assert [r["authorization"] for r in echo_server.received] == [secret]  # it was sent, once
    assert echo_server.received[0]["traceparent"]
    for fmt in FORMATS:
        raw, message = _tool_message(demo_agent, done["id"], fmt)
        assert secret.encode() not in raw
        payload = _payload(fmt, message)
        assert payload["redactions"] >= 2 and "[REDACTED]" in json.dumps(payload["result"])
    assert secret.encode() not in bytes(ResultBody.objects.get(invocation_id=done["id"]).body)


@pytest.mark.django_db(transaction=True)
def test_an_echoed_credential_never_reaches_the_invocation_resource(demo_agent, worker, echo_server):
    secret = settings.TOOLOPS_TOOL_SECRETS["DEMO_CALENDAR_TOKEN"]
    done, surfaces = _run_echo(demo_agent, echo_server, "/ok", "call_echo")
    assert done["state"] == "OBSERVED"
    leaks = sorted(name for name, blob in surfaces.items() if secret.encode() in blob)
    assert leaks == []


@pytest.mark.django_db(transaction=True)
def test_an_echoed_credential_in_a_tool_error_never_reaches_the_record(demo_agent, worker, echo_server):
    secret = settings.TOOLOPS_TOOL_SECRETS["DEMO_CALENDAR_TOKEN"]
    done, surfaces = _run_echo(demo_agent, echo_server, "/reject", "call_reject")
    assert done["state"] == "FAILED_BEFORE_COMMIT"
    assert secret.encode() not in surfaces["tool messages"]  # the model-facing part is redacted
    leaks = sorted(name for name, blob in surfaces.items() if secret.encode() in blob)
    assert leaks == []
