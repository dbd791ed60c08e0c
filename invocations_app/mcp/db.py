"""ORM calls from the MCP SDK's async handlers.

Django's ORM is synchronous, so each handler hands its database work to a worker thread in one
piece (``in_db_thread``). Threads come from the event loop's default executor, sized by
``TOOLOPS_MCP_DB_THREADS`` at start-up; each keeps its own persistent connection, replaced
when broken or older than ``CONN_MAX_AGE`` (``_recycle_connections``). A handler cancelled by
a disconnecting client stops awaiting, but the thread finishes its unit of work: an admission
is never half-written.
"""
from __future__ import annotations

import asyncio
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

T = TypeVar("T")


def _with_connection(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            _recycle_connections()

    return run


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


async def in_db_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in a database thread (not the single "thread-sensitive" one: handlers of
    different requests must not queue behind each other's waits)."""
    return await sync_to_async(_with_connection(fn), thread_sensitive=False)(*args, **kwargs)


def install_db_executor() -> None:
    """Size the running loop's default executor, which ``in_db_thread`` uses."""
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=settings.TOOLOPS_MCP_DB_THREADS, thread_name_prefix="toolops-mcp-db")
    )
