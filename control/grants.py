"""A tenant's grants in the console (issue 32): the list in words (effect, scope, limits, policy),
filterable by agent and capability, and the grant form people can read (``control.grant_forms``)
with a plain-language preview before saving. Saving calls ``specs_app.services.grant_create``, the
same service (checks, audit) as the JSON form; the JSON stays readable on the grant's admin page.
Tenant admins and platform admins only; another tenant's pages are a 404.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from specs_app.models import Capability, Grant, Subject, Tenant
from specs_app.people import people_tenants
from specs_app.services import grant_create
from control.form_errors import errors_onto
from control.grant_forms import GrantForm, grant_preview, grant_words


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    return get_object_or_404(people_tenants(user=request.user), slug=slug)


def _read_as(rules: dict) -> dict:
    """Amounts saved before limits named a currency are read in the legacy one, as authorization reads them."""
    money = any(k.startswith("max_amount") for k in rules) or rules.get("thresholds")
    return {**rules, "currency": settings.TOOLOPS_LEGACY_AMOUNT_CURRENCY} if money and not rules.get("currency") else rules


def _status(grant: Grant) -> str:
    return "revoked" if grant.revoked_at else ("live" if grant.is_live else "expired")


@require_GET
def list_view(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _tenant(request, slug)
    grants = Grant.objects.filter(tenant=tenant).select_related("capability", "subject").order_by("-created_at")
    subject_id, capability_id = request.GET.get("subject", ""), request.GET.get("capability", "")
    if subject_id == "all":
        grants = grants.filter(subject__isnull=True)
    elif subject_id:
        grants = grants.filter(subject_id=subject_id) if _uuid(subject_id) else grants.none()
    if capability_id.isascii() and capability_id.isdigit():
        grants = grants.filter(capability_id=int(capability_id))
    rows = [{
        "grant": g, "status": _status(g), "admin_url": reverse("admin:specs_app_grant_change", args=[g.pk]),
        "words": grant_words(capability_name=g.capability.name, operation=g.capability.operation_class,
                             subject_name=g.subject.name if g.subject_id else None, tenant_slug=tenant.slug,
                             scope_kind=g.scope_kind, scope_values=g.scope_values, limits=_read_as(g.limits or {}),
                             effect=g.effect, policy=_read_as(g.approval_policy or {}), tool_refs=g.tool_refs),
    } for g in grants[:200]]
    context = {
        **admin.site.each_context(request), "title": f"Grants of {tenant.name}", "tenant": tenant, "rows": rows,
        "subjects": Subject.objects.filter(tenant=tenant).order_by("name"),
        "capabilities": Capability.objects.filter(grants__tenant=tenant).distinct().order_by("name"),
        "selected_subject": subject_id, "selected_capability": capability_id,
    }
    return TemplateResponse(request, "admin/grants/list.html", context)


def _uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def new_view(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: the empty form; POST "preview": the grant in words above the same form; POST "save": grant it."""
    tenant = _tenant(request, slug)
    form = GrantForm(request.POST or None, tenant=tenant)
    preview = []
    if request.method == "POST" and form.is_valid():
        if "save" in request.POST:
            try:
                grant = grant_create(user=request.user, **form.grant_values())
            except ValidationError as exc:
                errors_onto(form, exc)
            else:
                return redirect(reverse("grants:list", args=[tenant.slug]) + f"?saved={grant.pk}")
        if not form.errors:
            preview = grant_preview(form)
    context = {
        **admin.site.each_context(request), "title": f"Grant a capability in {tenant.name}", "tenant": tenant,
        "form": form, "tiers": form.tiers, "preview": preview, "own_rule": form.tools_with_own_rule() if form.is_bound and not form.errors else [],
    }
    return TemplateResponse(request, "admin/grants/new.html", context, status=400 if form.errors else 200)


urlpatterns = [
    path("tenants/<slug:slug>/grants/", admin.site.admin_view(list_view), name="list"),
    path("tenants/<slug:slug>/grants/new", admin.site.admin_view(new_view), name="new"),
]
