"""Celery tasks of the ToolSpec catalog: thin, calling a service."""
from __future__ import annotations

from celery import shared_task

from .upstream import upstream_refresh


@shared_task(name="specs.upstream_refresh", ignore_result=True)
def upstream_refresh_task() -> dict:
    """Periodic: re-list every watched MCP server; quarantine changed or vanished tools."""
    return upstream_refresh()
