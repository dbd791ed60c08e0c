"""Real parts for execution tests: the demo services over HTTP, a Celery worker process (with
beat) on Redis, all on the PostgreSQL test database. Nothing here is mocked.

Skipped locally when PostgreSQL or Redis is missing; an error under TOOLOPS_REQUIRE_SERVICES=1.
"""
from __future__ import annotations

import json
import os
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
from tests.conftest import REPO_ROOT, require_postgres, require_redis


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
    """A real ``celery worker -B`` process on its own queue, logging to a file."""

    def __init__(self, env: dict, log_path: Path):
        self.env, self.log_path, self.proc = env, log_path, None

    def start(self) -> "Worker":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "toolops", "worker", "-B", "--loglevel=INFO", "--concurrency=2",
             "-Q", self.env["TOOLOPS_QUEUE"], "--without-gossip", "--without-mingle", "-n", f"w{uuid.uuid4().hex[:6]}@%h",
             "-s", str(self.log_path.with_suffix(".beat"))],
            cwd=REPO_ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"ready." in self.log_path.read_bytes():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError("worker did not become ready in 60 s")

    def child_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_children(self) -> None:
        """SIGKILL the pool processes (as a crashed worker would die), keeping the parent."""
        for pid in self.child_pids():
            os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def worker_env(demo_services, tmp_path, settings, django_db_setup):
    require_postgres()
    redis_url = require_redis()
    from tests.conftest import require

    require(settings.CELERY_BROKER_URL.startswith("redis"), "needs a Redis broker: CELERY_BROKER_URL=redis://...")
    from django.db import connection

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "TOOLOPS_QUEUE": queue,
        "TOOLOPS_DEMO_SERVICES_URL": demo_services.base,
        "TOOLOPS_TOOL_SECRETS": json.dumps(settings.TOOLOPS_TOOL_SECRETS),
        "TOOLOPS_EGRESS_ALLOW": ",".join(settings.TOOLOPS_EGRESS_ALLOW),
        "TOOLOPS_VAR_DIR": str(tmp_path / "var"),
    }
    settings.TOOLOPS_DEMO_SERVICES_URL = demo_services.base
    demo_services.reset()
    # Messages left by earlier tests (enqueued with no worker running) must not run now.
    from toolops.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)
    yield env


@pytest.fixture
def worker(worker_env, tmp_path, transactional_db):
    w = Worker(worker_env, tmp_path / "worker.log").start()
    yield w
    w.stop()
    # Shown by pytest when a test fails; the periodic beat chatter is left out.
    noise = ("Scheduler: Sending", "invocations.enqueue_due", "invocations.reconcile[", "confirmations_expire_due")
    lines = [line for line in w.output().splitlines() if not any(n in line for n in noise)]
    print("---- worker log ----\n" + "\n".join(lines[-120:]))


@pytest.fixture
def demo_agent(transactional_db, demo_services, settings):
    """The demo data (ToolSpecs with executors, grants) and an API client for its agent.

    The web.read grant names the demo services' address, so it is loaded once that is known."""
    from specs_app.demo import load_demo
    from specs_app.models import Subject

    settings.TOOLOPS_DEMO_SERVICES_URL = demo_services.base

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
