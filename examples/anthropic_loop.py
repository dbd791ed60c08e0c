"""An Anthropic agent whose tool calls go through ToolOps: `make run`, then `python examples/anthropic_loop.py`.

With ANTHROPIC_API_KEY set it asks Anthropic (ANTHROPIC_MODEL, default claude-sonnet-4-5); without
one, a scripted stand-in model plays the same turns. TOOLOPS_URL and TOOLOPS_TOKEN as in openai_loop.py.
"""
import functools
import json
import os
from pathlib import Path

from toolops_client import ToolOps, loop
from toolops_client.scripted import ScriptedAnthropic


def anthropic_model():
    """The model call itself: an SDK method, or the stand-in without an API key."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        from anthropic import Anthropic
        return functools.partial(Anthropic().messages.create, model=os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
                                 max_tokens=1024)
    return ScriptedAnthropic([[("weather-get_forecast_v1", {"city": "Paris", "date": "tomorrow"})], "Tomorrow in Paris: as the forecast says."])


token = os.environ.get("TOOLOPS_TOKEN") or Path(__file__).resolve().parents[1].joinpath("var", "demo_token").read_text().strip()

# --8<-- [start:loop]
client = ToolOps(os.environ.get("TOOLOPS_URL", "http://127.0.0.1:8000"), token)
with client.run(budgets={"tool_calls": 10, "model_calls": 10}, timezone="Europe/Paris") as run:
    result = loop(model=anthropic_model(), messages=[{"role": "user", "content": "Weather in Paris tomorrow?"}],
                  tools=run, format="anthropic")
print(result.text)
# --8<-- [end:loop]
print(json.dumps({"run_id": run.id, "stop_reason": result.stop_reason, "format": "anthropic",
                  "invocations": [c.invocation_id for c in result.calls]}))
