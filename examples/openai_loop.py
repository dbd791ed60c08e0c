"""An OpenAI agent whose tool calls go through ToolOps: `make run`, then `python examples/openai_loop.py`.

With OPENAI_API_KEY set it asks OpenAI (OPENAI_MODEL, default gpt-4.1-mini); without one, a scripted
stand-in model plays the same turns. TOOLOPS_URL (default http://127.0.0.1:8000) and TOOLOPS_TOKEN
(default: the demo token `make run` wrote to var/demo_token) say where ToolOps is.
"""
import functools
import json
import os
from pathlib import Path

from toolops_client import ToolOps, loop
from toolops_client.scripted import ScriptedChat


def openai_model():
    """The model call itself: an SDK method, or the stand-in without an API key."""
    if os.environ.get("OPENAI_API_KEY"):
        from openai import OpenAI
        return functools.partial(OpenAI().chat.completions.create, model=os.environ.get("OPENAI_MODEL", "gpt-4.1-mini"))
    return ScriptedChat([[("weather-get_forecast_v1", {"city": "Paris", "date": "tomorrow"})], "Tomorrow in Paris: as the forecast says."])


token = os.environ.get("TOOLOPS_TOKEN") or Path(__file__).resolve().parents[1].joinpath("var", "demo_token").read_text().strip()

# --8<-- [start:loop]
client = ToolOps(os.environ.get("TOOLOPS_URL", "http://127.0.0.1:8000"), token)
with client.run(budgets={"tool_calls": 10, "model_calls": 10}, timezone="Europe/Paris") as run:
    result = loop(model=openai_model(), messages=[{"role": "user", "content": "Weather in Paris tomorrow?"}], tools=run)
print(result.text)
# --8<-- [end:loop]
print(json.dumps({"run_id": run.id, "stop_reason": result.stop_reason, "format": "openai",
                  "invocations": [c.invocation_id for c in result.calls]}))
