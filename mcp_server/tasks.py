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

**2025-11-25 session clients** get the same task in that revision's shape (``legacy_*`` below): the
server advertises ``capabilities.tasks`` (``cancel``, ``requests.tools.call``) in ``initialize``,
lists every tool with ``execution.taskSupport: "optional"``, answers a ``tools/call`` that carries
``params.task`` with ``CreateTaskResult`` (``{"task": {...}}``) and serves ``tasks/get``,
``tasks/result`` (the recorded tool message once final, with the related-task ``_meta``) and
``tasks/cancel`` (the task as it stands after the cancel; a final task cannot be cancelled).

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
from mcp_types import _v2025_11_25 as v2025
from mcp_types import methods as _methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from specs_app.models import Subject
from toolops.errors import Conflict, NotFound
from toolops.runtime.states import TERMINAL, State

from invocations_app import selectors
from invocations_app.models import Confirmation, Invocation
from invocations_app.tool_messages import answering_invocation, tool_message
from invocations_app.cancellation import invocation_cancel

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"  # 2025-11-25
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


# --- 2025-11-25: tasks as a core (experimental) capability of the session ----------------------

# The SDK sieves a 2025-11-25 ``tools/call`` result through CallToolResult alone (its surface
# table, a read-only mapping), which rejects a task-augmented call's CreateTaskResult — that
# revision's other answer. Its serializer is looked up on the module at call time, so it is
# wrapped to validate that one entry against both shapes; every other entry is the SDK's.
_SURFACE_WITH_TASKS = {**_methods.SERVER_RESULTS,
                       ("tools/call", "2025-11-25"): v2025.CallToolResult | v2025.CreateTaskResult}


def _serialize_with_tasks(serialize):
    def serialize_server_result(method, version, data, *, surface=_methods.SERVER_RESULTS):
        return serialize(method, version, data, surface=_SURFACE_WITH_TASKS if surface is _methods.SERVER_RESULTS else surface)

    return serialize_server_result


if not hasattr(_methods.serialize_server_result, "toolops_tasks"):  # once, however often imported
    _methods.serialize_server_result = _serialize_with_tasks(_methods.serialize_server_result)
    _methods.serialize_server_result.toolops_tasks = True
# Call records are kept far longer than this; a task is readable at least this long (ms).
LEGACY_TASK_TTL_MS = 30 * 24 * 3600 * 1000

LEGACY_SERVER_CAPABILITY = types.ServerTasksCapability(
    cancel=types.TasksCancelCapability(),
    requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
)


def is_legacy_protocol(protocol_version: str | None) -> bool:
    """A handshake-era (2025-11-25 or older) session, where tasks are the core capability."""
    return protocol_version not in MODERN_PROTOCOL_VERSIONS


def legacy_task(invocation: Invocation) -> dict:
    """The 2025-11-25 ``Task`` for a call: the same status mapping, that revision's field names."""
    task = _task(invocation)
    legacy = {"taskId": task["taskId"], "status": task["status"], "createdAt": task["createdAt"],
              "lastUpdatedAt": task["lastUpdatedAt"], "ttl": LEGACY_TASK_TTL_MS, "pollInterval": POLL_INTERVAL_MS}
    if task.get("statusMessage"):
        legacy["statusMessage"] = task["statusMessage"]
    return legacy


def legacy_task_created(*, subject: Subject, invocation_id) -> dict:
    return {"task": legacy_task(_invocation(subject, invocation_id))}


def legacy_task_get(*, subject: Subject, task_id: str) -> dict:
    return legacy_task(_invocation(subject, task_id))


def legacy_task_payload(*, subject: Subject, task_id: str) -> dict | None:
    """``tasks/result``: the recorded MCP tool message of a final call (a cancelled one included,
    as ``isError``), tagged with its task; ``None`` while it is still working."""
    invocation = answering_invocation(_invocation(subject, task_id))
    if invocation.state not in TERMINAL:
        return None
    result = json.loads(tool_message(invocation=invocation, fmt="mcp"))
    result.setdefault("_meta", {})[RELATED_TASK_META_KEY] = {"taskId": str(task_id)}
    return result


def legacy_task_cancel(*, subject: Subject, task_id: str) -> dict:
    """Cancel as ``invocation_cancel`` does (honest about the commit boundary) and answer the task
    as it now stands: ``cancelled`` if nothing was sent, else still ``working`` (an attempt in
    flight ends cancelled only if nothing committed) with the outcome in ``_meta``."""
    invocation = _invocation(subject, task_id)
    if invocation.state in TERMINAL:
        status = legacy_task(invocation)["status"]
        raise MCPError(types.INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{status}'")
    outcome = task_cancel(subject=subject, task_id=task_id)
    return {**legacy_task(_invocation(subject, task_id)), **outcome}
