"""Load through the production web server: 64 concurrent agents against gunicorn + PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/toolops_bench REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/load.py [--clients 64] [--seconds 30] [--smoke]

Black box: gunicorn (``toolops/gunicorn_conf.py``, threaded workers, psycopg pool per process)
is started as a subprocess on a free port; each client is a thread with its own API token and
keep-alive connection that opens a run and a model call, then alternates a proposal (POST,
admission) and a poll (GET of one of its invocations) until the time is up. A monitor samples
``pg_stat_activity`` for the database every 100 ms.

Reported, all from this run:
* every status seen, and the number of responses >= 500 (target 0: the script exits non-zero);
* the most PostgreSQL backends seen on the database vs the bound the settings promise,
  ``WEB_CONCURRENCY × DB_POOL_MAX_SIZE`` (exceeding it exits non-zero);
* HTTP admission throughput (proposals answered 201/s) vs the in-process ``proposal_admit``
  rate on the same database, one thread, no HTTP, measured just before and just after the
  load (their mean: a shared machine drifts within a run) (target ratio >= 0.5);
* p50/p99 latency of proposals and of polls — mostly queueing: each client waits for its answer,
  so p50 ≈ clients ÷ requests/s (Little's law), whatever one request costs;
* the gunicorn processes' CPU in the window per request answered (Linux ``/proc``): what one
  request costs the server, the figure the ratio follows when the cores are busy.

The clients share the machine with the server (2 cores here): their own CPU is part of what the
ratio pays (reported). The server is started first and boots while this process imports and
migrates; nothing is measured before it answers and is idle. ``--smoke`` (or ``BENCH_SMOKE=1``):
8 clients for 3 s against 1 process × 4 threads, a 100-proposal baseline, to check the script
runs (< 30 s on an idle 2-core machine). The script migrates its database and leaves rows behind, so it works on a database whose
name contains ``bench``: given another one, it uses ``<name>_bench`` on the same server
(created if missing).
"""
from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolops.settings")
# A queue of its own: nothing consumes it (the bench measures the web side), purged at the end.
os.environ.setdefault("TOOLOPS_QUEUE", f"bench-load-{uuid.uuid4().hex[:6]}")


