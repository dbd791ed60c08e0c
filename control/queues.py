"""What the two staff queues (confirmations, unknown outcomes) share: the tool and tenant filters
read from the query string, the choices the person may filter by, and the page's common context
for the skeleton template ``admin/queue_base.html``."""
from __future__ import annotations

from typing import Callable

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from control.params import queue_filters


def queue_page(request: HttpRequest, *, template: str, title: str, badge_label: str, filters_hint: str,
               clear_url_name: str, filter_choices: Callable, rows: Callable, heading: str | None = None) -> TemplateResponse:
    """Render a queue: ``rows(tool, tenant)`` gives the queue's own context (its rows and
    figures) for the filters in the query string; ``filter_choices(user=...)`` the tools and
    tenants the person may filter by. ``heading``: the page's H1 and breadcrumb, if not its title."""
    tool, tenant = queue_filters(request)
    tools, tenants = filter_choices(user=request.user)
    context = {
        **admin.site.each_context(request),
        "title": title, "heading": heading or title, "badge_label": badge_label, "filters_hint": filters_hint,
        "tools": tools, "tenants": tenants, "selected_tool": tool, "selected_tenant": tenant,
        "filtered": tool is not None or tenant is not None, "clear_url": reverse(clear_url_name),
        **rows(tool, tenant),
    }
    return TemplateResponse(request, template, context)
