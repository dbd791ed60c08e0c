"""The console's query parameters, parsed once for every page that takes them."""
from __future__ import annotations

from django.http import HttpRequest


def queue_filters(request: HttpRequest) -> tuple[int | None, str | None]:
    """``?tool=<ToolSpec id>&tenant=<slug>`` of a queue; a malformed tool id is ignored, not an
    error page (ASCII digits only: ``"²".isdigit()`` is true and ``int("²")`` fails). A NUL never
    gets here (``toolops.middleware.NulQueryMiddleware``)."""
    raw_tool = request.GET.get("tool") or ""
    tool = int(raw_tool) if raw_tool.isascii() and raw_tool.isdigit() else None
    return tool, (request.GET.get("tenant") or None)