def _bench_database_url() -> str | None:
    """DATABASE_URL pointed at a database named *bench* (created if missing); None if not PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        return None
    name = parts.path.lstrip("/")
    if "bench" not in name:
        name = f"{name}_bench"
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return urlunsplit(parts._replace(path=f"/{name}"))


_BENCH_URL = _bench_database_url()
if _BENCH_URL is None:
    print("bench/load.py needs PostgreSQL (DATABASE_URL=postgres://…): skipped")
    sys.exit(0 if ("--smoke" in sys.argv or os.environ.get("BENCH_SMOKE") == "1") else 2)
os.environ["DATABASE_URL"] = _BENCH_URL


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", "2")), help="gunicorn processes")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("GUNICORN_THREADS", "4")), help="threads per process")
    parser.add_argument("--baseline", type=int, default=1000, help="in-process proposals for the baseline rate")
    parser.add_argument("--minimal", action="store_true",
                        help="proposals ask for the compact answer (Prefer: return=minimal) instead of the full record")
    parser.add_argument("--smoke", action="store_true", default=os.environ.get("BENCH_SMOKE") == "1")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.seconds, args.workers, args.threads, args.baseline = 8, 3.0, 1, 4, 100
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_gunicorn(port: int, workers: int, threads: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers),
           "GUNICORN_THREADS": str(threads), "GUNICORN_ACCESSLOG": "", "DEBUG": "0"}
    # Its own process group: stopping it stops its workers too, however this script ends.
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "python:toolops.gunicorn_conf", "toolops.wsgi"],
                            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    atexit.register(stop_server, proc)  # never left behind by an early exit
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to gunicorn's whole group (master and workers), SIGKILL to what is left after 30 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


# The server boots (imports Django and the apps: seconds) while this process does the same and
# migrates; nothing is measured until both are ready and the server is idle.
ARGS = parse_args()
PORT = free_port()
LOG = Path(tempfile.mkstemp(prefix="bench-load-gunicorn-", suffix=".log")[1])
SERVER = launch_gunicorn(PORT, ARGS.workers, ARGS.threads, LOG)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from invocations_app.admission import proposal_admit  # noqa: E402
from invocations_app.runs import model_call_create, run_create  # noqa: E402
from devtools.demo import DEMO_TOOLSPECS  # noqa: E402
from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec  # noqa: E402
from specs_app.services import api_token_issue, toolspec_publish  # noqa: E402
from toolops.celery import app as celery_app  # noqa: E402

WEATHER = next(s for s in DEMO_TOOLSPECS if s["name"] == "weather.get_forecast")
PROPOSAL_ARGS = [json.dumps({"city": f"City {i % 97}", "date": f"2026-07-{10 + i % 19:02d}"}) for i in range(1000)]


def setup(clients: int):
    call_command("migrate", verbosity=0)
    tag = uuid.uuid4().hex[:8]
    tenant = Tenant.objects.create(slug=f"bl-{tag}", name="bench")
    spec = toolspec_publish(spec=ToolSpec.objects.create(**{**WEATHER, "name": f"bl{tag}.weather", "version": 1}))
    capability, _ = Capability.objects.get_or_create(name="weather.read", defaults={"operation_class": "read"})
    tokens = []
    for i in range(clients + 1):  # one agent per client, one more for the in-process baseline
        subject = Subject.objects.create(tenant=tenant, name=f"agent-{i}")
        Grant.objects.create(capability=capability, tenant=tenant, subject=subject, scope_kind="any", reason="bench")
        tokens.append((subject, api_token_issue(subject=subject)[1]))
    return spec, tokens


def in_process_rate(subject, spec, n: int) -> float:
    """Proposals/s through ``proposal_admit`` in this process: same DB, broker, tool."""
    run = run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    call = model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    for i in range(20):  # warm: caches, connection, prepared statements
        proposal_admit(model_call=call, subject=subject, proposal_id=f"w{i}", name=spec.ref, arguments_bytes=PROPOSAL_ARGS[i].encode())
    start = time.perf_counter()
    for i in range(n):
        proposal_admit(model_call=call, subject=subject, proposal_id=f"p{i}", name=spec.ref,
                                arguments_bytes=PROPOSAL_ARGS[i % len(PROPOSAL_ARGS)].encode())
    rate = n / (time.perf_counter() - start)
    connection.close()  # the monitor counts only the server's backends:
    if connection.pool is not None:
        connection.close_pool()  # this process's own pool would keep min_size connections
    return rate


def wait_ready(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"gunicorn exited:\n{log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/v1/_ready")
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit("gunicorn did not answer within 60 s")


class Client(threading.Thread):
    """One agent: a run, a model call, then proposal, poll, proposal, poll… until ``stop``."""

    def __init__(self, port: int, token: str, spec_ref: str, stop: threading.Event, start_gate: threading.Barrier,
                 minimal: bool = False):
        super().__init__(daemon=True)
        self.minimal = minimal
        self.answer_bytes: list[int] = []  # size of each proposal answer's body
        self.port, self.token, self.spec_ref, self.stop, self.start_gate = port, token, spec_ref, stop, start_gate
        self.results: list[tuple[str, int, float, float]] = []  # (kind, status, ended_at, seconds)
        self.error: str | None = None  # why the client stopped (an unexpected exception)
        self.setup_error: str | None = None  # why it could not start (it never joined the load)
        self.dropped = 0  # kept-alive connections the server closed under the client (reconnected)

    def _call(self, conn, kind: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict | None]:
        headers = {"Authorization": f"Bearer {self.token}"}
        if kind == "proposal" and self.minimal:
            headers["Prefer"] = "return=minimal"
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body), "application/json"
        start = time.perf_counter()
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        end = time.perf_counter()
        self.results.append((kind, resp.status, end, end - start))
        if kind == "proposal":
            self.answer_bytes.append(len(raw))
        ok = resp.status < 300 and resp.getheader("Content-Type", "").startswith("application/json")
        return resp.status, json.loads(raw) if ok else None

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def _setup(self) -> str:
        conn = self._connect()
        try:
            status, run = self._call(conn, "setup", "POST", "/api/v1/runs", {"timezone": "UTC"})
            if run is None:
                raise RuntimeError(f"POST /runs answered {status}")
            status, call = self._call(conn, "setup", "POST", f"/api/v1/runs/{run['id']}/model-calls", {})
            if call is None:
                raise RuntimeError(f"POST /model-calls answered {status}")
            return call["id"]
        finally:
            # Waiting at the gate can outlast the server's keep-alive (5 s) while the other
            # clients set up: the load starts on a fresh connection.
            conn.close()

    def run(self) -> None:
        try:
            call_id = self._setup()
        except Exception as exc:  # noqa: BLE001 - reported: this client could not start
            self.setup_error = f"{type(exc).__name__}: {exc}"
            call_id = None
        try:
            self.start_gate.wait()  # every client arrives, started or not, so the gate always opens
        except threading.BrokenBarrierError:
            return
        if call_id is None:
            return
        conn = self._connect()
        invocations, i = [], 0
        try:
            while not self.stop.is_set():
                try:
                    status, inv = self._call(conn, "proposal", "POST", f"/api/v1/model-calls/{call_id}/proposals", {
                        "proposal_id": f"c{i}", "name": self.spec_ref, "arguments": PROPOSAL_ARGS[i % len(PROPOSAL_ARGS)]})
                    if inv:
                        invocations.append(inv["id"])
                    if invocations:
                        self._call(conn, "poll", "GET", f"/api/v1/invocations/{invocations[i % len(invocations)]}")
                except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                    # The server closed a kept-alive connection under us: counted, reconnected.
                    self.dropped += 1
                    conn.close()
                    conn = self._connect()
                i += 1
        except Exception as exc:  # noqa: BLE001 - reported, not swallowed
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()  # the server's graceful stop need not wait out keep-alive connections


def server_cpu_seconds(pid: int) -> float | None:
    """User + system CPU of the gunicorn master and its workers so far (Linux /proc; else None)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        pids = [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        total = 0
        for p in pids:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return total / tick
    except (OSError, ValueError, IndexError):
        return None


def sample_backends(dbname: str, stop: threading.Event, samples: list[int]) -> None:
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'", [dbname]
            ).fetchone()
            samples.append(row[0])
            time.sleep(0.1)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def purge_queue() -> None:
    try:
        with celery_app.connection_for_write() as conn:
            conn.default_channel.queue_purge(settings.CELERY_TASK_DEFAULT_QUEUE)
    except Exception as exc:  # noqa: BLE001 - cleanup only
        print(f"(could not purge the bench queue: {exc})")


