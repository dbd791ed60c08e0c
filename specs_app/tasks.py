"""Celery tasks of the ToolSpec catalog: thin, calling a service."""
from __future__ import annotations

from celery import shared_task

from .upstream import REFRESH_TASK, upstream_refresh


@shared_task(name=REFRESH_TASK, ignore_result=True)
def upstream_refresh_task(server_urls: list[str] | None = None) -> dict:
    """Re-list watched MCP servers (every one: the beat; ``server_urls``: an admin's "refresh
    now"); quarantine changed or vanished tools. Returns the counts per new state."""
    if server_urls is None:
        return upstream_refresh()
    counts: dict[str, int] = {}
    for url in server_urls:
        for state, n in upstream_refresh(server_url=url).items():
            counts[state] = counts.get(state, 0) + n
    return counts
