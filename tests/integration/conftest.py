"""Real parts for execution tests: the demo services over HTTP, a Celery worker process (with
beat) on Redis, all on the PostgreSQL test database. Nothing here is mocked.

Skipped locally when PostgreSQL or Redis is missing; an error under TOOLOPS_REQUIRE_SERVICES=1.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
from rest_framework.test import APIClient

from tests.builders import Agent, make_token
from tests.conftest import REPO_ROOT, open_demo_services, require_postgres, require_redis


@pytest.fixture(scope="session")
def demo_services(tmp_path_factory):
    """The demo calendar/payments/web services on an ephemeral loopback port."""
    from demo_services.server import make_server

    server = make_server("127.0.0.1", 0, tmp_path_factory.mktemp("demo-services"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield DemoServices(base)
    server.shutdown()
    server.server_close()


class DemoServices:
    def __init__(self, base: str):
        self.base = base

    def reset(self) -> None:
        requests.post(f"{self.base}/_control/reset", timeout=5).raise_for_status()

    def fault(self, service: str, **fault) -> None:
        requests.post(f"{self.base}/_control/faults", json={"service": service, **fault}, timeout=5).raise_for_status()

    def calendar_events(self, calendar_id: str) -> list:
        body = requests.get(f"{self.base}/calendar/calendars/{calendar_id}/events", timeout=5).json()
        return body["events"] if isinstance(body, dict) else body

    def transfers(self, to_account: str) -> list:
        body = requests.get(f"{self.base}/payments/transfers", params={"to_account": to_account}, timeout=5).json()
        return body["transfers"] if isinstance(body, dict) else body

    def requests_log(self, service: str) -> list:
        body = requests.get(f"{self.base}/_control/requests", params={"service": service}, timeout=5).json()
        return body["requests"] if isinstance(body, dict) else body


class Worker:
    """A real ``celery worker -B`` process on its own queue, logging to a file.

    One worker serves every test of a module (``module_worker``); ``mark()`` starts a test's
    view of the log, so ``output()`` and the waits read only what happened since.
    """

    # What the beat of CELERY_BEAT_SCHEDULE sends (toolops/settings.py).
    BEAT_TASKS = ("invocations.enqueue_due", "invocations.reconcile", "invocations.confirmations_expire_due", "webhooks.deliver_due",
                  "specs.upstream_refresh")

    def __init__(self, env: dict, log_path: Path):
        self.env, self.log_path, self.proc, self.log, self.offset = env, log_path, None, None, 0

    def start(self) -> "Worker":
        self.log = open(self.log_path, "ab")
        self.offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "toolops", "worker", "-B", "--loglevel=INFO", "--concurrency=2",
             "-Q", self.env["TOOLOPS_QUEUE"], "--without-gossip", "--without-mingle", "-n", f"w{uuid.uuid4().hex[:6]}@%h",
             "-s", str(self.log_path.with_suffix(".beat"))],
            cwd=REPO_ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"ready." in self._log_bytes():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.output()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError("worker did not become ready in 60 s")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mark(self) -> None:
        """From now on ``output()`` and the waits see only what the worker logs after this point."""
        self.offset = self.log_path.stat().st_size

    def child_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_children(self) -> None:
        """SIGKILL the pool processes (as a crashed worker would die), keeping the parent."""
        for pid in self.child_pids():
            os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.running:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=20)
        if self.log:
            self.log.close()
            self.log = None

    def _log_bytes(self) -> bytes:
        with open(self.log_path, "rb") as f:
            f.seek(self.offset)
            return f.read()

    def output(self) -> str:
        """The log since the last ``mark()`` (the current test's part)."""
        return self._log_bytes().decode(errors="replace")

    def wait_for_beat(self, *tasks: str, timeout: float = 30.0) -> None:
        """Wait until each of ``tasks`` was sent by the beat *after this call* and finished.

        A condition instead of a sleep: "the beat ran again and did nothing" is then a fact
        read from the worker's own log, not a hope that N seconds were enough.
        """
        unknown = set(tasks) - set(self.BEAT_TASKS)
        assert not unknown, f"not beat tasks: {unknown}"
        since = self.log_path.stat().st_size

        def finished() -> bool:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
            for task in tasks:
                received = set(re.findall(rf"Task {re.escape(task)}\[([0-9a-f-]+)\] received", text))
                done = set(re.findall(rf"Task {re.escape(task)}\[([0-9a-f-]+)\] succeeded", text))
                if not received & done:
                    return False
            return True

        wait_for(finished, timeout=timeout, interval=0.1)


def _purge(queue: str) -> None:
    """Messages left by earlier tests (enqueued with no worker running) must not run now."""
    from toolops.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


@pytest.fixture(scope="module")
def module_worker(demo_services, django_db_setup, tmp_path_factory):
    """One real worker for all the tests of a module (starting one costs ~2 s), on the test database.

    Built here, started by the first test that asks for ``worker`` and stopped for a test that
    does not (``_no_worker_unless_asked``); ``pytest_collection_modifyitems`` below runs a
    module's worker-free tests first, so each module starts its worker once.

    Isolation between the tests sharing it: pytest-django flushes every table after each
    (transactional) test — the worker talks to the same test database and only ever sees
    committed rows — and ``worker_env`` purges the queue and resets the demo services before
    the next one. Nothing here touches the database (only its name is read), so no
    ``django_db_blocker`` is needed. The worker's per-process caches survive between tests; they
    hold SQL plans and clients, never rows a flush removes.
    """
    from django.conf import settings
    from django.db import connection

    from worker.egress_net import allow_with

    db = settings.DATABASES["default"]
    tmp = tmp_path_factory.mktemp("worker")
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "TOOLOPS_QUEUE": settings.CELERY_TASK_DEFAULT_QUEUE,
        "TOOLOPS_DEMO_SERVICES_URL": demo_services.base,
        "TOOLOPS_VAR_DIR": str(tmp / "var"),
        **_settings_env(settings),
        # Nothing is open by default: the demo services' address, opened as an operator would.
        "TOOLOPS_EGRESS_ALLOW": ",".join(allow_with(settings.TOOLOPS_EGRESS_ALLOW, demo_services.base)),
    }
    w = Worker(env, tmp / "worker.log")
    yield w
    w.stop()


