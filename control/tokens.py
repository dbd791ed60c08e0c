"""Your API tokens: a person issues and revokes their own tokens for the Approvals API.

The secret appears once, in the answer to the POST that created it (never in a message
cookie or a later page); only its SHA-256 is stored (``specs_app.services.personal_token_issue``).
"""
from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from specs_app.models import PersonalToken
from specs_app.services import personal_token_issue, personal_token_revoke


def _page(request: HttpRequest, *, secret: str = "") -> HttpResponse:
    context = {
        **admin.site.each_context(request), "title": "Your API tokens (Approvals API)", "secret": secret,
        "tokens": PersonalToken.objects.filter(user=request.user).order_by("-created_at"),
    }
    return TemplateResponse(request, "admin/tokens/list.html", context)


@require_GET
def tokens_view(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
def token_issue_view(request: HttpRequest) -> HttpResponse:
    _, secret = personal_token_issue(user=request.user, label=request.POST.get("label", "").strip()[:200])
    return _page(request, secret=secret)


@require_POST
def token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(PersonalToken, pk=pk, user=request.user)  # only your own
    personal_token_revoke(token=token)
    messages.success(request, f"Revoked {token.prefix}…")
    return redirect("tokens:list")


urlpatterns = [
    path("", admin.site.admin_view(tokens_view), name="list"),
    path("issue", admin.site.admin_view(token_issue_view), name="issue"),
    path("<int:pk>/revoke", admin.site.admin_view(token_revoke_view), name="revoke"),
]
