"""Liveness and readiness, shared by every HTTP process (the web's ``/healthz``/``/readyz`` views
in toolops/urls.py and the MCP server's, mcp_server/server.py).

``liveness()`` does no I/O: the process answers. ``readiness()`` checks what serving needs — the
database answers and every migration on disk is applied; the Celery broker answers; the shared
Redis (rate limits, grant counters) answers when one is configured — each with a short timeout.
The body names each check and says ``ok`` or ``unavailable``, never an exception's text: a
driver's message can hold a host name or a user, and probes are unauthenticated.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Callable

from django.conf import settings

logger = logging.getLogger(__name__)

# Seconds a readiness check may wait on a dependency: a probe must answer before its own timeout.
CHECK_TIMEOUT = 2.0


def liveness() -> dict:
    return {"status": "ok"}


def database_ready() -> None:
    """A round trip, and every migration on disk recorded as applied (one ``SELECT``)."""
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    pool = getattr(connection, "pool", None)  # the web's psycopg pool, on PostgreSQL
    if pool is not None:
        # A borrow waits up to DB_POOL_TIMEOUT for a connection; a probe must answer sooner.
        pool.open()  # as Django's first connection does; a no-op once open
        with pool.connection(timeout=CHECK_TIMEOUT):
            pass
    applied = MigrationRecorder(connection).applied_migrations()
    missing = _leaf_migrations() - set(applied)
    if missing:
        raise LookupError(f"{len(missing)} migration(s) not applied")


@functools.lru_cache(maxsize=1)
def _leaf_migrations() -> frozenset:
    """The newest migration of each app, read from disk once per process (the code does not change)."""
    from django.db.migrations.loader import MigrationLoader

    return frozenset(MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes())


def broker_ready() -> None:
    from toolops.celery import app

    url = app.conf.broker_write_url or app.conf.broker_url
    if url.startswith(("redis://", "rediss://", "unix://")):
        _redis(url).ping()
        return
    # The embedded filesystem broker (and any other transport): kombu connects once.
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT)


def redis_ready() -> None:
    _redis(settings.REDIS_URL).ping()


@functools.lru_cache(maxsize=4)
def _redis(url: str):
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=CHECK_TIMEOUT, socket_timeout=CHECK_TIMEOUT)


def checks() -> dict[str, Callable[[], None]]:
    """What this deployment's processes need to serve, by name."""
    found = {"database": database_ready, "broker": broker_ready}
    if settings.REDIS_URL:  # rate limits and grant counters live there (invocations_app/counters.py)
        found["redis"] = redis_ready
    return found


def readiness(named: dict[str, Callable[[], None]] | None = None) -> tuple[int, dict]:
    """(HTTP status, body): 200 when every check passes, else 503 with the failing ones named."""
    results, started = {}, time.monotonic()
    for name, check in (named if named is not None else checks()).items():
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", logged for the operator
            logger.warning("readiness check %s failed: %s", name, type(exc).__name__)
            results[name] = "unavailable"
        else:
            results[name] = "ok"
    failing = sorted(name for name, result in results.items() if result != "ok")
    body = {"status": "unavailable" if failing else "ok", "checks": results,
            "duration_ms": round((time.monotonic() - started) * 1000, 1)}
    if failing:
        body["failing"] = failing
    return (503 if failing else 200), body
