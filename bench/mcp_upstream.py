"""A read-only call to an imported MCP tool through ToolOps vs the same call straight to the upstream.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench_mcp \\
    REDIS_URL=redis://127.0.0.1:6379/0 CELERY_BROKER_URL=redis://127.0.0.1:6379/5 \\
    .venv/bin/python bench/mcp_upstream.py            # BENCH_SMOKE=1: a few calls, < 30 s

Real parts: the demo notes MCP server (its own process, official SDK, streamable HTTP), a real
``celery worker`` (prefork, concurrency 2), PostgreSQL, Redis.

* **through ToolOps' MCP front door** (the headline figure): the same SDK ``Client``, one open
  session, calling ``notes.search`` (imported, class confirmed, published, granted) on ToolOps'
  MCP server (``uvicorn mcp_server.asgi:app``, its own process, inline reads as by default):
  admission → the MCP executor (pin check unless this process made it within
  ``TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS``, ``tools/call`` upstream) → the recorded answer. The
  agent's view: the same tool, governed, vs ungoverned.
* **through ToolOps, worker path**: ``proposal_admit`` in this process → the Celery worker runs
  the MCP executor → OBSERVED, observed by polling the database every 1 ms (a REST client's
  path, or the front door with inline reads off).
* **direct (baseline)**: the official SDK ``Client`` in one open session calling the same tool
  — what an agent gets without ToolOps. Also shown, to explain the difference: one direct call
  the way the worker makes it (a fresh session + the pin check when due), without ToolOps around it.
* **exactly once**: the same ``notes.create`` proposal re-issued concurrently (100, smoke 20)
  gives one invocation and one note upstream.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SMOKE = os.environ.get("BENCH_SMOKE") == "1"
NOTES_TOKEN = "bench-notes-" + secrets.token_hex(8)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
os.environ.setdefault("TOOLOPS_QUEUE", f"bench-{uuid.uuid4().hex[:6]}")
os.environ["TOOLOPS_UPSTREAM_REFRESH_SECONDS"] = "3600"  # the bench measures calls, not refreshes
os.environ["TOOLOPS_TOOL_SECRETS"] = json.dumps(
    {**json.loads(os.environ.get("TOOLOPS_TOOL_SECRETS") or "{}"), "BENCH_NOTES_TOKEN": NOTES_TOKEN})

import anyio  # noqa: E402
import django  # noqa: E402
import requests  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from invocations_app.admission import proposal_admit  # noqa: E402
from invocations_app.runs import model_call_create, run_create  # noqa: E402
from invocations_app.models import Invocation  # noqa: E402
from toolops.sql import table_name  # noqa: E402
from specs_app.models import Capability, Grant, Subject, Tenant  # noqa: E402
from specs_app.services import api_token_issue, toolspec_publish  # noqa: E402
from worker.upstream_sync import credential_headers, upstream_confirm_class, upstream_import  # noqa: E402
from worker.executors import mcp_client  # noqa: E402


def start_upstream() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "demo_services.notes_mcp", "--port", "0"], cwd=ROOT,
                            env={**os.environ, "NOTES_MCP_TOKEN": NOTES_TOKEN}, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        raise SystemExit(f"notes MCP server did not start: {line}")
    url = line.strip().rsplit(" ", 1)[-1]
    # The import (here) and the worker (started after this) may reach this loopback upstream: the
    # operator's egress allow-list, in this process's settings and in the worker's environment.
    address = url.split("://", 1)[1].split("/", 1)[0]
    allow = [e for e in os.environ.get("TOOLOPS_EGRESS_ALLOW", "").split(",") if e]
    os.environ["TOOLOPS_EGRESS_ALLOW"] = ",".join([*allow, address])
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, address]
    return proc, url


def start_worker() -> subprocess.Popen:
    (ROOT / "var").mkdir(exist_ok=True)
    log = open(ROOT / "var" / "bench-mcp-worker.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "toolops", "worker", "--loglevel=WARNING", "--concurrency=2",
         "-Q", settings.CELERY_TASK_DEFAULT_QUEUE, "--without-gossip", "--without-mingle"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT,
    )
    return proc  # the first (warm-up) call waits for it to come up


def setup(url: str):
    call_command("migrate", verbosity=0)
    tag = uuid.uuid4().hex[:8]
    admin = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True})[0]
    specs = {s.upstream.upstream_name: s for s in upstream_import(
        url=url, prefix=f"b{tag}", credential="secret:BENCH_NOTES_TOKEN", lookups={"notes.create": "notes.find_by_key"}).created}
    tenant = Tenant.objects.create(slug=f"bm-{tag}", name="bench")
    subject = Subject.objects.create(tenant=tenant, name="bench-agent")
    out = {}
    for name in ("notes.search", "notes.create"):
        upstream_confirm_class(upstream=specs[name].upstream, user=admin)
        spec = toolspec_publish(spec=specs[name])
        Grant.objects.create(capability=Capability.objects.get(name=spec.required_capabilities[0]["capability"]),
                             tenant=tenant, subject=subject, scope_kind="any", tool_refs=[spec.ref], reason="bench")
        out[name] = spec
    return subject, out


def start_front_door() -> tuple[subprocess.Popen, str]:
    """ToolOps' MCP server, inline reads on (its default), reaching the upstream as the worker does."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    log = open(ROOT / "var" / "bench-mcp-front-door.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "mcp_server.asgi:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "TOOLOPS_MCP_URL": url, "TOOLOPS_MCP_INLINE_READS": "1"},
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the MCP front door exited with {proc.returncode} (var/bench-mcp-front-door.log)")
        try:
            requests.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp", timeout=1)
            return proc, url
        except requests.RequestException:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("the MCP front door did not answer in 90 s")


