"""Decision links from chat or email: open the console's decision page, never decide.

``GET`` (after login, through ``admin_view``) only reads: it shows whom the link is for and
why it would do nothing, or a button. The ``POST`` of that button spends the link (single use)
and redirects to the confirmation's decision page, where the person decides as usual.
"""
from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from invocations_app.decision_links import LinkCheck, decision_link_check, decision_link_use


def _page(request: HttpRequest, token: str, check: LinkCheck) -> HttpResponse:
    context = {
        **admin.site.each_context(request), "title": "Decision link", "token": token, "check": check,
        "c": check.confirmation if not check.refusal or check.refusal in ("used", "decided", "expired") else None,
    }
    # 410 Gone for a spent or expired link, 403 for someone else's, 400 for an altered one, 404
    # (nothing of the call shown) when its person may not decide it.
    status = {"": 200, "used": 410, "expired": 410, "decided": 410, "foreign": 403, "altered": 400, "unknown": 404,
              "not_approver": 404}[check.refusal]
    return TemplateResponse(request, "admin/confirmations/link.html", context, status=status)


@require_GET
def link_view(request: HttpRequest, token: str) -> HttpResponse:
    return _page(request, token, decision_link_check(token=token, user=request.user))


@require_POST
def link_open_view(request: HttpRequest, token: str) -> HttpResponse:
    check = decision_link_use(token=token, user=request.user)
    if check.refusal:
        return _page(request, token, check)
    return redirect("confirmations:detail", pk=check.confirmation.pk)


urlpatterns = [
    path("link/<str:token>/", admin.site.admin_view(link_view), name="link"),
    path("link/<str:token>/open", admin.site.admin_view(link_open_view), name="link_open"),
]
