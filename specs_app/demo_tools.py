"""Python-callable executors of the demo ToolSpecs (the HTTP ones talk to demo_services)."""
from __future__ import annotations

import hashlib


def weather_forecast(arguments: dict, ctx) -> dict:
    """A deterministic fake forecast: the same city and date always give the same weather."""
    seed = int(hashlib.sha256(f"{arguments['city']}|{arguments['date']}".encode()).hexdigest()[:8], 16)
    conditions = ["sunny", "cloudy", "light rain", "showers", "windy", "fog"]
    return {
        "city": arguments["city"],
        "date": arguments["date"],
        "condition": conditions[seed % len(conditions)],
        "high_c": 12 + seed % 18,
        "low_c": 2 + seed % 10,
    }
