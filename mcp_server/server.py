"""The MCP server: the official SDK's low-level ``Server`` over streamable HTTP, as an ASGI app.

The SDK serves both protocol generations on one endpoint: 2025-11-25 clients (``initialize``
handshake, ``Mcp-Session-Id`` sessions) and 2026-07-28 clients (self-contained requests). It
also does the transport's checks: Host/Origin (DNS rebinding) from ``ALLOWED_HOSTS``, the body
cap ``TOOLOPS_MCP_MAX_BODY_BYTES`` (413 before parsing), and bearer auth (401 with
``WWW-Authenticate … resource_metadata=`` and the RFC 9728 document at
``/.well-known/oauth-protected-resource/<path>``).

One thing the SDK cannot give a handler is the request's raw bytes: it parses the body first.
``RawBodyCapture`` tees the body as the SDK reads it into the ASGI scope, and the ``tools/call``
handler cuts ``params.arguments`` out of it (``toolops.model_io.jsonrpc_raw``). Both protocol
generations carry exactly one JSON-RPC message per POST, so the body is that call's.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from toolops.model_io.jsonrpc_raw import RawJSONError, member_bytes

from mcp_server.calls import (
    STATUS_TOOL, STATUS_TOOL_NAMES, McpRequest, mcp_call_poll, mcp_call_still_running, mcp_status, mcp_tool_call, mcp_tools_list,
)
from mcp_server.db import in_db_thread, install_db_executor
from mcp_server.elicitation import (
    client_accepts_url_elicitation, confirmation_elicitation, confirmation_state_redeem, confirmation_state_seal,
)
from mcp_server.errors import ErrorsAsJsonRpc
from mcp_server.identity import ApiTokenVerifier, request_oauth_client, request_subject
from mcp_server.operations import Probes, RequestMetrics
from mcp_server.rate_limit import TokenRateLimit
from mcp_server.tasks import EXTENSION as TASKS_EXTENSION
from mcp_server.tasks import (
    LEGACY_SERVER_CAPABILITY, TaskIdParams, TaskUpdateParams, client_accepts_tasks, is_legacy_protocol, legacy_task_cancel,
    legacy_task_created, legacy_task_get, legacy_task_payload, require_tasks_capability, task_cancel, task_created,
    task_get,
)
from mcp_server.wakeups import FALLBACK_SECONDS, WAKEUPS

RAW_BODY_KEY = "toolops.raw_body"
SESSION_HEADER = "mcp-session-id"
# Without the wake-up listener, polling a settling call (one indexed one-column read): start
# fast, as a read-only call settles in a few ms, and back off slowly to this.
_POLL_FIRST, _POLL_GROWTH, _POLL_MAX = 0.001, 1.2, 0.02


class RawBodyCapture:
    """Keep the bytes of each POST body, as the inner app reads them, in ``scope[RAW_BODY_KEY]``."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        scope[RAW_BODY_KEY] = chunks

        async def tee() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        await self.app(scope, tee, send)


def _request(ctx: ServerRequestContext[Any, Any]) -> McpRequest:
    http = ctx.request
    params = ctx.params or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    return McpRequest(
        subject=request_subject(http), session_id=http.headers.get(SESSION_HEADER), request_id=ctx.request_id,
        protocol_version=ctx.protocol_version, meta=dict(meta) if isinstance(meta, dict) else {},
        oauth_client=request_oauth_client(http),
    )


def _arguments_bytes(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> bytes:
    """The exact bytes of ``params.arguments`` as they arrived; ``{}`` when the member is absent
    (MCP lets a call without arguments omit it)."""
    body = b"".join(ctx.request.scope.get(RAW_BODY_KEY) or ())
    try:
        raw = member_bytes(body, ("params", "arguments"))
    except RawJSONError:
        raw = None
    return b"{}" if raw is None else raw


async def on_list_tools(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    tools = await in_db_thread(mcp_tools_list, request=_request(ctx))
    if is_legacy_protocol(ctx.protocol_version):  # 2025-11-25: every call may run as a task
        tools = [{**t, "execution": {"taskSupport": "optional"}} for t in tools]
    return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])


