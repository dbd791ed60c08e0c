"""Health and readiness on every HTTP process (toolops/health.py): ``/healthz`` answers with no
I/O and no credentials; ``/readyz`` names the dependency that is down — the database, the broker,
the shared Redis — and is 200 again once it is back. Real processes (gunicorn, uvicorn) on a
private PostgreSQL and a private Redis, which the test stops and starts; never the shared ones.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests
from django.conf import settings

from tests.conftest import REPO_ROOT
from tests.mcp_server.conftest import McpServer
from tests.servers import gunicorn_server, private_postgres, private_redis, wait_for


def test_healthz_answers_without_database_credentials_or_a_known_host(client):
    # No django_db mark: any query would fail the test.
    response = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")  # a pod address not in ALLOWED_HOSTS
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_readyz_is_200_with_its_checks_named_on_a_migrated_database(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    expected = {"database": "ok", "broker": "ok"} | ({"redis": "ok"} if settings.REDIS_URL else {})
    assert response.json()["checks"] == expected  # Redis is checked only where a REDIS_URL names it


def test_readyz_names_a_database_whose_migrations_are_not_applied(tmp_path):
    """A fresh SQLite file in an empty var/ directory: reachable, not migrated."""
    script = ("from django.test import Client; r = Client().get('/readyz'); "
              "print(r.status_code, r.content.decode())")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=REPO_ROOT, capture_output=True,
                         text=True, env={**env, "TOOLOPS_VAR_DIR": str(tmp_path)}, check=True).stdout
    status, _, body = out.strip().splitlines()[-1].partition(" ")  # after the shell's own banner
    assert status == "503"
    assert '"failing": ["database"]' in body and '"broker": "ok"' in body


def _ready(url: str) -> tuple[int, dict]:
    response = requests.get(url, timeout=10)
    assert response.headers["Content-Type"].startswith("application/json")
    return response.status_code, response.json()


def _until(url: str, status: int, timeout: float = 20) -> dict:
    """The body of the first answer with ``status`` (polling: a dependency takes a moment)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = _ready(url)
        if last[0] == status:
            return last[1]
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} within {timeout} s; last answer: {last}")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """A private PostgreSQL (migrated) and Redis, with the gunicorn web and the uvicorn MCP
    processes on them."""
    tmp = tmp_path_factory.mktemp("health")
    with private_postgres() as pg, private_redis() as redis_server:
        pg.createdb("toolops_health")
        env = {"DATABASE_URL": pg.url("toolops_health"), "REDIS_URL": redis_server.url,
               "CELERY_BROKER_URL": redis_server.url.rsplit("/", 1)[0] + "/1", "TOOLOPS_VAR_DIR": str(tmp / "var"),
               "DEBUG": "0"}
        full_env = {**os.environ, **env}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=full_env,
                       check=True)
        mcp = McpServer(full_env, tmp / "mcp.log").start()
        try:
            with gunicorn_server(env, workers=1) as web:
                yield pg, redis_server, web.url, f"http://127.0.0.1:{mcp.port}"
        finally:
            mcp.stop()


@pytest.mark.postgres
@pytest.mark.redis
def test_readyz_follows_postgres_and_redis_going_away_and_coming_back_on_web_and_mcp(services):
    pg, redis_server, web, mcp = services
    for base in (web, mcp):
        health = requests.get(f"{base}/healthz", timeout=5, allow_redirects=False)
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        assert _until(f"{base}/readyz", 200)["checks"] == {"database": "ok", "broker": "ok", "redis": "ok"}

    pg.stop()
    try:
        for base in (web, mcp):
            started = time.monotonic()
            body = _until(f"{base}/readyz", 503)
            assert body["failing"] == ["database"], body
            assert time.monotonic() - started < 15  # a probe answers within its own timeout
            assert str(pg.port) not in str(body) and "127.0.0.1" not in str(body) and "postgres" not in str(body)
            assert requests.get(f"{base}/healthz", timeout=5).status_code == 200  # alive, only not ready
    finally:
        pg.start()
    for base in (web, mcp):
        _until(f"{base}/readyz", 200)

    redis_server.stop()
    try:
        for base in (web, mcp):
            body = _until(f"{base}/readyz", 503)
            assert body["failing"] == ["broker", "redis"], body
            assert str(redis_server.port) not in str(body)
    finally:
        redis_server.start()
    for base in (web, mcp):
        _until(f"{base}/readyz", 200)
