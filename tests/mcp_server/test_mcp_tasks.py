"""Confirmation as an MCP task (io.modelcontextprotocol/tasks, 2026-07-28). The official SDK
Client has no tasks implementation: the test declares the extension and claims its
``resultType: "task"`` through the SDK's ClientExtension hook, and sends ``tasks/get`` /
``tasks/cancel`` as typed requests through the client's session (same transport, same auth)."""
from __future__ import annotations

import json
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from django.contrib.auth.models import User
from mcp.client.extension import ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError

from invocations_app.confirmations import confirmation_approve, confirmation_deny
from invocations_app.models import Confirmation, Invocation, ToolMessage

from tests.mcp_server.conftest import mcp_client

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CALENDAR = "calendar-create_event_v1"
CALENDAR_ARGS = {"calendar_id": "primary", "title": "passport", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}


class TaskHandle(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None


class DetailedTask(types.Result):
    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None


class TaskParams(types.RequestParams):
    task_id: str


class TasksGet(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class TasksCancel(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


async def _never_resolved(handle, ctx):
    raise AssertionError("these tests drive the task by hand")


class Tasks(ClientExtension):
    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_never_resolved)]


def tasks_client(server):
    return mcp_client(server, mode="2026-07-28", extensions=[Tasks()])


async def _start(server) -> TaskHandle:
    async with tasks_client(server) as client:
        await client.list_tools()
        return await client.session.call_tool(CALENDAR, CALENDAR_ARGS, allow_claimed=True)


async def _get(server, task_id: str) -> DetailedTask:
    async with tasks_client(server) as client:  # a new connection each time: the task is durable
        return await client.session.send_request(TasksGet(params=TaskParams(task_id=task_id)), DetailedTask)


def _approver() -> User:
    return User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]


def test_a_tasks_client_gets_a_task_that_completes_after_approval(mcp_server, demo_agent, demo_services, worker):
    handle = anyio.run(_start, mcp_server)
    assert isinstance(handle, TaskHandle) and handle.status == "working"
    invocation = Invocation.objects.get(pk=handle.task_id)  # task id = invocation id, durable already
    waiting = anyio.run(_get, mcp_server, handle.task_id)
    assert waiting.status == "working" and "confirm" in waiting.status_message

    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    confirmation_approve(confirmation=confirmation, user=_approver(), digest_seen=confirmation.digest, reason="ok")

    async def until_done():
        for _ in range(300):
            task = await _get(mcp_server, handle.task_id)
            if task.status != "working":
                return task
            await anyio.sleep(0.1)
        raise AssertionError("the task did not complete")

    done = anyio.run(until_done)
    assert done.status == "completed"
    recorded = bytes(ToolMessage.objects.get(invocation=invocation, format="mcp").message_bytes)
    assert done.result == json.loads(recorded)
    assert done.result["isError"] is False
    assert len(demo_services.calendar_events("primary")) == 1


def test_a_denied_task_completes_with_is_error_and_cancel_is_honest(mcp_server, demo_agent, worker):
    denied = anyio.run(_start, mcp_server)
    confirmation = Confirmation.objects.get(invocation_id=denied.task_id, state="pending")
    confirmation_deny(confirmation=confirmation, user=_approver(), reason="not today")
    task = anyio.run(_get, mcp_server, denied.task_id)
    assert task.status == "completed" and task.result["isError"] is True
    assert task.result["structuredContent"]["error"]["code"] == "confirmation_denied"

    async def cancel(task_id):
        async with tasks_client(mcp_server) as client:
            return await client.session.send_request(TasksCancel(params=TaskParams(task_id=task_id)), types.Result)

    settled = anyio.run(cancel, denied.task_id)  # already final: the answer says so
    assert settled.meta["dev.toolops/cancel"]["outcome"] == "not_cancellable"

    pending = anyio.run(_start_other, mcp_server)
    acked = anyio.run(cancel, pending.task_id)
    assert acked.meta["dev.toolops/cancel"] == {"outcome": "cancelled", "state": "CANCELLED_BEFORE_COMMIT"}
    assert anyio.run(_get, mcp_server, pending.task_id).status == "cancelled"


async def _start_other(server) -> TaskHandle:
    async with tasks_client(server) as client:
        await client.list_tools()
        return await client.session.call_tool(CALENDAR, {**CALENDAR_ARGS, "title": "another"}, allow_claimed=True)


def test_tasks_methods_need_the_declared_extension(mcp_server, demo_agent):
    handle = anyio.run(_start, mcp_server)

    async def plain_get():
        async with mcp_client(mcp_server, mode="2026-07-28") as client:
            try:
                return await client.session.send_request(TasksGet(params=TaskParams(task_id=handle.task_id)), DetailedTask)
            except MCPError as exc:
                return exc

    refused = anyio.run(plain_get)
    assert isinstance(refused, MCPError) and refused.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
