"""Human confirmation as an MCP task (the ``io.modelcontextprotocol/tasks`` extension, 2026-07-28).

The SDK ships no tasks implementation (its task types are 2025-11-25 leftovers), so the
extension is added here through the low-level server's hooks: it is advertised under
``capabilities.extensions``, ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` are registered
as request handlers, and ``tools/call`` answers a client that declared the extension on that
request with a ``CreateTaskResult`` (``resultType: "task"``) instead of waiting.

A task *is* the invocation: task id = invocation id, durable from admission on (the row is
committed before the answer leaves), readable from any MCP server process, scoped to the
subject. Status mapping:

===============================================  ============  ==============================
invocation                                       task status   carried
===============================================  ============  ==============================
waiting for a person, queued, executing          working       ``statusMessage`` says which
OUTCOME_UNKNOWN                                  working       "may have happened; checking"
CANCELLED_BEFORE_COMMIT (incl. expired approval)  cancelled     ``statusMessage``: why
any other terminal state (a denial included)     completed     ``result``: the recorded MCP
                                                               tool message (``isError`` on
                                                               a failure or denial)
===============================================  ============  ==============================

``tasks/cancel`` is ``invocation_cancel``, honest about the commit boundary: the empty
acknowledgement carries ``_meta["dev.toolops/cancel"]`` = ``cancelled`` (nothing was sent),
``cancel_requested`` (an attempt is in flight: it ends cancelled only if nothing committed) or
``not_cancellable`` (the effect stands).
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from specs_app.models import Subject
from toolops.errors import Conflict, NotFound
from toolops.runtime.states import TERMINAL, State

from .. import selectors
from ..models import Confirmation, Invocation
from ..tool_messages import answering_invocation, tool_message
from ..cancellation import invocation_cancel

EXTENSION = "io.modelcontextprotocol/tasks"
CANCEL_META_KEY = "dev.toolops/cancel"
POLL_INTERVAL_MS = 1000


class TaskIdParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any] | None = None


def client_accepts_tasks(meta: dict) -> bool:
    capabilities = meta.get(types.CLIENT_CAPABILITIES_META_KEY) or {}
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


def require_tasks_capability(meta: dict) -> None:
    if not client_accepts_tasks(meta):
        raise MCPError(types.MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                       data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def task_created(*, subject: Subject, invocation_id) -> dict:
    """The ``CreateTaskResult`` for a call (seeded with its current state)."""
    return {**_task(_invocation(subject, invocation_id)), "resultType": "task"}


def task_get(*, subject: Subject, task_id: str) -> dict:
    return _task(_invocation(subject, task_id))


def task_cancel(*, subject: Subject, task_id: str) -> dict:
    invocation = _invocation(subject, task_id)
    try:
        invocation = invocation_cancel(invocation=invocation, actor=f"subject:{subject.pk}",
                                       reason="cancelled by the MCP client (tasks/cancel)")
        ended = invocation.state == State.CANCELLED_BEFORE_COMMIT or (
            invocation.state == State.FAILED_BEFORE_COMMIT and invocation.error_code == "cancelled")  # between attempts
        outcome = "cancelled" if ended else "cancel_requested"
    except Conflict:
        outcome = "not_cancellable"
    return {"_meta": {CANCEL_META_KEY: {"outcome": outcome, "state": invocation.state}}}


def _invocation(subject: Subject, task_id) -> Invocation:
    try:
        return selectors.invocation_get(subject=subject, invocation_id=task_id)
    except NotFound:
        raise MCPError(types.INVALID_PARAMS, "Failed to retrieve task: Task not found") from None


def _task(invocation: Invocation) -> dict:
    task: dict[str, Any] = {
        "taskId": str(invocation.pk), "createdAt": _iso(invocation.created_at),
        "lastUpdatedAt": _iso(invocation.updated_at), "ttlMs": None, "pollIntervalMs": POLL_INTERVAL_MS,
    }
    invocation = answering_invocation(invocation)  # an approver's edit carries on the model's call
    if invocation.state == State.CANCELLED_BEFORE_COMMIT:
        return {**task, "status": "cancelled", "statusMessage": invocation.error_message or "cancelled before the commit boundary"}
    if invocation.state in TERMINAL:
        return {**task, "status": "completed", "result": json.loads(tool_message(invocation=invocation, fmt="mcp"))}
    return {**task, "status": "working", "statusMessage": _working_message(invocation)}


def _working_message(invocation: Invocation) -> str:
    if invocation.state == State.OUTCOME_UNKNOWN:
        return "the call may have happened; a person is checking (do not retry it)"
    pending = next((c for c in invocation.confirmations.all() if c.state == Confirmation.Status.PENDING), None)
    if pending is not None:
        return f"waiting for a person to confirm it (until {_iso(pending.expires_at)})"
    return "executing" if invocation.state == State.EXECUTING else "queued for execution"


def _iso(value: datetime) -> str:
    return value.isoformat()
