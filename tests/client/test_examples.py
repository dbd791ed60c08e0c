"""examples/ run as a reader runs them — against a live ``make run``, with the scripted stand-in model
(no API key) — and leave recorded tool messages that the SDKs' own types load. The docs' loop is at
most 10 lines beyond the model call."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from anthropic.types import ToolResultBlockParam
from mcp.types import CallToolResult
from openai.types.chat import ChatCompletionToolMessageParam
from pydantic import TypeAdapter

from tests.conftest import REPO_ROOT
from toolops_client import ToolOps

EXAMPLES = REPO_ROOT / "examples"
LOADS = {
    "openai": lambda m: TypeAdapter(ChatCompletionToolMessageParam).validate_python(m),
    "anthropic": lambda m: TypeAdapter(ToolResultBlockParam).validate_python(m),
    "mcp": CallToolResult.model_validate,
}


@pytest.mark.parametrize("example", ["openai_loop.py", "anthropic_loop.py", "agents_sdk_mcp.py"])
def test_an_example_runs_with_the_stand_in_and_records_tool_messages_the_sdk_types_load(server, example):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env.update(TOOLOPS_URL=server.url, TOOLOPS_TOKEN=server.token(), TOOLOPS_MCP_URL=f"http://127.0.0.1:{server.port + 1}/mcp")
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["stop_reason"] == "model_stopped" and len(summary["invocations"]) == 1
    with ToolOps(server.url, server.token()) as client:
        for invocation_id in summary["invocations"]:
            invocation = client.invocation(invocation_id)
            assert invocation.state == "OBSERVED"
            message = invocation.tool_message(format=summary["format"])
            LOADS[summary["format"]](message)
            assert invocation_id in json.dumps(message)
        if "run_id" in summary:
            run = client.get_run(summary["run_id"]).data
            assert run["used"]["tool_calls"] == 1 and run["used"]["model_calls"] == 2 and run["state"] == "finished"


@pytest.mark.parametrize("example", ["openai_loop.py", "anthropic_loop.py"])
def test_the_loop_beyond_the_model_call_is_at_most_10_lines(example):
    text = (EXAMPLES / example).read_text()
    section = re.search(r"--8<-- \[start:loop\]\n(.*?)\n# --8<-- \[end:loop\]", text, re.DOTALL).group(1)
    lines = [line for line in section.splitlines() if line.strip()]
    imports = [line for line in text.splitlines() if line.startswith("from toolops_client import")]
    assert len(imports) == 1 and len(lines) + len(imports) <= 10, lines