async def on_call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams,
) -> types.CallToolResult | types.InputRequiredResult | dict:
    """A call; how a call that waits for a person is answered depends on what the client
    declared on this request: the tasks extension → a task; URL elicitation → an input-required
    answer; neither → the plain pending_confirmation result."""
    request = _request(ctx)
    if params.name in STATUS_TOOL_NAMES:
        result = await in_db_thread(mcp_status, subject=request.subject, arguments=params.arguments)
        return types.CallToolResult.model_validate(result)
    if params.request_state is not None:
        return await _confirmation_retry(request, params)
    with _Armed() as armed:
        outcome = await in_db_thread(mcp_tool_call, request=request, name=params.name, arguments_bytes=_arguments_bytes(ctx, params),
                                     arguments=params.arguments, headers=ctx.request.headers, arm=armed)
        if params.task is not None and outcome.invocation_id is not None and is_legacy_protocol(request.protocol_version):
            # 2025-11-25 task-augmented call: the task (the durable invocation) at once, whatever its state.
            return await in_db_thread(legacy_task_created, subject=request.subject, invocation_id=outcome.invocation_id)
        result = outcome.result
        if result is None:
            result = await _wait_for_answer(request, outcome.wait_for, armed=armed.event)
    waiting = (result.get("structuredContent") or {}).get("status") in ("pending_confirmation", "working", "outcome_unknown")
    if waiting and client_accepts_tasks(request.meta):
        return await in_db_thread(task_created, subject=request.subject, invocation_id=result["structuredContent"]["invocation_id"])
    if _pending(result) and client_accepts_url_elicitation(request.meta):
        elicitation = await in_db_thread(confirmation_elicitation, subject=request.subject,
                                         invocation_id=result["structuredContent"]["invocation_id"])
        if elicitation is not None:
            return elicitation
    return types.CallToolResult.model_validate(result)