@pytest.fixture
def worker_env(module_worker, demo_services, settings, transactional_db):
    """A clean slate for one worker test: real services required, demo services reset, queue purged."""
    require_postgres()
    require_redis()
    from tests.conftest import require

    require(settings.CELERY_BROKER_URL.startswith("redis"), "needs a Redis broker: CELERY_BROKER_URL=redis://...")
    open_demo_services(settings, demo_services.base)
    demo_services.reset()
    _purge(settings.CELERY_TASK_DEFAULT_QUEUE)
    yield module_worker.env


def _settings_env(settings) -> dict:
    """The settings a test may change that the worker reads from its environment."""
    return {
        "TOOLOPS_TOOL_SECRETS": json.dumps(settings.TOOLOPS_TOOL_SECRETS),
        "TOOLOPS_EGRESS_ALLOW": ",".join(settings.TOOLOPS_EGRESS_ALLOW),
        "TOOLOPS_WEBHOOK_EGRESS_ALLOW": ",".join(settings.TOOLOPS_WEBHOOK_EGRESS_ALLOW),
        "TOOLOPS_WEBHOOK_BACKOFF_SECONDS": str(settings.TOOLOPS_WEBHOOK_BACKOFF_SECONDS),
        "TOOLOPS_WEBHOOK_MAX_ATTEMPTS": str(settings.TOOLOPS_WEBHOOK_MAX_ATTEMPTS),
        "TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS": str(settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS),
    }


@pytest.fixture
def worker(request, module_worker, worker_env, settings):
    """The module's worker, running (started, or restarted if it died or the test changed a
    setting it reads at start), its log marked for this test."""
    wanted = _settings_env(settings)
    if module_worker.running and any(module_worker.env.get(k) != v for k, v in wanted.items()):
        module_worker.stop()
    module_worker.env.update(wanted)
    if not module_worker.running:
        module_worker.stop()  # closes the log of a worker that died
        module_worker.start()
    module_worker.mark()
    yield module_worker
    # Shown by pytest when a test fails; the periodic beat chatter is left out.
    noise = ("Scheduler: Sending", "invocations.enqueue_due", "invocations.reconcile[", "confirmations_expire_due",
             "webhooks.deliver_due")
    lines = [line for line in module_worker.output().splitlines() if not any(n in line for n in noise)]
    print("---- worker log ----\n" + "\n".join(lines[-120:]))
    if getattr(request.node, "call_failed", False):
        # A failed test may have left work in flight: the next test gets a fresh worker.
        module_worker.stop()


@pytest.fixture(autouse=True)
def _no_worker_unless_asked(request):
    """A test that does not ask for ``worker`` runs with none: what it enqueues stays queued,
    and no beat acts on its rows (e.g. "PREPARED, no worker yet" stays PREPARED)."""
    if "worker" not in request.fixturenames:
        request.getfixturevalue("module_worker").stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call":
        item.call_failed = report.failed


def pytest_collection_modifyitems(items):
    """Within each integration module, run the tests that want no worker first (stable order
    otherwise), so the module's shared worker starts once and is never stopped in between.

    Runs after pytest-django's own reordering (which is ``tryfirst``) and only permutes a
    module's items among the positions they already hold.
    """
    here = Path(__file__).parent
    slots: dict[Path, list[int]] = {}
    for i, item in enumerate(items):
        if Path(str(item.fspath)).parent == here:
            slots.setdefault(Path(str(item.fspath)), []).append(i)
    for positions in slots.values():
        module_items = [items[i] for i in positions]
        ordered = sorted(module_items, key=lambda item: "worker" in item.fixturenames)
        for i, item in zip(positions, ordered):
            items[i] = item


@pytest.fixture
def demo_agent(transactional_db, demo_services, settings):
    """The demo data (ToolSpecs with executors, grants) and an API client for its agent.

    The web.read grant names the demo services' address, so it is loaded once that is known."""
    from devtools.demo import load_demo
    from specs_app.models import Subject

    open_demo_services(settings, demo_services.base)

    load_demo(token="tko_integration_token")
    subject = Subject.objects.get(name="demo-agent")
    agent = Agent(APIClient(), "tko_integration_token")
    agent.subject = subject
    return agent


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def remote_key_of(invocation_id) -> str:
    """The key the remote was sent for an invocation: one derived key on every attempt, never the raw key."""
    from invocations_app.models import Attempt, Invocation

    keys = set(Attempt.objects.filter(invocation_id=invocation_id).values_list("remote_key", flat=True))
    raw = Invocation.objects.get(pk=invocation_id).idempotency_key
    assert len(keys) == 1, keys
    [key] = keys
    assert key.startswith("tk1-") and key != raw and raw not in key
    return key


__all__ = ["wait_for", "make_token", "remote_key_of"]
