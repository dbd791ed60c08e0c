"""People of a tenant (``/console/tenants/<slug>/``): who holds which role for which tools, "Add a
person" (one form: an existing person or a new one by e-mail, a role, tools) and taking a role
away; a person's own profile (what they may decide). The roles and their audit are the domain's
(``specs_app.people``); these views parse, call it and render.

Only tenant admins (``manage_grants_tenant``) and platform admins manage a tenant's people; any
other tenant's page is a 404, as if it did not exist.
"""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse, reverse_lazy
from django.views.decorators.http import require_GET, require_POST

from invocations_app.approvers import approvable_tenants, approvable_toolspecs
from specs_app.models import Tenant, ToolSpec
from specs_app.people import ROLES, people_tenants, person_add, remove_role, role_history, tenant_roster, tenant_tools
from specs_app.selectors import tenant_people
from worker.support import resolvable_tenants, resolvable_toolspecs
from control.form_errors import errors_onto


def _tenant(request: HttpRequest, slug: str) -> Tenant:
    return get_object_or_404(people_tenants(user=request.user), slug=slug)


class ToolChoice(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: ToolSpec) -> str:
        owner = "global" if obj.tenant_id is None else "this tenant's"
        return f"{obj.ref} — {obj.title or obj.name} ({owner}, {obj.status})"


