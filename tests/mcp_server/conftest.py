"""Real parts for the MCP front door: the MCP server as its own uvicorn process, a Celery worker
process and the demo services (tests/integration/conftest.py), all on the PostgreSQL test
database; clients are the official ``mcp`` SDK's ``Client`` and the OpenAI Agents SDK. Nothing
is mocked. Skipped locally without PostgreSQL/Redis; an error under TOOLOPS_REQUIRE_SERVICES=1.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from tests.conftest import REPO_ROOT
from tests.integration.conftest import Worker, demo_agent, demo_services, module_worker, wait_for, worker, worker_env  # noqa: F401

DEMO_TOKEN = "tko_integration_token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class McpServer:
    """``uvicorn mcp_server.asgi:app`` on a free loopback port, logging to a file."""

    def __init__(self, env: dict, log_path: Path, **overrides: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = {**env, "TOOLOPS_MCP_URL": self.url, "TOOLOPS_MCP_WAIT_SECONDS": "20", **overrides}
        self.log_path, self.proc = log_path, None

    def start(self) -> "McpServer":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "mcp_server.asgi:app", "--host", "127.0.0.1", "--port", str(self.port),
             "--log-level", "warning"],
            cwd=REPO_ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP server exited: {self.output()[-3000:]}")
            try:
                if httpx2.get(self.metadata_url, timeout=1).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.1)
        self.stop()  # not left running behind a failed fixture
        raise RuntimeError(f"MCP server did not come up in 30 s: {self.output()[-3000:]}")

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/oauth-protected-resource/mcp"

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def mcp_server(worker_env, tmp_path, transactional_db):
    server = McpServer(worker_env, tmp_path / "mcp.log").start()
    yield server
    server.stop()
    print("---- MCP server log ----\n" + server.output()[-6000:])


def http_client(token: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0))


def mcp_client(server: McpServer, token: str = DEMO_TOKEN, *, mode: str = "auto", **kwargs):
    """The official SDK's Client over streamable HTTP with a bearer token."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    return Client(streamable_http_client(server.url, http_client=http_client(token)), mode=mode, **kwargs)


LEGACY, MODERN = "2025-11-25", "2026-07-28"


def _jsonrpc(body: dict) -> bytes:
    # ASCII-escaped, as a client may send it: a lone surrogate travels as its \u escape.
    return json.dumps(body).encode()


def modern_request(method: str, params: dict | None = None, *, token: str = DEMO_TOKEN, request_id=1) -> dict:
    """A self-contained 2026-07-28 JSON-RPC request as ``httpx2`` keyword arguments (``content``
    and ``headers``): no session, the protocol version in ``_meta`` and in the header."""
    params = {**(params or {}), "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                          "io.modelcontextprotocol/clientCapabilities": {},
                                          **(params or {}).get("_meta", {})}}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return {"content": _jsonrpc({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}), "headers": headers}


class LegacySession:
    """One 2025-11-25 session over streamable HTTP (JSON responses), raw JSON-RPC."""

    def __init__(self, server: McpServer, token: str = DEMO_TOKEN):
        self.url, self.ids = server.url, itertools.count(1)
        self.http = httpx2.Client(timeout=90, headers={
            "Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json"})
        resp = self.http.post(self.url, content=_jsonrpc({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}}}))
        assert resp.status_code == 200, resp.text
        self.initialized = resp.json()["result"]
        self.http.headers.update({"Mcp-Session-Id": resp.headers["mcp-session-id"], "MCP-Protocol-Version": LEGACY})
        assert self.http.post(self.url, content=_jsonrpc({"jsonrpc": "2.0", "method": "notifications/initialized"})).status_code == 202

    def request(self, method: str, params: dict, *, request_id=None) -> dict:
        body = {"jsonrpc": "2.0", "id": next(self.ids) if request_id is None else request_id, "method": method, "params": params}
        resp = self.http.post(self.url, content=_jsonrpc(body))
        assert resp.status_code == 200, resp.text
        return resp.json()

    def result(self, method: str, params: dict) -> dict:
        answer = self.request(method, params)
        assert "result" in answer, answer
        return answer["result"]
