"""ORM calls from the MCP SDK's async handlers.

Django's ORM is synchronous, so each handler hands its database work to a worker thread in one
piece (``in_db_thread``). Threads come from the event loop's default executor, sized by
``TOOLOPS_MCP_DB_THREADS`` at start-up; each keeps its own persistent connection, replaced
when broken or older than ``CONN_MAX_AGE`` (``_recycle_connections``). The process therefore
drops the web processes' psycopg pool (``use_persistent_connections``, at start-up): with the
pool, every unit of work checked a connection out and back in, paying the pool's health check
(a round trip) each time — several per MCP request. A handler cancelled by
a disconnecting client stops awaiting, but the thread finishes its unit of work: an admission
is never half-written.
"""
from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from django.conf import settings
from django.db import connections

T = TypeVar("T")


def use_persistent_connections() -> None:
    """One persistent connection per database thread instead of the pool (before any query)."""
    from toolops.celery import databases_use_persistent_connections

    databases_use_persistent_connections(settings.DATABASES, conn_max_age=settings.UNPOOLED_CONN_MAX_AGE)


def _recycle_connections() -> None:
    """Close this thread's connection when it is broken or past ``CONN_MAX_AGE`` — what
    ``close_old_connections`` does, without re-arming Django's health check: that check costs a
    ``SELECT 1`` round trip before the next query, and a handler makes several units of work per
    request. A connection the server dropped fails one unit and is replaced after it."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        obsolete = conn.close_at is not None and time.monotonic() >= conn.close_at
        if conn.errors_occurred or obsolete or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close_if_unusable_or_obsolete()


def _unit(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        _recycle_connections()


async def in_db_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in a database thread (not one shared "thread-sensitive" thread: handlers of
    different requests must not queue behind each other's waits), in a copy of the caller's
    context. A plain executor hand-off: asgiref's ``sync_to_async`` also copies the thread's
    context changes back into the caller's afterwards, which nothing here needs and which
    costs more than the hand-off itself on every unit of work."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(None, context.run, _unit, fn, args, kwargs)


def install_db_executor() -> None:
    """Size the running loop's default executor, which ``in_db_thread`` uses."""
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=settings.TOOLOPS_MCP_DB_THREADS, thread_name_prefix="toolops-mcp-db")
    )
