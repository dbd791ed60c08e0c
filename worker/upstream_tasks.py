"""Celery tasks of the ToolSpec catalog: thin, calling a service."""
from __future__ import annotations

from celery import shared_task

from worker.upstream_sync import REFRESH_TASK, upstream_refresh


@shared_task(name=REFRESH_TASK, ignore_result=True)
def upstream_refresh_task(server_urls: list[str] | None = None) -> dict:
    """Re-list watched MCP servers (every one: the beat; ``server_urls``: an admin's "refresh
    now"); quarantine changed or vanished tools. Returns the counts per new state."""
    return upstream_refresh(server_urls=server_urls)
