"""Where a person lands after signing in, by role (issue 32): an approver on their confirmation
queue, support on the unknown outcomes, a tenant admin on their tenant's page, a viewer on the
dashboard; platform admins (superusers) and anyone else on the console's index. An explicit
``?next=`` is honoured as before. The index itself gets the links a role needs (people, profile).
"""
from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path, reverse

from invocations_app.approvers import approvable_tenants, approvable_toolspecs
from specs_app.people import people_tenants
from worker.support import resolvable_tenants, resolvable_toolspecs
from control.selectors import console_tenants


def landing_url(*, user) -> str:
    """The first page of ``user``'s work, by the same checks the pages themselves make."""
    if user.is_superuser:
        return reverse("admin:index")
    if approvable_tenants(user=user).exists() and approvable_toolspecs(user=user).exists():
        return reverse("confirmations:queue")
    if resolvable_tenants(user=user).exists() and resolvable_toolspecs(user=user).exists():
        return reverse("support:unknown_queue")
    if people_tenants(user=user).exists():
        return reverse("people:tenants")
    if console_tenants(user=user).exists():
        return reverse("dashboard:home")
    return reverse("admin:index")


def landing_view(request: HttpRequest) -> HttpResponse:
    return redirect(landing_url(user=request.user))


def login_view(request: HttpRequest) -> HttpResponse:
    """The admin's sign-in page, sending a person to ``landing_view`` unless a ``next`` names a page
    other than the index (where an unsigned visitor of ``/`` is sent back to)."""
    wanted = request.POST.get(REDIRECT_FIELD_NAME) or request.GET.get(REDIRECT_FIELD_NAME) or ""
    if wanted and wanted != reverse("admin:index"):
        return admin.site.login(request)
    return admin.site.login(request, extra_context={REDIRECT_FIELD_NAME: reverse("landing")})


def index_view(request: HttpRequest) -> HttpResponse:
    """The admin's index with the tenants whose people one names (object permissions the template's ``perms`` cannot see)."""
    return admin.site.index(request, extra_context={"people_tenants": list(people_tenants(user=request.user))})


# Mounted before the admin's own URLs (toolops/urls.py), so these take its login and index paths.
urlpatterns = [
    path("login/", login_view, name="login_by_role"),
    path("", admin.site.admin_view(index_view), name="index_by_role"),
    path("console/start/", admin.site.admin_view(landing_view), name="landing"),
]
