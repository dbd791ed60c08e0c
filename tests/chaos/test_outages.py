"""Chaos: the production processes under load while the broker or the database goes away.

A private Redis (broker + caches) and a private PostgreSQL (tests/servers.py), the production
web server (gunicorn) and a Celery worker with its beat, all real. A few clients post proposals
for a read-only tool and poll them while one service is stopped for ~15 s and started again.
Nothing is restarted by hand. Whatever happens:

* every proposal answers 201 or 503 problem+json with Retry-After (never another 5xx, never HTML);
* a broker outage does not stop admission: proposals keep answering 201 (queued) — the outbox
  sweep (invocations_app/dispatch.py) sends their messages once Redis is back, empty;
* 0 lost (every 201 ends terminal), 0 stuck 90 s after recovery, ``audit_invariants`` clean.

The figures (answers per phase, seconds to drain after recovery) are printed (``pytest -s``).
"""
from __future__ import annotations

import collections
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import requests

from tests.conftest import REPO_ROOT
from tests.integration.conftest import Worker
from tests.servers import gunicorn_server, private_postgres, private_redis
from toolops.runtime.states import TERMINAL

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

TOOL = "weather.get_forecast@1"  # read_only, allowed without confirmation: AUTHORIZED, then run
ARGS = '{"city": "Paris", "date": "2026-07-20"}'
OUTAGE_SECONDS = 15
SWEEP_SECONDS = 3
DRAIN_LIMIT_SECONDS = 90
TERMINAL_STATES = sorted(s.value for s in TERMINAL)

# The demo's weather.read grant counts calls per minute (in Redis): during a Redis outage such
# calls answer 503, since the limit cannot be checked. The load here is about dispatch, so the
# agent gets the same capability without a counting limit (through the audited grant service).
UNLIMITED_WEATHER = """
from django.contrib.auth import get_user_model
from specs_app.models import Grant
from specs_app.services import grant_create, grant_revoke
admin = get_user_model().objects.filter(is_superuser=True).first()
old = Grant.objects.get(capability__name="weather.read", revoked_at__isnull=True)
grant_revoke(grant=old, user=admin, reason="chaos test: no counting limit")
grant_create(user=admin, capability=old.capability, tenant=old.tenant, subject=old.subject, scope_kind=old.scope_kind,
             scope_values=old.scope_values, limits={}, effect=old.effect, tool_refs=old.tool_refs, expires_at=None,
             reason="chaos test: no counting limit")
"""


@dataclass
class Stack:
    pg: object
    redis: object
    web: object
    worker: Worker
    token: str
    env: dict
    dsn: str

    def query(self, sql: str, params=()) -> list[tuple]:
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            return conn.execute(sql, params).fetchall()

    def not_terminal(self) -> dict[str, int]:
        rows = self.query("SELECT state, count(*) FROM invocations_app_invocation WHERE NOT (state = ANY(%s)) GROUP BY state",
                          (TERMINAL_STATES,))
        return dict(rows)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chaos")
    with private_postgres() as pg, private_redis() as redis_server:
        pg.createdb("toolops_chaos")
        env = {
            "DATABASE_URL": pg.url("toolops_chaos"), "REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": redis_server.url.rsplit("/", 1)[0] + "/1", "TOOLOPS_QUEUE": "chaos",
            "TOOLOPS_SWEEP_SECONDS": str(SWEEP_SECONDS), "TOOLOPS_VAR_DIR": str(tmp / "var"),
            "DB_POOL_TIMEOUT": "3", "TOOLOPS_OUTAGE_RETRY_AFTER": "1", "DEBUG": "0", "TOOLOPS_API_RATE": "off",
        }
        full_env = {**os.environ, **env}
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=full_env, check=True)
        token = "tko_chaos_" + secrets.token_urlsafe(12)
        subprocess.run([*manage, "load_demo", "--token", token], cwd=REPO_ROOT, env=full_env, check=True, capture_output=True)
        subprocess.run([*manage, "shell", "-c", UNLIMITED_WEATHER], cwd=REPO_ROOT, env=full_env, check=True)
        with gunicorn_server(env, workers=1, threads=8) as web:
            worker = Worker(full_env, tmp / "worker.log").start()
            try:
                yield Stack(pg, redis_server, web, worker, token, full_env, pg.url("toolops_chaos"))
            finally:
                worker.stop()


@dataclass
class Answer:
    at: float
    kind: str  # "propose" | "poll"
    status: int  # 0: no HTTP answer at all
    content_type: str = ""
    retry_after: str | None = None
    invocation_id: str | None = None
    detail: str = ""


