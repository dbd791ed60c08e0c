"""Confirmation as a task for 2025-11-25 session clients (tasks were a core capability then).

The official SDK ``Client`` speaks 2025-11-25 but cannot receive a task from ``tools/call`` (it
validates that answer as a CallToolResult), so these tests speak the revision's wire format
directly over HTTP, as a tasks-capable client does: ``initialize`` (→ ``Mcp-Session-Id``),
``notifications/initialized``, ``tools/list``, a ``tools/call`` carrying ``params.task``, then
``tasks/get``, ``tasks/result`` and ``tasks/cancel``. Real MCP server process, Celery worker and
demo calendar service."""
from __future__ import annotations

import json

import httpx2
import pytest
from django.contrib.auth.models import User

from invocations_app.confirmations import confirmation_approve, confirmation_deny
from invocations_app.models import Confirmation, Invocation, ToolMessage
from tests.builders import make_token

from tests.mcp_server.conftest import LegacySession, modern_request

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CALENDAR = "calendar-create_event_v1"
WEATHER = "weather-get_forecast_v1"
CALENDAR_ARGS = {"calendar_id": "primary", "title": "visa", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
RELATED = "io.modelcontextprotocol/related-task"


class Session(LegacySession):
    """A 2025-11-25 session that calls tools as tasks."""

    def task_call(self, name: str = CALENDAR, arguments: dict = CALENDAR_ARGS) -> dict:
        self.result("tools/list", {})
        return self.result("tools/call", {"name": name, "arguments": arguments, "task": {"ttl": 600_000}})["task"]


@pytest.fixture
def session(mcp_server, demo_agent):
    with_session = Session(mcp_server)
    yield with_session
    with_session.http.close()


def _approver() -> User:
    return User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]


def test_the_server_offers_tasks_to_a_session_client_and_marks_every_tool(session):
    tasks = session.initialized["capabilities"]["tasks"]
    assert tasks["requests"] == {"tools": {"call": {}}} and tasks["cancel"] == {}
    tools = session.result("tools/list", {})["tools"]
    assert tools and all(t["execution"] == {"taskSupport": "optional"} for t in tools)


def test_a_task_waits_for_a_person_then_its_result_is_the_recorded_tool_message(session, mcp_server, demo_services, worker):
    task = session.task_call()
    assert task["status"] == "working" and task["pollInterval"] and task["ttl"]
    invocation = Invocation.objects.get(pk=task["taskId"])  # task id = invocation id, durable already
    waiting = Session(mcp_server).result("tasks/get", {"taskId": task["taskId"]})  # another session reads it
    assert waiting["status"] == "working" and "confirm" in waiting["statusMessage"]

    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    confirmation_approve(confirmation=confirmation, user=_approver(), digest_seen=confirmation.digest, reason="ok")

    result = session.result("tasks/result", {"taskId": task["taskId"]})  # waits until final
    assert result["_meta"].pop(RELATED) == {"taskId": task["taskId"]}
    if not result["_meta"]:
        del result["_meta"]
    recorded = json.loads(bytes(ToolMessage.objects.get(invocation=invocation, format="mcp").message_bytes))
    assert result == recorded and result["isError"] is False
    assert session.result("tasks/get", {"taskId": task["taskId"]})["status"] == "completed"
    assert len(demo_services.calendar_events("primary")) == 1


def test_a_denied_task_completes_with_is_error_and_cancel_is_honest(session, worker):
    denied = session.task_call()
    confirmation = Confirmation.objects.get(invocation_id=denied["taskId"], state="pending")
    confirmation_deny(confirmation=confirmation, user=_approver(), reason="not today")
    assert session.result("tasks/get", {"taskId": denied["taskId"]})["status"] == "completed"
    result = session.result("tasks/result", {"taskId": denied["taskId"]})
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "confirmation_denied"
    refused = session.request("tasks/cancel", {"taskId": denied["taskId"]})
    assert refused["error"]["code"] == -32602 and "already in terminal status" in refused["error"]["message"]

    pending = session.task_call(arguments={**CALENDAR_ARGS, "title": "another"})
    cancelled = session.result("tasks/cancel", {"taskId": pending["taskId"]})
    assert cancelled["status"] == "cancelled" and cancelled["taskId"] == pending["taskId"]
    assert cancelled["_meta"]["dev.toolops/cancel"]["outcome"] == "cancelled"
    assert Invocation.objects.get(pk=pending["taskId"]).state == "CANCELLED_BEFORE_COMMIT"


def test_a_read_only_call_as_a_task_runs_and_answers_through_tasks_result(session, demo_services, worker):
    task = session.task_call(name=WEATHER, arguments={"city": "Paris", "date": "2026-07-20"})
    assert task["status"] in ("working", "completed")
    result = session.result("tasks/result", {"taskId": task["taskId"]})
    assert result["isError"] is False and result["_meta"][RELATED] == {"taskId": task["taskId"]}
    assert Invocation.objects.get(pk=task["taskId"]).state == "OBSERVED"


def test_a_task_of_another_subject_is_not_found(session, mcp_server, worker):
    task = session.task_call()
    _, other_token = make_token()
    stranger = Session(mcp_server, other_token)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        answer = stranger.request(method, {"taskId": task["taskId"]})
        assert answer["error"]["code"] == -32602 and "Task not found" in answer["error"]["message"], (method, answer)
    assert Invocation.objects.get(pk=task["taskId"]).state == "AUTHORIZED"  # the stranger's cancel did nothing


def test_a_2026_client_cannot_use_the_2025_result_method(mcp_server, demo_agent):
    resp = httpx2.post(mcp_server.url, timeout=30, **modern_request("tasks/result", {"taskId": "x"}))
    assert resp.json()["error"]["code"] == -32601
