"""What an operator needs from the MCP process (docs/how-to/operate.md): ``GET /healthz`` and
``GET /readyz`` answered before the SDK's app (no token, no session: the checks of
toolops/health.py, the database ones in a database thread), and the count of MCP requests by
method and result for ``/metrics`` (toolops/metrics.py).
"""
from __future__ import annotations

import json
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_server.db import in_db_thread
from toolops import health, metrics

# Methods a label may name; anything else a client sends counts as "other" (bounded labels).
KNOWN_METHODS = frozenset({
    "initialize", "ping", "tools/list", "tools/call", "resources/list", "resources/read", "prompts/list",
    "completion/complete", "logging/setLevel", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
})


class Probes:
    """``/healthz`` (no I/O) and ``/readyz`` in front of the MCP app."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path") if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") else None
        if path == "/healthz":
            await _answer(send, 200, health.liveness())
        elif path == "/readyz":
            await _answer(send, *await in_db_thread(health.readiness))
        else:
            await self.app(scope, receive, send)


async def _answer(send: Send, status: int, body: dict) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": payload})


class RequestMetrics:
    """``Server.middleware``, outermost: ``toolops_mcp_requests_total`` by method and result
    (``ok``, ``tool_error`` — a tools/call answered with ``isError`` — or ``error``)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method if ctx.method in KNOWN_METHODS else "other"
        try:
            result = await call_next(ctx)
        except Exception:  # an MCPError, or one ErrorsAsJsonRpc turns into one
            metrics.mcp_request(method=method, result="error")
            raise
        metrics.mcp_request(method=method, result="tool_error" if getattr(result, "is_error", False) else "ok")
        return result