@dataclass
class Load:
    """``clients`` threads, each with its own run and model call, posting proposals (and polling
    every third one it got) until stopped."""

    stack: Stack
    clients: int = 4
    pause: float = 0.1
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "Load":
        self.threads = [threading.Thread(target=self._client, args=(i, self._model_call()), daemon=True)
                        for i in range(self.clients)]
        for t in self.threads:
            t.start()
        return self

    def finish(self) -> list[Answer]:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        return self.answers

    def _session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.stack.token}"
        return session

    def _model_call(self) -> str:
        session, base = self._session(), self.stack.web.url
        run = session.post(base + "/api/v1/runs", json={}, timeout=30)
        assert run.status_code == 201, run.text[:300]
        call = session.post(f"{base}/api/v1/runs/{run.json()['id']}/model-calls", json={}, timeout=30)
        assert call.status_code == 201, call.text[:300]
        return call.json()["id"]

    def _client(self, number: int, model_call: str) -> None:
        session, base = self._session(), self.stack.web.url
        for n in range(10**9):
            if self.stop.is_set():
                return
            body = {"proposal_id": f"c{number}-{n}", "name": TOOL, "arguments": ARGS}
            answer = self._ask("propose", lambda: session.post(f"{base}/api/v1/model-calls/{model_call}/proposals",
                                                               json=body, timeout=30))
            if answer.status == 201 and n % 3 == 0:
                self._ask("poll", lambda: session.get(f"{base}/api/v1/invocations/{answer.invocation_id}", timeout=30))
            time.sleep(self.pause)

    def _ask(self, kind: str, send) -> Answer:
        at = time.monotonic()
        try:
            resp = send()
        except requests.RequestException as exc:
            answer = Answer(at, kind, 0, detail=repr(exc))
        else:
            content_type = resp.headers.get("Content-Type", "")
            body = resp.json() if content_type.startswith(("application/json", "application/problem+json")) else {}
            answer = Answer(at, kind, resp.status_code, content_type, resp.headers.get("Retry-After"),
                            body.get("id") if resp.status_code in (200, 201) else None, resp.text[:200])
        self.answers.append(answer)
        return answer


def chaos_run(stack: Stack, stop_service, start_service, name: str) -> dict:
    """Load → stop → OUTAGE_SECONDS → start → load a little longer → wait for the drain; checks
    every answer and returns the figures."""
    web_pid, worker_pid = stack.web.proc.pid, stack.worker.proc.pid
    stack.worker.mark()
    load = Load(stack).start()
    time.sleep(4)
    down_at = time.monotonic()
    stop_service()
    time.sleep(OUTAGE_SECONDS)
    start_service()
    up_at = time.monotonic()
    time.sleep(6)
    answers = load.finish()
    load_end = time.monotonic()

    # Every answer: 201/200 or a 503 problem with Retry-After; nothing else, never HTML.
    wrong = [a for a in answers if not (
        (a.kind == "propose" and a.status == 201 and a.content_type == "application/json")
        or (a.kind == "poll" and a.status == 200 and a.content_type == "application/json")
        or (a.status == 503 and a.content_type == "application/problem+json" and a.retry_after)
    )]
    assert not wrong, (name, [(a.kind, a.status, a.content_type, a.detail) for a in wrong[:10]])

    # 0 stuck: everything recorded reaches a terminal state within DRAIN_LIMIT_SECONDS.
    deadline, left = load_end + DRAIN_LIMIT_SECONDS, None
    while time.monotonic() < deadline:
        try:
            left = stack.not_terminal()
        except psycopg.OperationalError:
            left = None
        if left == {}:
            break
        time.sleep(0.5)
    drained_at = time.monotonic()
    assert left == {}, (name, "stuck after recovery", left, "worker running:", stack.worker.running, stack.worker.output()[-12000:])

    # 0 lost: every 201 names an invocation that exists and is terminal.
    admitted = [a.invocation_id for a in answers if a.kind == "propose" and a.status == 201]
    states = dict(stack.query("SELECT id::text, state FROM invocations_app_invocation WHERE id::text = ANY(%s)", (admitted,)))
    assert len(states) == len(admitted) and set(states.values()) <= set(TERMINAL_STATES), (name, collections.Counter(states.values()))
    executed = collections.Counter(states.values())

    audit = subprocess.run([sys.executable, "manage.py", "audit_invariants"], cwd=REPO_ROOT, env=stack.env,
                           capture_output=True, text=True, timeout=120)
    assert audit.returncode == 0, (audit.stdout[-3000:], audit.stderr[-1000:])

    # Nothing was restarted: the same web and worker processes, gunicorn booted its worker once.
    assert stack.web.proc.poll() is None and stack.web.proc.pid == web_pid
    assert stack.worker.running and stack.worker.proc.pid == worker_pid
    assert stack.web.output().count("Booting worker") == 1, stack.web.output()[-3000:]

    def phase(a: Answer) -> str:
        return "before" if a.at < down_at else "outage" if a.at < up_at else "after"

    figures = {
        "answers": dict(collections.Counter((phase(a), a.kind, a.status) for a in answers)),
        "admitted_201": len(admitted), "final_states": dict(executed),
        "admitted_during_outage": sum(1 for a in answers if a.kind == "propose" and a.status == 201 and phase(a) == "outage"),
        "drain_seconds_after_restart": round(drained_at - up_at, 1),
        "drain_seconds_after_load_end": round(drained_at - load_end, 1),
    }
    print(f"\nCHAOS {name}: {figures}")
    return figures


def test_a_redis_outage_under_load_admits_201_and_loses_nothing(stack):
    figures = chaos_run(stack, stack.redis.stop, stack.redis.start, "redis")
    # Admission does not need the broker: proposals kept answering 201 (queued) while it was down.
    assert figures["admitted_during_outage"] > 0, figures
    # Their messages were never published (or went with the restarted, empty Redis): the sweep sent them.
    assert "sweep: " in stack.worker.output()
    assert figures["final_states"] == {"OBSERVED": figures["admitted_201"]}, figures


def test_a_postgres_outage_under_load_answers_503_and_loses_nothing(stack):
    figures = chaos_run(stack, stack.pg.stop, stack.pg.start, "postgres")
    assert any(status == 503 for (phase, _, status) in figures["answers"] if phase == "outage"), figures
    assert figures["final_states"] == {"OBSERVED": figures["admitted_201"]}, figures
