"""Private server processes for tests that stop a service: never the shared PostgreSQL/Redis.

* ``private_redis()`` — a redis-server on a free loopback port, with ``stop()``/``start()`` so a
  test can take it away and bring it back on the same port;
* ``private_postgres()`` — a PostgreSQL cluster of its own (initdb in a temporary folder, the
  machine's PostgreSQL 15 binaries), with ``stop()``/``start()`` likewise;
* ``broker_on_private_redis`` (a fixture; import it into the test module) — the Celery app and
  the shared cache moved onto a ``private_redis()`` for one test, so it can stop the broker;
* ``gunicorn_server(env)`` — the production web process (``toolops.gunicorn_conf``) on a free
  port, with the given environment on top of this one;
* ``make_run()`` — ``PORT=<free> make run`` as a newcomer runs it: embedded defaults (SQLite, the
  filesystem broker) in a fresh var/ directory, every demo server on its port derived from PORT.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO_ROOT, require
from toolops.celery import app as celery_app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready after {timeout} s")


class PrivateRedis:
    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="toolops-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_for(self._answers, timeout=10, what=f"redis-server on {self.port}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False


@contextlib.contextmanager
def private_redis():
    require(shutil.which("redis-server") is not None, "needs redis-server on PATH (apt-get install redis-server)")
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


class Gunicorn:
    def __init__(self, port: int, proc: subprocess.Popen, log: Path):
        self.port, self.proc, self.log = port, proc, log
        self.url = f"http://127.0.0.1:{port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def gunicorn_server(env: dict[str, str], *, workers: int = 1, threads: int = 4, ready_path: str = "/api/v1/_ready"):
    """Start ``gunicorn -c python:toolops.gunicorn_conf toolops.wsgi`` and wait until it answers
    (any HTTP status on ``ready_path`` counts: the point is that the socket serves)."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="toolops-gunicorn-", suffix=".log")[1])
    full_env = {**os.environ, "GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(workers),
                "GUNICORN_THREADS": str(threads), "GUNICORN_ACCESSLOG": "", **env}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:toolops.gunicorn_conf", "toolops.wsgi"],
            cwd=REPO_ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT,
        )
    server = Gunicorn(port, proc, log)

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited ({proc.returncode}):\n{server.output()[-3000:]}")
        try:
            requests.get(server.url + ready_path, timeout=5)
            return True
        except (requests.ConnectionError, requests.Timeout):
            return False

    try:
        wait_for(answers, timeout=30, what="gunicorn")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.unlink(missing_ok=True)


# `make run` derives its other servers' ports from PORT (run_console.DEMO_PORT_OFFSETS).
MAKE_RUN_OFFSETS = (1, 765, 766)
# What would point `make run` away from its embedded defaults.
NOT_EMBEDDED = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DB_POOL", "CONN_MAX_AGE", "TOOLOPS_MCP_URL",
                "TOOLOPS_CONSOLE_URL", "TOOLOPS_DEMO_SERVICES_URL", "TOOLOPS_DEMO_NOTES_MCP_URL", "TOOLOPS_EGRESS_ALLOW")


def _port_is_free(port: int) -> bool:
    """Nobody listens there and it can be bound now."""
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_with_neighbours() -> int:
    """A free port p whose `make run` neighbours (p+1, p+765, p+766) are free too. Picked below
    the kernel's ephemeral range (32768 and up here): a port in it can be taken by any outgoing
    connection between this check and `make run`'s bind, which made the demo fail to listen."""
    for _ in range(200):
        port = random.randrange(20000, 32768 - max(MAKE_RUN_OFFSETS))
        if all(_port_is_free(port + o) for o in MAKE_RUN_OFFSETS):
            return port
    raise RuntimeError("no free port with free neighbours")


class MakeRun:
    def __init__(self, port: int, var: Path, proc: subprocess.Popen):
        self.port, self.var, self.proc = port, var, proc
        self.url = f"http://127.0.0.1:{port}"
        self.log = var / "make_run.log"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def token(self) -> str:
        return (self.var / "demo_token").read_text().strip()

    def answers(self, url: str) -> bool:
        """True once ``url`` answers below 500; fails at once if `make run` exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"make run exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
        try:
            return requests.get(url, timeout=2).status_code < 500
        except requests.RequestException:
            return False


@contextlib.contextmanager
def make_run(*, worker: bool = True, timeout: float = 180):
    """``PORT=<free> make run`` from the repository's root, with this interpreter (``-o`` keeps make
    from building a virtualenv), until the console answers — and, with ``worker``, until the Celery
    worker is ready. Stopped with Ctrl-C (SIGINT to its process group), as a person stops it."""
    var = Path(tempfile.mkdtemp(prefix="toolops-make-run-"))
    port = free_port_with_neighbours()
    env = {k: v for k, v in os.environ.items() if k not in NOT_EMBEDDED}
    env.update(TOOLOPS_VAR_DIR=str(var), DEBUG="0", PORT=str(port))
    command = ["make", "-s", "-o", ".venv/.installed", "run", f"PY={sys.executable}"]
    if not worker:
        command.append("RUN_ARGS=--no-worker")
    with (var / "make_run.log").open("wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    run = MakeRun(port, var, proc)
    try:
        wait_for(lambda: run.answers(f"{run.url}/login/"), timeout=timeout, what="make run's console")
        if worker:
            wait_for(lambda: run.answers(run.url) and " ready." in run.output(), timeout=timeout,
                     what="make run's Celery worker")
        yield run
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have stopped it already
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(var, ignore_errors=True)


PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (initdb into a temporary folder) on a free port, with
    ``stop()``/``start()`` to take the database away and bring it back on the same port.
    PostgreSQL refuses to run as root: as root, the server binaries run as ``postgres``."""

    def __init__(self):
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="toolops-pg-"))
        self.data = self.dir / "data"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(PG_BIN / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l", str(self.dir / "log"), "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", "fast", "stop")

    def createdb(self, name: str) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)


@contextlib.contextmanager
def private_postgres():
    require((PG_BIN / "initdb").exists(), f"needs PostgreSQL's server binaries in {PG_BIN}")
    server = PrivatePostgres()
    server.init()
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def broker_on_private_redis(settings):
    """The Celery app and the shared (throttle) cache use a private Redis this test can stop."""
    with private_redis() as redis_server:
        keys = ("broker_url", "broker_read_url", "broker_write_url")
        saved = {k: celery_app.conf[k] for k in keys}
        celery_app.conf.update({k: redis_server.url for k in keys})
        celery_app._pool = None  # drop connections and producers made for the previous broker
        celery_app.amqp._producer_pool = None
        settings.CACHES = {**settings.CACHES, "shared": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_server.url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
        try:
            yield redis_server
        finally:
            celery_app.conf.update(saved)
            celery_app._pool = None
            celery_app.amqp._producer_pool = None