class PersonAddForm(forms.Form):
    person = forms.ModelChoiceField(queryset=None, required=False, label="An existing person of this tenant",
                                    empty_label="— nobody: a new person, by e-mail below —")
    email = forms.EmailField(required=False, label="…or their e-mail",
                             help_text="a new account gets a set-password link to send them; "
                                       "an e-mail that already has an account adds that account")
    role = forms.ChoiceField(choices=[(r.key, f"{r.label}: {r.does}") for r in ROLES.values()],
                             widget=forms.RadioSelect, initial="approver")
    tools = ToolChoice(queryset=None, required=False, widget=forms.CheckboxSelectMultiple,
                       label="Tools (Approver and Support)",
                       help_text="none ticked: every tool of the tenant today")
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Why (kept in the audit log)")

    def __init__(self, *args, tenant: Tenant, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["person"].queryset = tenant_people(tenant=tenant).order_by("username")
        self.fields["tools"].queryset = tenant_tools(tenant=tenant).select_related("tenant")


def _people_page(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    context = {
        **admin.site.each_context(request), "title": f"People of {tenant.name}", "tenant": tenant,
        "roster": tenant_roster(tenant=tenant), "history": role_history(tenant=tenant), "roles": ROLES.values(),
        "tools_url": reverse("admin:specs_app_toolspec_changelist") + f"?tenant__id__exact={tenant.pk}",
    }
    return TemplateResponse(request, "admin/people/tenant.html", context)


@require_GET
def tenants_view(request: HttpRequest) -> HttpResponse:
    """The tenants whose people you name: straight to the one when there is one."""
    tenants = list(people_tenants(user=request.user))
    if len(tenants) == 1:
        return redirect("people:tenant", slug=tenants[0].slug)
    if not tenants:
        raise Http404("you name no tenant's people")
    context = {**admin.site.each_context(request), "title": "Tenants", "tenants": tenants}
    return TemplateResponse(request, "admin/people/tenants.html", context)


@require_GET
def tenant_view(request: HttpRequest, slug: str) -> HttpResponse:
    return _people_page(request, _tenant(request, slug))


def add_view(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _tenant(request, slug)
    form = PersonAddForm(request.POST or None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            person, link, holding = person_add(actor=request.user, tenant=tenant, role=data["role"], person=data["person"],
                                               email=data["email"], tools=list(data["tools"]), reason=data["reason"])
        except ValidationError as exc:
            errors_onto(form, exc)
        else:
            # Rendered, not redirected: the set-password link is shown once, never put in a message cookie.
            url = request.build_absolute_uri(reverse("people:welcome", args=link.strip("/").split("/"))) if link else ""
            context = {
                **admin.site.each_context(request), "title": f"{person.get_username()} added", "tenant": tenant,
                "person": person, "holding": holding, "set_password_url": url,
                "mailed": bool(url) and _mail_invitation(person=person, tenant=tenant, url=url, by=request.user),
            }
            return TemplateResponse(request, "admin/people/added.html", context)
    context = {**admin.site.each_context(request), "title": f"Add a person to {tenant.name}", "tenant": tenant, "form": form}
    return TemplateResponse(request, "admin/people/add.html", context, status=400 if form.errors else 200)


def _mail_invitation(*, person, tenant: Tenant, url: str, by) -> bool:
    """E-mail a new person their set-password link when the deployment sends mail
    (``TOOLOPS_NOTIFY_BY_EMAIL``, Django's ``EMAIL_*``); whether it was handed to the mail server."""
    if not settings.TOOLOPS_NOTIFY_BY_EMAIL:
        return False
    body = (f"{by.get_username()} added you to {tenant.name} on ToolOps.\n\nChoose your password here "
            f"(the link works once):\n{url}\n")
    try:
        return send_mail(f"Your ToolOps account for {tenant.name}", body, None, [person.email]) == 1
    except OSError:  # no mail server reachable: the page shows the link to send by hand
        return False


@require_POST
def remove_view(request: HttpRequest, slug: str, person_id: int, role: str) -> HttpResponse:
    tenant = _tenant(request, slug)
    person = next((p.user for p in tenant_roster(tenant=tenant) if p.user.pk == person_id), None)
    if person is None or role not in ROLES:
        raise Http404("no such role holder in this tenant")
    try:
        removed = remove_role(actor=request.user, tenant=tenant, person=person, role=role,
                              reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        messages.success(request, f"{person.get_username()} is no longer {ROLES[role].label} of {tenant.slug}."
                         if removed else "Nothing to remove.")
    return redirect("people:tenant", slug=tenant.slug)


@require_GET
def profile_view(request: HttpRequest) -> HttpResponse:
    """What you may decide and resolve: the (tenant, tool) pairs the approvers' and support's checks let through."""
    user = request.user
    context = {
        **admin.site.each_context(request), "title": "Your profile",
        "decide_tenants": list(approvable_tenants(user=user)), "decide_tools": list(approvable_toolspecs(user=user)),
        "resolve_tenants": list(resolvable_tenants(user=user)), "resolve_tools": list(resolvable_toolspecs(user=user)),
        "managed": list(people_tenants(user=user)),
    }
    return TemplateResponse(request, "admin/people/profile.html", context)


class WelcomeView(auth_views.PasswordResetConfirmView):
    """A new person's set-password link (Django's password-reset token: single use)."""

    template_name = "registration/password_reset_confirm.html"
    success_url = reverse_lazy("people:welcome_done")
    extra_context = {"title": "Choose your password", "site_header": admin.site.site_header}


class WelcomeDoneView(auth_views.PasswordResetCompleteView):
    template_name = "registration/password_reset_complete.html"
    extra_context = {"site_header": admin.site.site_header}


urlpatterns = [
    path("tenants/", admin.site.admin_view(tenants_view), name="tenants"),
    path("tenants/<slug:slug>/", admin.site.admin_view(tenant_view), name="tenant"),
    path("tenants/<slug:slug>/people/add", admin.site.admin_view(add_view), name="add"),
    path("tenants/<slug:slug>/people/<int:person_id>/<str:role>/remove", admin.site.admin_view(remove_view), name="remove"),
    path("profile/", admin.site.admin_view(profile_view), name="profile"),
    # Not behind admin_view: the new person has no password yet.
    path("welcome/<uidb64>/<token>/", WelcomeView.as_view(), name="welcome"),
    path("welcome/done/", WelcomeDoneView.as_view(), name="welcome_done"),
]