async def on_tasks_get(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict:
    request = _request(ctx)
    if is_legacy_protocol(request.protocol_version):
        return await in_db_thread(legacy_task_get, subject=request.subject, task_id=params.task_id)
    require_tasks_capability(request.meta)
    return await in_db_thread(task_get, subject=request.subject, task_id=params.task_id)


async def on_tasks_cancel(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict:
    request = _request(ctx)
    if is_legacy_protocol(request.protocol_version):
        return await in_db_thread(legacy_task_cancel, subject=request.subject, task_id=params.task_id)
    require_tasks_capability(request.meta)
    return await in_db_thread(task_cancel, subject=request.subject, task_id=params.task_id)


async def on_tasks_result(ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict:
    """2025-11-25 ``tasks/result``: the call's recorded result once it is final, waiting for it
    (woken by its state changes) up to ``TOOLOPS_MCP_TASK_RESULT_WAIT_SECONDS``; after that an
    error telling the client to poll ``tasks/get`` (a person may take hours)."""
    request = _request(ctx)
    if not is_legacy_protocol(request.protocol_version):
        raise MCPError(types.METHOD_NOT_FOUND, "tasks/result is a 2025-11-25 method; use tasks/get")
    deadline = time.monotonic() + settings.TOOLOPS_MCP_TASK_RESULT_WAIT_SECONDS
    while True:
        wake = WAKEUPS.arm(params.task_id)
        try:
            payload = await in_db_thread(legacy_task_payload, subject=request.subject, task_id=params.task_id)
            if payload is not None:
                return payload
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MCPError(types.INVALID_PARAMS, "the task is still working: poll tasks/get and ask again once it is final")
            with anyio.move_on_after(min(remaining, FALLBACK_SECONDS if WAKEUPS.listening else _POLL_MAX * 25)):
                await wake.wait()
        finally:
            WAKEUPS.disarm(params.task_id, wake)


async def on_tasks_update(ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict:
    """Acknowledged: a ToolOps task never asks the client for input (a person decides in the
    console), so every response is for a key that is not outstanding and is ignored (spec)."""
    request = _request(ctx)
    require_tasks_capability(request.meta)
    await in_db_thread(task_get, subject=request.subject, task_id=params.task_id)  # unknown id → invalid params
    return {}


async def _confirmation_retry(request: McpRequest, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    """A URL-mode client's retry: redeem its sealed state, then answer with the decided call, or
    (still waiting for a person after a while) a fresh state to retry with. A client whose user
    declined to open the page gets the plain pending answer: the call still waits for a person."""
    invocation = await in_db_thread(confirmation_state_redeem, state=params.request_state, subject=request.subject)
    declined = any(getattr(r, "action", "accept") != "accept" for r in (params.input_responses or {}).values())
    result = await _wait_for_answer(request, invocation.pk, past_confirmation=not declined)
    if _pending(result) and not declined:
        state = await in_db_thread(confirmation_state_seal, invocation=invocation, subject=request.subject)
        return types.InputRequiredResult(request_state=state)
    return types.CallToolResult.model_validate(result)


def _pending(result: dict) -> bool:
    return (result.get("structuredContent") or {}).get("status") == "pending_confirmation"


class _Armed:
    """The wake-up event of a call being admitted, armed by the admitting database thread
    (``mcp_tool_call(arm=…)``) for the invocation it created; disarmed when the handler ends,
    and never armed after that (a thread still admitting for a handler that was cancelled)."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.lock = threading.Lock()
        self.armed: list = []
        self.closed = False

    def __call__(self, invocation_id) -> None:
        with self.lock:
            if not self.closed:
                WAKEUPS.arm(invocation_id, self.event)
                self.armed.append(invocation_id)

    def __enter__(self) -> "_Armed":
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.closed = True
            for invocation_id in self.armed:
                WAKEUPS.disarm(invocation_id, self.event)


async def _wait_for_answer(request: McpRequest, invocation_id, *, past_confirmation: bool = False,
                           armed: anyio.Event | None = None) -> dict:
    """Wait until the call settles (with ``past_confirmation``: until a person has decided too)
    or ``TOOLOPS_MCP_WAIT_SECONDS`` pass, re-reading the row when its state changes (a
    PostgreSQL notification, ``wakeups.py``) or, without a listener, polling. ``armed``: an
    event already armed for this invocation before a read that found it unsettled (the
    admission's own), so the first read is skipped. A client that goes away only stops this
    wait: nothing here cancels the call."""
    deadline = time.monotonic() + settings.TOOLOPS_MCP_WAIT_SECONDS
    pause = _POLL_FIRST
    answer = None
    while True:
        if armed is not None:
            wake, armed = armed, None
            if not await _until(wake, deadline, pause):
                break
        else:
            wake = WAKEUPS.arm(invocation_id)  # before reading: a change committed after the read wakes us
            try:
                answer = await in_db_thread(mcp_call_poll, subject=request.subject, invocation_id=invocation_id)
                if answer is not None and not (past_confirmation and _pending(answer)):
                    return answer
                if not await _until(wake, deadline, pause):
                    break
            finally:
                WAKEUPS.disarm(invocation_id, wake)
        pause = min(pause * _POLL_GROWTH, _POLL_MAX)
    return answer or await in_db_thread(mcp_call_still_running, subject=request.subject, invocation_id=invocation_id)


async def _until(wake: anyio.Event, deadline: float, pause: float) -> bool:
    """Wait for ``wake`` (at most the fallback interval, or ``pause`` while polling); False when
    the deadline has already passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    with anyio.move_on_after(min(remaining, FALLBACK_SECONDS if WAKEUPS.listening else pause)):
        await wake.wait()
    return True


@contextlib.asynccontextmanager
async def _lifespan(server: Server[Any]):
    install_db_executor()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(WAKEUPS.listen)
        yield {}
        tasks.cancel_scope.cancel()


def build_server() -> Server[Any]:
    server = _server()
    # Inside the SDK's tracing span (a refusal is traced); the rate limit within the error
    # mapping, so even a broken limit answers in ToolOps' words.
    server.middleware += [RequestMetrics(), ErrorsAsJsonRpc(), TokenRateLimit()]
    # The tasks extension through the SDK's hooks (it ships no implementation): see tasks.py.
    server.extensions[TASKS_EXTENSION] = {}
    server.add_request_handler("tasks/get", TaskIdParams, on_tasks_get)
    server.add_request_handler("tasks/update", TaskUpdateParams, on_tasks_update)
    server.add_request_handler("tasks/cancel", TaskIdParams, on_tasks_cancel)
    server.add_request_handler("tasks/result", TaskIdParams, on_tasks_result)  # 2025-11-25 only
    return server


class _Server(Server[Any]):
    def get_capabilities(self, *args, protocol_version: str | None = None, **kwargs) -> types.ServerCapabilities:
        """2025-11-25 sessions learn in ``initialize`` that calls may run as tasks (then a core
        capability; 2026-07-28 clients see the tasks extension instead)."""
        capabilities = super().get_capabilities(*args, protocol_version=protocol_version, **kwargs)
        if is_legacy_protocol(protocol_version):
            capabilities.tasks = LEGACY_SERVER_CAPABILITY
        return capabilities


def _server() -> Server[Any]:
    return _Server(
        "toolops", version="1", title="ToolOps",
        instructions=(
            "Tools governed by ToolOps: every call is validated, authorized and recorded; some wait "
            "for a person to confirm them. A pending_confirmation answer is not a failure: check it "
            f"later with {STATUS_TOOL}."
        ),
        lifespan=_lifespan, on_list_tools=on_list_tools, on_call_tool=on_call_tool,
        get_tool_input_schema=_no_schema_before_dispatch,
    )


def _no_schema_before_dispatch(name: str) -> None:
    """Nothing for the SDK to check ``Mcp-Param-*`` headers against before dispatch.

    Without this hook the SDK's 2026-07-28 transport resolves a ``tools/call``'s inputSchema by
    running this server's own ``tools/list`` handler first — here that recorded a ModelCall the
    client never saw (and spent the run's model-call budget) on every call, and the call was
    then resolved against that listing. The check is made in ``mcp_tool_call`` instead, against
    the recorded listing the call is resolved against, with the same rule and the same
    ``HEADER_MISMATCH`` answer."""
    return None


def transport_security() -> TransportSecuritySettings:
    """Host and Origin allow-lists from Django's ``ALLOWED_HOSTS`` (any port) and
    ``CSRF_TRUSTED_ORIGINS``, plus the MCP URL's own host. ``*`` in ALLOWED_HOSTS turns the
    check off, as it does for Django."""
    hosts = list(settings.ALLOWED_HOSTS)
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    own = urlsplit(settings.TOOLOPS_MCP_URL).netloc
    names = [h for h in hosts if not h.startswith(".")]  # the SDK matches exact names only
    allowed_hosts = sorted({own, *names, *(f"{h}:*" for h in names)})
    origins = {f"{scheme}://{h}{port}" for h in names for scheme in ("http", "https") for port in ("", ":*")}
    origins |= {f"{urlsplit(settings.TOOLOPS_MCP_URL).scheme}://{own}", *settings.CSRF_TRUSTED_ORIGINS}
    return TransportSecuritySettings(allowed_hosts=allowed_hosts, allowed_origins=sorted(origins))


def build_app() -> ASGIApp:
    """The ASGI app ``mcp_server.asgi:app`` serves."""
    server = build_server()
    mcp_path = urlsplit(settings.TOOLOPS_MCP_URL).path or "/mcp"
    app = server.streamable_http_app(
        streamable_http_path=mcp_path,
        json_response=True,
        max_request_body_size=settings.TOOLOPS_MCP_MAX_BODY_BYTES,
        transport_security=transport_security(),
        auth=AuthSettings(
            # The console is the authorization server (oauth/): MCP clients sign a person in
            # there; API tokens an admin issues in the console work as well.
            issuer_url=settings.TOOLOPS_CONSOLE_URL, resource_server_url=settings.TOOLOPS_MCP_URL,
            # The verifier checks an OAuth token's bound resource itself (identity.py); API
            # tokens are not audience-bound.
            validate_token_resource=False,
        ),
        token_verifier=ApiTokenVerifier(),
    )
    return Probes(RawBodyCapture(app))