def main() -> int:
    args, port, log, server = ARGS, PORT, LOG, SERVER
    spec, tokens = setup(args.clients)
    wait_ready(server, port, log)
    baseline_subject = tokens[-1][0]
    # Half the baseline before the load (the server is up and idle), half after: a shared
    # machine drifts within a run.
    inproc_before = in_process_rate(baseline_subject, spec, args.baseline // 2)

    pool_max = settings.DB_POOL_OPTIONS["max_size"] if settings.DB_POOL else None
    bound = args.workers * pool_max if pool_max else None
    stop, samples = threading.Event(), []
    gate = threading.Barrier(args.clients + 1)
    clients = [Client(port, token, spec.ref, stop, gate, args.minimal) for _, token in tokens[: args.clients]]
    monitor = threading.Thread(target=sample_backends, args=(settings.DATABASES["default"]["NAME"], stop, samples), daemon=True)
    try:
        monitor.start()
        for c in clients:
            c.start()
        try:
            gate.wait(timeout=max(120, 4 * args.clients))
        except threading.BrokenBarrierError:
            stop.set()
            stuck = sum(1 for c in clients if c.is_alive())
            print(f"FAILED: the load never started: {stuck} of {args.clients} clients were still setting up after "
                  f"{max(120, 4 * args.clients)} s (gunicorn log: {log})")
            return 1
        started, client_cpu, server_cpu = time.perf_counter(), time.process_time(), server_cpu_seconds(server.pid)
        time.sleep(args.seconds)
        client_cpu = time.process_time() - client_cpu
        server_cpu_end = server_cpu_seconds(server.pid)
        server_cpu = server_cpu_end - server_cpu if server_cpu is not None and server_cpu_end is not None else None
        stop.set()
        for c in clients:
            c.join(timeout=90)
        monitor.join(timeout=5)
    finally:
        stop.set()
        gate.abort()  # a client still at the gate goes home
        stop_server(server)
        purge_queue()
    inproc_after = in_process_rate(baseline_subject, spec, args.baseline // 2)
    inproc = (inproc_before + inproc_after) / 2

    # Only what completed inside the measured window counts for throughput and latency.
    window_end = started + args.seconds
    results = [r for c in clients for r in c.results]
    measured = [r for r in results if r[0] != "setup" and r[2] <= window_end]
    statuses = Counter(status for _, status, _, _ in results)
    server_errors = sum(n for status, n in statuses.items() if status >= 500)
    admitted = sum(1 for kind, status, _, _ in measured if kind == "proposal" and status == 201)
    http_rate = admitted / args.seconds
    proposal_lat = [s for kind, _, _, s in measured if kind == "proposal"]
    poll_lat = [s for kind, _, _, s in measured if kind == "poll"]
    errors = [c.error for c in clients if c.error]
    not_started = [c.setup_error for c in clients if c.setup_error]
    dropped = sum(c.dropped for c in clients)
    peak = max(samples, default=0)

    print(f"clients: {args.clients}  window: {args.seconds:.0f} s  gunicorn: {args.workers} x {args.threads} threads  "
          f"pool: {settings.DB_POOL_OPTIONS if settings.DB_POOL else 'off'}")
    print(f"responses: {len(results)}  statuses: {dict(sorted(statuses.items()))}  >= 500: {server_errors}")
    print(f"PostgreSQL backends on {settings.DATABASES['default']['NAME']}: peak {peak}, "
          f"median {statistics.median(samples) if samples else 0:.0f}  (bound: {bound if bound else 'no pool'})")
    print(f"in-process proposal_admit:   {inproc:8.0f} /s  (one thread; {inproc_before:.0f} /s before the load, "
          f"{inproc_after:.0f} /s after, {args.baseline // 2} proposals each)")
    print(f"HTTP admission (201s):       {http_rate:8.0f} /s  ratio HTTP/in-process: {http_rate / inproc:.2f}  (target >= 0.5)")
    sizes = [n for c in clients for n in c.answer_bytes]
    print(f"proposal answer:             {statistics.mean(sizes) if sizes else 0:8.0f} bytes on average"
          f"  ({'Prefer: return=minimal' if args.minimal else 'the full record'})")
    print(f"proposal latency p50/p99:    {percentile(proposal_lat, 50) * 1000:6.1f} / {percentile(proposal_lat, 99) * 1000:6.1f} ms"
          f"  ({len(proposal_lat)} requests)")
    print(f"poll latency p50/p99:        {percentile(poll_lat, 50) * 1000:6.1f} / {percentile(poll_lat, 99) * 1000:6.1f} ms"
          f"  ({len(poll_lat)} requests)")
    print(f"load generator CPU:          {client_cpu:6.1f} s in the {args.seconds:.0f} s window (shares the cores with the server)")
    in_window = len(proposal_lat) + len(poll_lat)
    if server_cpu is not None and in_window:
        print(f"gunicorn CPU:                {server_cpu:6.1f} s in the window: {server_cpu / in_window * 1000:.1f} ms per request "
              f"({in_window} requests; in-process proposal_admit: {1000 / inproc:.1f} ms per proposal, wall)")
    print(f"clients that could not start: {len(not_started)}{'  ' + str(not_started[:3]) if not_started else ''}")
    print(f"connections the server dropped under a client: {dropped}  (each reconnected and counted)")
    if errors:
        print(f"client errors ({len(errors)}): {errors[:3]}")
    failed = server_errors > 0 or errors or not_started or dropped or (bound is not None and peak > bound)
    if failed:
        print(f"FAILED (gunicorn log: {log})")
        return 1
    log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
