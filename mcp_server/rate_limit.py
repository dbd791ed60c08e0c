"""The per-token rate limit at the MCP front door: the REST API's limit, on the same counter.

A token has one ``TOOLOPS_API_RATE`` whichever door it knocks on: its MCP requests and its REST
requests are spent from one counter in the shared cache (``toolops.throttling.token_rate_window``),
so a token refused with ``429`` on REST is refused here too, and the other way round.

What counts: every JSON-RPC *request* of an authenticated client, whatever its method
(``initialize``, ``tools/list``, ``tools/call``, ``tasks/get``, ``ping`` …), as every authenticated
REST request counts — each one is work for this process and most are database work; counting only
``tools/call`` would leave a token free to poll or list without bound. A *notification* is not
counted: it has no answer to carry a refusal, and those a client sends here do no work. Nor are
the transport's own HTTP requests that carry no JSON-RPC request (a legacy session's GET stream,
its DELETE).

A refusal is a JSON-RPC error, code ``RATE_LIMITED`` with ``data = {"code": "rate_limited",
"retry_after": <seconds until the window ends>}`` — the same code and the same wait the REST
API's problem document and ``Retry-After`` give.
"""
from __future__ import annotations

from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError

from toolops.throttling import token_rate_window

from mcp_server.identity import request_token_id

# MCP leaves -32000..-32019 to implementations; -32005 is JSON-RPC's usual "limit exceeded"
# (EIP-1474), so generic clients may already know it.
RATE_LIMITED = -32005


class TokenRateLimit:
    """``Server.middleware``: each JSON-RPC request spends one of its token's permits before
    anything else runs (the handshake, params validation, the handler)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is not None:
            window = token_rate_window(request_token_id(ctx.request))
            # A permit this process holds is spent on the loop; claiming more asks Redis, off it.
            if window is not None and not window.take_held() and not await anyio.to_thread.run_sync(window.take):
                raise MCPError(RATE_LIMITED, f"rate limit of this token reached: retry in {window.retry_after} s",
                               data={"code": "rate_limited", "retry_after": window.retry_after})
        return await call_next(ctx)
