"""The executor of a tool's kind (``executor.kind``: python, http, mcp): ``execute`` one attempt,
or ``lookup`` whether an unknown write took effect (reconciliation). No executor: a refusal
before anything is sent.
"""
from __future__ import annotations

import logging
from typing import Any

from toolops.decisions.execution import Commit, ExecutionOutcome, LookupOutcome
from toolops.tool_secrets import secret_values  # noqa: F401 (re-exported for the executors' callers)
from worker.egress_net import operator_openers
from worker.executors import mcp as mcp_upstream
from worker.executors.context import AttemptContext  # noqa: F401 (re-exported)
from worker.executors.http import execute_http, lookup_http
from worker.executors.python import execute_python, lookup_python

logger = logging.getLogger(__name__)


def execute(*, config: dict, arguments: Any, ctx: AttemptContext) -> ExecutionOutcome:
    kind = config.get("kind")
    if kind == "python":
        return execute_python(config, arguments, ctx)
    if kind == "http":
        return execute_http(config, arguments, ctx)
    if kind == "mcp":
        return mcp_upstream.execute_mcp(config=config, arguments=arguments, ctx=ctx, openers=operator_openers())
    return ExecutionOutcome(
        commit=Commit.NOT_COMMITTED if ctx.side_effect_class != "read_only" else Commit.NOT_APPLICABLE,
        failure_class="not_reached", error={"code": "no_executor", "message": f"tool has no executor (kind={kind!r})"},
    )


def lookup(*, config: dict, arguments: Any, ctx: AttemptContext) -> LookupOutcome:
    """Ask the tool whether the effect exists (reconciliation). Unknown when it cannot tell."""
    spec = config.get("lookup")
    if not spec:
        return LookupOutcome(committed=None, detail={"reason": "tool offers no lookup"})
    if config.get("kind") == "python":
        return lookup_python(spec, arguments, ctx)
    if config.get("kind") == "mcp":
        return mcp_upstream.lookup_mcp(config=config, arguments=arguments, ctx=ctx, openers=operator_openers())
    return lookup_http(config, spec, arguments, ctx)
