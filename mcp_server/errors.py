"""Every error the MCP front door answers is a JSON-RPC error in ToolOps' words.

The SDK answers an exception it does not know with code 0 and the exception's own text on
2025-11-25 sessions — a database error's words went to the client that way — and with a bare
-32603 on 2026-07-28 requests. ``ErrorsAsJsonRpc`` sits around every handler and answers as the
REST API does (``toolops.middleware``, ``agent_api.errors``):

* a refusal of the request (``ApplicationError``: an unknown run in ``_meta``, no such call) →
  -32602 invalid params, ``data.code`` its stable code;
* a backing service down (database, broker, Redis) → -32603 with ``data.code``
  ``service_unavailable`` and ``retry_after`` (the REST API's 503): it may work later;
* anything else → -32603 ``internal_error`` with a trace id, logged with its traceback — a bug to
  fix, never its text on the wire.

``MCPError`` (the handlers' own answers) and pydantic's ``ValidationError`` (the SDK's invalid
params) pass through unchanged.
"""
from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
from django.conf import settings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from toolops.errors import ApplicationError
from toolops.middleware import OUTAGE_ERRORS
from toolops.runtime.tracecontext import new_trace_id

logger = logging.getLogger("toolops.mcp")


class ErrorsAsJsonRpc:
    """``Server.middleware``: a handler's exception as the JSON-RPC error the client should get."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            return await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except ApplicationError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc), data={"code": exc.code, **(exc.extra or {})}) from None
        except OUTAGE_ERRORS as exc:
            logger.warning("service unavailable on MCP %s: %s: %s", ctx.method, type(exc).__name__, exc)
            raise MCPError(types.INTERNAL_ERROR, "a backing service (database or broker) is unavailable; retry later",
                           data={"code": "service_unavailable", "retry_after": settings.TOOLOPS_OUTAGE_RETRY_AFTER}) from None
        except Exception:
            trace_id = new_trace_id()
            logger.exception("unhandled error on MCP %s trace_id=%s", ctx.method, trace_id)
            raise MCPError(types.INTERNAL_ERROR, "an unexpected error occurred; quote the trace id when reporting it",
                           data={"code": "internal_error", "trace_id": trace_id}) from None
