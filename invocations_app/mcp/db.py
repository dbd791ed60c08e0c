"""ORM calls from the MCP SDK's async handlers.

Django's ORM is synchronous, so each handler hands its database work to a worker thread in one
piece (``in_db_thread``). Threads come from the event loop's default executor, sized by
``TOOLOPS_MCP_DB_THREADS`` at start-up; each keeps its own persistent connection, recycled the
way Django recycles one per request (``close_old_connections`` before and after: broken or
older than ``CONN_MAX_AGE`` → reconnect). A handler cancelled by a disconnecting client stops
awaiting, but the thread finishes its unit of work: an admission is never half-written.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

T = TypeVar("T")


def _with_connection(fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


async def in_db_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in a database thread (not the single "thread-sensitive" one: handlers of
    different requests must not queue behind each other's waits)."""
    return await sync_to_async(_with_connection(fn), thread_sensitive=False)(*args, **kwargs)


def install_db_executor() -> None:
    """Size the running loop's default executor, which ``in_db_thread`` uses."""
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=settings.TOOLOPS_MCP_DB_THREADS, thread_name_prefix="toolops-mcp-db")
    )
