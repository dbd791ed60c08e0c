"""Real parts for governing an MCP server: the demo notes MCP server as its own process (the
official SDK over streamable HTTP), PostgreSQL, and — for execution — a real Celery worker
(``tests/integration/conftest.py``'s fixtures). Nothing is mocked.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import REPO_ROOT
from tests.integration.conftest import demo_services, module_worker, worker, worker_env  # noqa: F401 - fixtures used here

# The credential ToolOps presents to the upstream; the upstream refuses requests without it.
NOTES_SECRET = "notes-cred-" + secrets.token_hex(12)
SECRET_REF = "secret:NOTES_MCP_TOKEN"


class NotesUpstream:
    """Handle on the demo notes MCP server process and its control surface."""

    def __init__(self, url: str, proc: subprocess.Popen):
        self.url, self.proc = url, proc
        self.base = url.rsplit("/mcp", 1)[0]
        self.address = self.base.split("://", 1)[1]  # IP:PORT, as the egress allow-list names it

    def reset(self) -> None:
        requests.post(f"{self.base}/_control/reset", timeout=5).raise_for_status()

    def fault(self, tool: str, fault: str, **extra) -> None:
        requests.post(f"{self.base}/_control/faults", json={"tool": tool, "fault": fault, **extra}, timeout=5).raise_for_status()

    def redefine(self, tool: str, **change) -> None:
        requests.post(f"{self.base}/_control/definition", json={"tool": tool, **change}, timeout=5).raise_for_status()

    def requests_log(self) -> list[dict]:
        return requests.get(f"{self.base}/_control/requests", timeout=5).json()["requests"]

    def calls(self, tool: str | None = None) -> list[dict]:
        return [r for r in self.requests_log() if r["method"] == "tools/call" and (tool is None or r["tool"] == tool)]

    def wire(self) -> list[dict]:
        """Every HTTP request to /mcp as it arrived (before the credential check), refused ones too."""
        return requests.get(f"{self.base}/_control/wire", timeout=5).json()["wire"]

    def notes(self) -> list[dict]:
        return requests.get(f"{self.base}/_control/notes", timeout=5).json()["notes"]


@pytest.fixture(scope="session")
def notes_upstream():
    """``python -m demo_services.notes_mcp --port 0`` requiring ``NOTES_SECRET`` as bearer token."""
    env = {**os.environ, "NOTES_MCP_TOKEN": NOTES_SECRET}
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo_services.notes_mcp", "--port", "0"], cwd=REPO_ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"notes MCP server did not start: {line}{proc.stdout.read()[-2000:]}")
    url = line.strip().rsplit(" ", 1)[-1]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            requests.get(url.rsplit("/mcp", 1)[0] + "/_control/health", timeout=1).raise_for_status()
            break
        except requests.RequestException:
            time.sleep(0.1)
    yield NotesUpstream(url, proc)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def notes(notes_upstream, settings):
    """A fresh upstream (no notes, base definitions, empty request log) and ToolOps configured
    with the credential by reference and its loopback address on the operator's egress allow-list.
    Every call lists the upstream before it is sent (pin recheck window 0; what an earlier test
    verified is forgotten by ``tests/conftest.py``), the strict mode these tests change
    definitions under; the window itself has its own tests."""
    notes_upstream.reset()
    settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = 0
    settings.TOOLOPS_TOOL_SECRETS = {**(settings.TOOLOPS_TOOL_SECRETS or {}), "NOTES_MCP_TOKEN": NOTES_SECRET}
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, notes_upstream.address]
    return notes_upstream


def published(specs) -> dict:
    """Publish imported drafts (after an admin confirmed their classes); by upstream tool name."""
    from django.contrib.auth.models import User

    from specs_app.services import toolspec_publish
    from worker.upstream_sync import upstream_confirm_class

    admin = User.objects.get_or_create(username="catalog-admin", defaults={"is_staff": True})[0]
    out = {}
    for spec in specs:
        upstream_confirm_class(upstream=spec.upstream, user=admin)
        out[spec.upstream.upstream_name] = toolspec_publish(spec=spec)
    return out


def dumps(value) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)
