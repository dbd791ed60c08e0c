"""Checked by mypy (tests/client/test_client_typing.py), never run: what a type checker sees of the client."""
from __future__ import annotations

from typing import Any, assert_type

from toolops_client import AsyncToolOps, Invocation, LoopResult, Run, ToolMessages, ToolOps, loop


def sync_use(client: ToolOps, response: Any) -> None:
    with client.run(budgets={"tool_calls": 3}) as run:
        assert_type(run, Run)
        assert_type(run.tools(format="anthropic"), list[dict[str, Any]])
        assert_type(run.submit(response, wait=True), ToolMessages)
        assert_type(loop(model=lambda **kw: response, messages=[], tools=run), LoopResult)
    assert_type(client.invocation("id"), Invocation)
    assert_type(client.invocation("id").events(), list[dict[str, Any]])
    assert_type(client.confirmations.pending(), list[dict[str, Any]])


async def async_use(client: AsyncToolOps, response: Any) -> None:
    async with client.run() as run:
        assert_type(await run.tools(), list[dict[str, Any]])
        assert_type(await run.submit(response), ToolMessages)