def through_front_door(mcp_url: str, token: str, spec, n: int) -> list[float]:
    """The agent's SDK client, one open session, calling the governed tool on ToolOps."""
    out = []

    async def go():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0)) as http, \
                Client(streamable_http_client(mcp_url, http_client=http), mode="2026-07-28") as client:
            await client.list_tools()
            for i in range(n):
                start = time.perf_counter()
                result = await client.call_tool(spec.model_facing_name, {"query": f"q{i}"})
                out.append((time.perf_counter() - start) * 1000)
                if result.is_error:
                    raise SystemExit(f"the governed call failed: {result.content[0].text}")

    anyio.run(go)
    return out


def model_call(subject, spec):
    run = run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    return model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])


def observed(inv_id: str) -> bool:
    with connection.cursor() as cur:
        cur.execute(f"SELECT state FROM {table_name(Invocation)} WHERE id = %s", [uuid.UUID(inv_id)])
        state = cur.fetchone()[0]
    if state in ("FAILED_BEFORE_COMMIT", "AUTHORIZATION_REJECTED", "OUTCOME_UNKNOWN"):
        raise SystemExit(f"invocation {inv_id} ended {state}")
    return state == "OBSERVED"


def through_toolops(subject, spec, call, n: int, *, timeout: float = 30) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        inv, _ = proposal_admit(model_call=call, subject=subject, proposal_id=f"p{uuid.uuid4().hex}",
                                         name=spec.ref, arguments_bytes=f'{{"query": "q{i}"}}'.encode())
        deadline = time.monotonic() + timeout
        while not observed(str(inv.pk)):
            if time.monotonic() > deadline:
                raise SystemExit("timed out waiting for OBSERVED")
            time.sleep(0.001)
        out.append((time.perf_counter() - start) * 1000)
    return out


def direct_session(url: str, n: int) -> list[float]:
    """The official SDK client, one open session, calling the upstream itself."""
    out = []

    async def go():
        async with httpx2.AsyncClient(headers=credential_headers("secret:BENCH_NOTES_TOKEN")) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            await client.list_tools()
            for i in range(n):
                start = time.perf_counter()
                await client.call_tool("notes.search", {"query": f"q{i}"})
                out.append((time.perf_counter() - start) * 1000)

    anyio.run(go)
    return out


