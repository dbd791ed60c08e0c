"""The README's five-minute tour, run as written against a live ``make run``.

The code blocks between the README's ``--8<-- [start:tour-…]`` markers (the same sections the docs'
getting-started page includes) are run as they are: only the placeholders a reader fills in are
replaced — ``<token>`` by the demo token ``make run`` printed, and the default ports by the ones
this run got (``PORT`` and its neighbours). If the README drifts from the product, this fails.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tests.servers import make_run

README = REPO_ROOT / "README.md"


def tour_block(section: str, language: str) -> str:
    """The one fenced ``language`` block inside the README's ``section`` markers."""
    text = README.read_text(encoding="utf-8")
    inside = re.search(rf"--8<-- \[start:{section}\][^\n]*\n(.*?)\n[^\n]*--8<-- \[end:{section}\]", text, re.DOTALL)
    assert inside, f"README.md has no section {section}"
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", inside.group(1), re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"section {section} should hold one ```{language} block"
    return blocks[0]


def _as_run(code: str, run) -> str:
    """Fill in what a reader fills in: the token, and this run's ports for the default ones."""
    for default, port in ((8000, run.port), (8001, run.port + 1)):
        code = code.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
    return code.replace("<token>", run.token())


def _documents(text: str) -> list:
    """Every JSON document in ``text`` (curl -s prints them back to back)."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
    return docs


def test_the_readme_tour_runs_as_written_against_make_run():
    shell = tour_block("tour-http", "sh") + "\n" + tour_block("tour-approval", "sh")
    client_code = tour_block("tour-mcp", "python")
    with make_run() as run:
        shell = _as_run(shell, run)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", shell], capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr

        tools, tool_message, calendar = _documents(done.stdout)
        [weather] = _documents(done.stderr)  # the proposal's answer, shown with tee
        assert "weather-get_forecast_v1" in tools["name_map"]
        assert weather["state"] == "OBSERVED", weather
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", weather["normalized_arguments"]["date"])  # "tomorrow", made explicit
        assert tool_message["tool_call_id"] == "call_1" and tool_message["role"] == "tool"
        assert calendar["state"] == "AUTHORIZED" and calendar["confirmation"]["state"] == "pending", calendar

        client = subprocess.run([sys.executable, "-c", _as_run(client_code, run)],
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        listed, result = client.stdout.strip().split("\n", 1)
        assert "weather-get_forecast_v1" in listed and "calendar-create_event_v1" in listed
        assert "is_error=False" in result.replace("isError", "is_error"), result
