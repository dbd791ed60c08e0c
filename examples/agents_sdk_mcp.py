"""An OpenAI Agents SDK agent using ToolOps' MCP front door: `make run`, then `python examples/agents_sdk_mcp.py`.

With OPENAI_API_KEY set the agent runs on OpenAI (OPENAI_MODEL, default gpt-4.1-mini); without one,
on a scripted stand-in model (an Agents SDK ``Model``). TOOLOPS_MCP_URL (default
http://127.0.0.1:8001/mcp) and TOOLOPS_TOKEN (default: var/demo_token) say where ToolOps is.
"""
import asyncio
import json
import os
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import Response

from toolops_client.scripted import ScriptedResponses


class StandIn(Model):
    """The scripted turns as an Agents SDK model (no API key needed)."""

    def __init__(self, turns):
        self.script = ScriptedResponses(turns)

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing,
                           **_):
        answer = Response.model_validate(self.script(input=input, tools=[t.name for t in tools]))
        return ModelResponse(output=answer.output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the stand-in does not stream")


def agent_model():
    if os.environ.get("OPENAI_API_KEY"):
        return os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")
    set_tracing_disabled(True)  # nowhere to send traces without a key
    return StandIn([[("weather-get_forecast_v1", {"city": "Paris", "date": "tomorrow"})], "Tomorrow in Paris: as the forecast says."])


async def main():
    token = os.environ.get("TOOLOPS_TOKEN") or Path(__file__).resolve().parents[1].joinpath("var", "demo_token").read_text().strip()
    url = os.environ.get("TOOLOPS_MCP_URL", "http://127.0.0.1:8001/mcp")
    async with MCPServerStreamableHttp({"url": url, "headers": {"Authorization": f"Bearer {token}"}}, name="toolops") as toolops:
        agent = Agent(name="assistant", instructions="Answer with the tools.", mcp_servers=[toolops], model=agent_model())
        result = await Runner.run(agent, "Weather in Paris tomorrow?")
    print(result.final_output)
    outputs = [item.raw_item for item in result.new_items if item.type == "tool_call_output_item"]
    invocations = [_invocation_id(o) for o in outputs]
    print(json.dumps({"stop_reason": "model_stopped", "format": "mcp", "invocations": invocations}))


def _invocation_id(output) -> str:
    """The invocation ToolOps recorded for a tool call: named in the call's result (its text block)."""
    content = output["output"] if isinstance(output, dict) else output.output
    text = content if isinstance(content, str) else next(part["text"] for part in content if part.get("type") == "input_text")
    return json.loads(text)["invocation_id"]


if __name__ == "__main__":
    asyncio.run(main())