def direct_like_worker(url: str, spec, n: int) -> list[float]:
    """One read as the worker makes it (a fresh session on the kept connection, deadline, cap,
    the pin check when the recheck window has passed), outside ToolOps."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        mcp_client.call_tool(url=url, headers=credential_headers("secret:BENCH_NOTES_TOKEN"), name="notes.search",
                             arguments={"query": f"q{i}"}, meta={}, timeout=10, max_bytes=1 << 20,
                             pinned_sha256=spec.executor["definition_sha256"],
                             recheck_seconds=settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS, keep_connection=True)
        out.append((time.perf_counter() - start) * 1000)
    return out


def reissue(subject, spec, url: str, n: int) -> tuple[int, int, int]:
    """The same proposal posted ``n`` times at once: (invocations, notes upstream, tools/call sent)."""
    call = model_call(subject, spec)
    title = f"once-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"title": title, "body": "exactly once"}).encode()

    def post(_):
        try:
            inv, _ = proposal_admit(model_call=call, subject=subject, proposal_id="same-call", name=spec.ref,
                                             arguments_bytes=body)
            return str(inv.pk)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
        ids = set(pool.map(post, range(n)))
    for inv_id in ids:
        deadline = time.monotonic() + 30
        while not observed(inv_id):
            if time.monotonic() > deadline:
                raise SystemExit("timed out waiting for the re-issued call")
            time.sleep(0.01)
    base = url.rsplit("/mcp", 1)[0]
    notes = [x for x in requests.get(f"{base}/_control/notes", timeout=5).json()["notes"] if x["title"] == title]
    sent = [r for r in requests.get(f"{base}/_control/requests", timeout=5).json()["requests"]
            if r["method"] == "tools/call" and (r.get("arguments") or {}).get("title") == title]
    return len(ids), len(notes), len(sent)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    if not settings.CELERY_BROKER_URL.startswith("redis") or connection.vendor != "postgresql":
        raise SystemExit("needs PostgreSQL (DATABASE_URL) and a Redis broker (CELERY_BROKER_URL)")
    n, reissues = (8, 20) if SMOKE else (200, 100)
    upstream, url = start_upstream()
    worker = front_door = None
    try:
        subject, specs = setup(url)
        token = api_token_issue(subject=subject, label="bench")[1]
        (ROOT / "var").mkdir(exist_ok=True)
        front_door, mcp_url = start_front_door()
        worker = start_worker()
        search = specs["notes.search"]
        call = model_call(subject, search)
        through_toolops(subject, search, call, 3, timeout=60)  # warm up: worker imports, jsonschema, first session
        through_front_door(mcp_url, token, search, 5)
        direct_session(url, 3)
        # Interleaved in rounds, so a drifting machine shifts both sides alike.
        door_ms, direct_ms = [], []
        for _ in range(5):
            door_ms += through_front_door(mcp_url, token, search, n // 5)
            direct_ms += direct_session(url, n // 5)
        toolops_ms = through_toolops(subject, search, call, n)
        worker_like_ms = direct_like_worker(url, search, max(3, n // 4))
        invocations, notes, sent = reissue(subject, specs["notes.create"], url, reissues)
    finally:
        for proc in (worker, front_door):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)
        upstream.terminate()
        upstream.wait(timeout=10)
    print(f"{'smoke: ' if SMOKE else ''}{n} read-only calls each way; demo notes MCP server; "
          "direct = the SDK client in one open session; pin recheck window "
          f"{settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS} s (TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS)")
    for name, p in (("p50", 50), ("p99", 99)):
        a, b = pct(door_ms, p), pct(direct_ms, p)
        print(f"latency {name}: MCP front door (inline) {a:7.1f} ms   direct {b:6.1f} ms   added {a - b:+7.1f} ms")
    for name, p in (("p50", 50), ("p99", 99)):
        a, b, c = pct(toolops_ms, p), pct(direct_ms, p), pct(worker_like_ms, p)
        print(f"latency {name}: worker path {a:7.1f} ms   added {a - b:+7.1f} ms"
              f"   [the executor's call alone, outside ToolOps: {c:6.1f} ms]")
    print("(goal: added p50 <= 10 ms, p99 <= 25 ms, through the front door)")
    ok = invocations == 1 and notes == 1 and sent == 1
    print(f"exactly once: {reissues} concurrent re-issues -> {invocations} invocation, {notes} note, {sent} tools/call sent"
          f" {'OK' if ok else 'VIOLATED'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
