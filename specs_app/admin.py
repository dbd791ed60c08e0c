"""Console for tool specs (draft → publish → new version), tenants, subjects, API tokens,
capabilities and grants (add, revoke with a reason, change expiry; never delete)."""
from __future__ import annotations

import json

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError
from django.db.models import Q
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from guardian.admin import ReinforcedGuardedModelAdmin

from toolops.sql import field_names
from toolops.decisions.approval_display import limits_display as limits_in_words, policy_display as policy_in_words
from toolops.model_io.mcp_definitions import definition_diff

from specs_app.models import ApiToken, Capability, Grant, GrantChange, PersonalToken, Subject, Tenant, ToolSpec, UpstreamTool
from worker.upstream_sync import (
    UpstreamUnavailable, upstream_confirm_class, upstream_import, upstream_new_version, upstream_refresh_enqueue,
)
from specs_app.services import (
    api_token_issue, api_token_revoke, grant_create, personal_token_revoke, grant_revoke, grant_set_expiry, grant_tenants_for_user,
    grant_validate, toolspec_new_version, toolspec_publish, toolspec_retire,
)
from specs_app.selectors import MANAGE_TOOLSPECS, tenant_people, tenants_for_user

# The one admin site is the ToolOps console (set here: this module is loaded by autodiscovery).
admin.site.site_header = "ToolOps console"
admin.site.site_title = "ToolOps"
admin.site.index_title = "Console"


def pretty_json(value) -> str:
    return format_html("<pre class='toolops-json'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def _in_words(rules: dict, words) -> str:
    """Limits or a policy as a person reads them, under their JSON (nothing when there is nothing to
    say). ``words``: ``limits_display`` or ``policy_display``. Read as authorization reads them:
    amounts saved before they named a currency are in ``TOOLOPS_LEGACY_AMOUNT_CURRENCY``."""
    rules = rules or {}
    legacy = settings.TOOLOPS_LEGACY_AMOUNT_CURRENCY if not rules.get("currency") else None
    lines = words({**rules, "currency": legacy} if legacy else rules, currency=None)
    if not lines:
        return ""
    said = " ".join(lines)
    note = f" (saved without a currency: read as {legacy})" if legacy and legacy in said else ""
    return format_html('<div class="help" data-testid="in-words">{}{}</div>', "; ".join(lines), note)


class PlumbingListAdmin(admin.ModelAdmin):
    """A model list that is plumbing (tokens, deliveries, model calls, upstream rows): listed on the
    index and sidebar for platform admins only (issue 32). Its pages keep their own permission
    checks, so a link from a product page still opens for whoever may see the row."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_superuser


@admin.register(Tenant)
class TenantAdmin(ReinforcedGuardedModelAdmin):
    """Tenants; a tenant's page links to "Object permissions" (django-guardian), where a superuser
    (or holder of guardian's own object-permission model permissions) gives people or groups ``approve_calls``, ``resolve_calls``, ``view_calls``,
    ``manage_grants_tenant``, ``manage_toolspecs_tenant`` or ``connect_agents`` (OAuth consent for
    MCP clients, issue 33) on that tenant."""

    list_display = ["slug", "name", "created_at", "console_page"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}

    @admin.display(description="people and grants")
    def console_page(self, obj):
        # The tenant's console page (control/people.py): roles instead of raw object permissions.
        return format_html('<a href="{}">people, roles and grants</a>', reverse("people:tenant", args=[obj.slug]))


class SubjectForm(forms.ModelForm):
    """An agent can only be bound to a person of its own tenant (``tenant_people``)."""

    class Meta:
        model = Subject
        fields = ["tenant", "name", "is_active", "acts_for", "timezone", "locale"]

    def clean(self):
        data = super().clean()
        person, tenant = data.get("acts_for"), data.get("tenant")
        if person is not None and tenant is not None and not tenant_people(tenant=tenant).filter(pk=person.pk).exists():
            self.add_error("acts_for", f"{person.get_username()} is not a person of tenant {tenant.slug} (no permission "
                                       "on it, or inactive): give them one first, or choose a person of this tenant")
        return data


@admin.register(Subject)
class SubjectAdmin(admin.ModelAdmin):
    """Agents. ``acts_for`` binds one to the person it acts for: every run it opens (REST or MCP)
    acts for them, and they can never approve its calls (docs/approvals.md)."""

    form = SubjectForm
    list_display = ["name", "tenant", "acts_for", "timezone", "is_active", "created_at"]
    list_filter = ["tenant", "is_active"]
    search_fields = ["name", "tenant__slug", "acts_for__username"]
    list_select_related = ["tenant", "acts_for"]
    actions = ["issue_token"]

    @admin.action(description="Issue an API token (shown once)")
    def issue_token(self, request, queryset):
        for subject in queryset:
            _, secret = api_token_issue(subject=subject, label=f"issued by {request.user}", user=request.user)
            self.message_user(
                request, f"Token for {subject}: {secret} — copy it now, it is stored hashed and never shown again.",
                messages.WARNING,
            )


@admin.register(ApiToken)
class ApiTokenAdmin(PlumbingListAdmin):
    list_display = ["prefix", "subject", "label", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["subject__tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "label", "subject__name"]
    fields = ["subject", "label", "prefix", "created_at", "created_by", "last_used_at", "revoked_at"]
    readonly_fields = ["prefix", "created_at", "created_by", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (["subject"] if obj else [])

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["label"])
            return
        token, secret = api_token_issue(subject=obj.subject, label=obj.label, user=request.user)
        obj.pk, obj.prefix, obj.token_hash = token.pk, token.prefix, token.token_hash
        self.message_user(
            request, f"Token: {secret} — copy it now, it is stored hashed and never shown again.", messages.WARNING
        )

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the record of who held which token stays

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            api_token_revoke(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(PersonalToken)
class PersonalTokenAdmin(PlumbingListAdmin):
    """People's Approvals API tokens: each person issues their own (console → Your API tokens);
    an admin sees who holds which and can revoke them."""

    list_display = ["prefix", "user", "label", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["prefix", "label", "user__username"]
    fields = readonly_fields = ["user", "label", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            personal_token_revoke(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


def upstream_diff_table(watch: UpstreamTool) -> str:
    """The pinned and the observed definition side by side, field by field (the rug pull, visible)."""
    if not watch.quarantined:
        return format_html("<span>{}</span>", "the upstream advertises exactly the pinned definition")
    rows = format_html_join("", "<tr data-testid='upstream-diff-row' data-field='{}'><th>{}</th><td>{}</td><td>{}</td></tr>", (
        (d["field"], d["field"], pretty_json(d["pinned"]), pretty_json(d["observed"]))
        for d in definition_diff(watch.pinned_definition, watch.observed_definition)))
    return format_html(
        "<table data-testid='upstream-diff'><thead><tr><th>field</th><th>pinned</th><th>now advertised</th></tr></thead>"
        "<tbody>{}</tbody></table>", rows)


class UpstreamToolInline(admin.StackedInline):
    """On an imported ToolSpec's page: where it comes from, its pin, and what changed upstream."""

    model = UpstreamTool
    can_delete = False
    extra = 0
    max_num = 0
    fields = ["server_url", "upstream_name", "credential", "state", "detected_at", "checked_at", "check_error",
              "pinned_sha256", "observed_sha256", "proposed_class", "proposal_reasons", "class_confirmation", "difference"]
    readonly_fields = fields

    @admin.display(description="class confirmed")
    def class_confirmation(self, obj):
        if obj.class_confirmed_by_admin:
            return f"{obj.class_confirmed} by {obj.class_confirmed_by} at {obj.class_confirmed_at:%Y-%m-%d %H:%M} UTC"
        return "not confirmed: every call waits for a person"

    @admin.display(description="difference")
    def difference(self, obj):
        return upstream_diff_table(obj)


def toolspec_management_scope(request) -> tuple[bool, set]:
    """(platform-wide?, ids of tenants whose tools the user may edit), computed once per request."""
    if not hasattr(request, "_toolops_tool_tenants"):
        platform = request.user.is_superuser or request.user.has_perm(MANAGE_TOOLSPECS)
        ids = set() if platform else set(tenants_for_user(user=request.user, permission=MANAGE_TOOLSPECS).values_list("pk", flat=True))
        request._toolops_tool_tenants = (platform, ids)
    return request._toolops_tool_tenants


@admin.register(ToolSpec)
class ToolSpecAdmin(ReinforcedGuardedModelAdmin):
    """ToolSpecs, global or owned by a tenant. Besides the model permissions, editing needs
    ``manage_toolspecs_tenant``: on the owning tenant for a tenant's tool, model-wide (platform)
    for a global one. Others see the global tools and their own tenants' tools, read-only.
    A ToolSpec's "Object permissions" page gives ``approve_toolspec`` / ``resolve_toolspec``."""

    inlines = [UpstreamToolInline]
    list_display = ["name", "version", "tenant", "status", "side_effect_class", "published_at"]
    list_filter = ["status", "side_effect_class", ("tenant", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "title", "description"]
    actions = ["publish", "retire", "new_version"]
    save_as = False

    # --- scoping: global tools for the platform, a tenant's tools for that tenant's tool admins ---
    def _managed(self, request) -> tuple[bool, set]:
        return toolspec_management_scope(request)

    def _may_edit(self, request, obj) -> bool:
        platform, ids = self._managed(request)
        return platform or (obj is not None and obj.tenant_id in ids)

    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("tenant")
        platform, ids = self._managed(request)
        return qs if platform else qs.filter(Q(tenant__isnull=True) | Q(tenant_id__in=ids))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "tenant":
            platform, ids = self._managed(request)
            kwargs["queryset"] = Tenant.objects.all() if platform else Tenant.objects.filter(pk__in=ids)
            kwargs["required"] = not platform  # only the platform makes global tools
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_add_permission(self, request):
        platform, ids = self._managed(request)
        return super().has_add_permission(request) and (platform or bool(ids))

    def get_actions(self, request):
        actions = super().get_actions(request)
        platform, ids = self._managed(request)
        return actions if platform or ids else {}

    def get_readonly_fields(self, request, obj=None):
        if obj and obj.is_published:
            return [name for name in field_names(self.model) if name != "input_schema"] + ["rendered_schema"]
        return ["status", "published_at", "retired_at", "created_by", "created_at"]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj and obj.is_published:  # the schema once, pretty-printed, in the raw field's place
            fields = [("rendered_schema" if f == "input_schema" else f) for f in fields if f != "rendered_schema"]
        return fields

    def has_change_permission(self, request, obj=None):
        """A published version is immutable (a change is a new version): its page is view-only —
        no Save, no Delete — while drafts stay editable."""
        return (bool(obj is None or not obj.is_published) and super().has_change_permission(request, obj)
                and (obj is None or self._may_edit(request, obj)))

    @admin.display(description="input schema")
    def rendered_schema(self, obj):
        return pretty_json(obj.input_schema)

    def has_delete_permission(self, request, obj=None):
        return (bool(obj is None or not obj.is_published) and super().has_delete_permission(request, obj)
                and (obj is None or self._may_edit(request, obj)))

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        try:
            obj.save()
        except IntegrityError as exc:  # the DB trigger refusing a change to a published version
            self.message_user(request, f"Not saved: {exc}", messages.ERROR)

    def _editable(self, request, queryset):
        """The selected specs this user may edit; the others are named and skipped."""
        specs = list(queryset)
        refused = [spec.ref for spec in specs if not self._may_edit(request, spec)]
        if refused:
            self.message_user(request, f"Not yours to change: {', '.join(refused)}", messages.ERROR)
        return [spec for spec in specs if spec.ref not in refused]

    @admin.action(description="Publish selected drafts (immutable afterwards)")
    def publish(self, request, queryset):
        for spec in self._editable(request, queryset):
            try:
                toolspec_publish(spec=spec)
                self.message_user(request, f"Published {spec.ref}.")
            except ValidationError as exc:
                self.message_user(request, f"{spec.ref} not published: {'; '.join(exc.messages)}", messages.ERROR)

    @admin.action(description="Retire selected versions (no longer offered to new model calls)")
    def retire(self, request, queryset):
        specs = self._editable(request, queryset)
        for spec in specs:
            toolspec_retire(spec=spec)
        self.message_user(request, f"Retired {len(specs)} version(s).")

    @admin.action(description="New draft version from this")
    def new_version(self, request, queryset):
        for spec in self._editable(request, queryset):
            draft = toolspec_new_version(spec=spec, user=request.user)
            self.message_user(request, f"Created draft {draft.ref} from {spec.ref}.")


@admin.register(Capability)
class CapabilityAdmin(admin.ModelAdmin):
    list_display = ["name", "operation_class", "description", "live_grants"]
    list_filter = ["operation_class"]
    search_fields = ["name", "description"]

    def get_readonly_fields(self, request, obj=None):
        # ToolSpecs refer to the name, grants rely on the operation class: fixed once created.
        return ["name", "operation_class"] if obj else []

    @admin.display(description="live grants")
    def live_grants(self, obj):
        return obj.grants.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        ).count()


# --- grants ------------------------------------------------------------------------------

GRANT_VALUE_FIELDS = ["capability", "tenant", "subject", "scope_kind", "scope_values", "limits", "effect", "tool_refs", "expires_at",
                      "approval_policy"]

APPROVAL_POLICY_HELP = (
    'JSON object, {} for none. Thresholds name their "currency"; amounts are its minor units (1000 = 10.00 EUR), a '
    'call in another currency is denied. Tiers in increasing order, up_to inclusive; '
    'the first tier that fits the amount decides, a last tier without up_to takes the rest, an amount above every tier '
    'is denied. E.g. {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm"}, '
    '{"effect": "confirm", "approvals": 2}], "escalate_after_seconds": 600, "escalation_group": "payments-leads"}. '
    '"approvals": N alone sets the quorum of a confirm grant. The escalation group is a Django group; it is told '
    'when nobody decided in time (expiry still denies).'
)


class GrantAddForm(forms.ModelForm):
    """Every field of a new grant; checked by ``grant_validate`` so errors land on their field."""

    class Meta:
        model = Grant
        fields = GRANT_VALUE_FIELDS + ["reason"]
        help_texts = {
            "subject": "empty: every subject of the tenant",
            "scope_values": 'JSON list, e.g. ["primary"]; [] with scope kind "any"',
            "limits": ('JSON object, e.g. {"calls_per_minute": 5, "currency": "EUR", "max_amount_per_call": 10000}: amount '
                       'limits name their currency and are minor units of it (10000 = 100.00 EUR); a call in another '
                       'currency is not covered'),
            "tool_refs": 'JSON list of "name@version"; [] pins the published versions that need this capability now',
            "reason": "required: why this grant exists (kept in the audit log)",
            "approval_policy": APPROVAL_POLICY_HELP,
        }
        widgets = {
            "approval_policy": forms.Textarea(attrs={"rows": 5, "cols": 80, "placeholder": "{}"}),
            "scope_values": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "limits": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "tool_refs": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "reason": forms.Textarea(attrs={"rows": 3, "cols": 60}),
        }

    def clean_scope_values(self):
        return [] if self.cleaned_data.get("scope_values") in (None, "") else self.cleaned_data["scope_values"]

    def clean_limits(self):
        return {} if self.cleaned_data.get("limits") in (None, "") else self.cleaned_data["limits"]

    def clean_tool_refs(self):
        return [] if self.cleaned_data.get("tool_refs") in (None, "") else self.cleaned_data["tool_refs"]

    def clean_approval_policy(self):
        return {} if self.cleaned_data.get("approval_policy") in (None, "") else self.cleaned_data["approval_policy"]

    def clean_reason(self):
        reason = (self.cleaned_data.get("reason") or "").strip()
        if not reason:
            raise ValidationError("a reason is required")
        return reason

    def clean(self):
        data = super().clean()
        if all(name in data for name in GRANT_VALUE_FIELDS):
            grant_validate(**{name: data[name] for name in GRANT_VALUE_FIELDS})
        return data


class GrantExpiryForm(forms.ModelForm):
    """A grant's only editable field is its expiry; changing it needs a reason."""

    change_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, label="Reason for this change",
        help_text="required when the expiry changes (kept in the audit log)",
    )

    class Meta:
        model = Grant
        fields = ["expires_at"]

    def clean(self):
        data = super().clean()
        if "expires_at" in self.changed_data and not (data.get("change_reason") or "").strip():
            self.add_error("change_reason", "a reason is required to change the expiry")
        return data


class GrantActionForm(helpers.ActionForm):
    reason = forms.CharField(
        required=False, label="Reason:",
        widget=forms.TextInput(attrs={"placeholder": "required to revoke", "size": 40}),
    )


class GrantStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("live", "live"), ("expired", "expired"), ("revoked", "revoked")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "live":
            return queryset.filter(revoked_at__isnull=True).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


class GrantChangeInline(admin.TabularInline):
    """The audit trail of one grant: who did what, when and why."""

    model = GrantChange
    extra = 0
    can_delete = False
    fields = ["at", "action", "actor", "reason", "data_display"]
    readonly_fields = fields
    ordering = ["at"]
    verbose_name_plural = "audit trail"

    @admin.display(description="data")
    def data_display(self, obj):
        return pretty_json(obj.data)

    def has_view_permission(self, request, obj=None):
        return True  # shown only on a grant page, which GrantAdmin has already scoped

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Grant)
class GrantAdmin(admin.ModelAdmin):
    """Grants by tenant. Superusers see all; a tenant admin (guardian ``manage_grants_tenant``
    on a Tenant) sees, adds, revokes and re-dates grants of those tenants only. Model-level
    grant permissions are not consulted: the tenant is the unit of delegation."""

    list_display = ["capability", "tenant", "subject_display", "scope_display", "effect", "rules_in_words", "expires_at", "status", "revoked_at", "created_at", "granted_by"]
    list_filter = [GrantStatusFilter, "effect", "scope_kind", ("capability", admin.RelatedOnlyFieldListFilter), ("tenant", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["capability__name", "subject__name", "tenant__slug", "reason", "revoke_reason"]
    list_select_related = ["capability", "tenant", "subject__tenant", "granted_by"]
    date_hierarchy = "created_at"
    action_form = GrantActionForm
    actions = ["revoke"]
    save_as = False

    # --- scoping: which tenants this request's user manages (computed once per request) ---
    def _tenant_ids(self, request) -> set:
        if not hasattr(request, "_toolops_grant_tenants"):
            request._toolops_grant_tenants = set(grant_tenants_for_user(user=request.user).values_list("pk", flat=True))
        return request._toolops_grant_tenants

    def get_queryset(self, request):
        qs = super().get_queryset(request)
        return qs if request.user.is_superuser else qs.filter(tenant_id__in=self._tenant_ids(request))

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "tenant":
            kwargs["queryset"] = Tenant.objects.filter(pk__in=self._tenant_ids(request))
        elif db_field.name == "subject":
            kwargs["queryset"] = Subject.objects.filter(tenant_id__in=self._tenant_ids(request), is_active=True).select_related("tenant")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in ("capability", "tenant", "subject"):
            # No editing or deleting a tenant/subject/capability from inside the grant form.
            formfield.widget.can_change_related = formfield.widget.can_delete_related = False
            formfield.widget.can_view_related = False
        return formfield

    def has_module_permission(self, request):
        return request.user.is_superuser or bool(self._tenant_ids(request))

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request) and (obj is None or obj.tenant_id in self._tenant_ids(request))

    def has_add_permission(self, request):
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None):
        return self.has_view_permission(request, obj) and (obj is None or obj.revoked_at is None)

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the record of who could do what stays

    # --- forms -----------------------------------------------------------------------------
    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = GrantExpiryForm if obj else GrantAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [
                (None, {"fields": ["capability", "tenant", "subject", "effect"]}),
                ("Scope and limits", {"fields": ["scope_kind", "scope_values", "limits", "tool_refs", "expires_at"]}),
                ("Approval policy", {"fields": ["approval_policy"],
                                     "description": "Thresholds, quorum and escalation for calls this grant covers."}),
                ("Audit", {"fields": ["reason"]}),
            ]
        editable = ["expires_at", "change_reason"] if obj.revoked_at is None else ["expires_at"]
        return [
            (None, {"fields": ["capability", "tenant", "subject_display", "effect", "status"]}),
            ("Scope and limits", {"fields": ["scope_kind", "scope_values_display", "limits_display", "tool_refs_display"]}),
            ("Approval policy", {"fields": ["approval_policy_display"]}),
            ("Expiry", {"fields": editable}),
            ("Audit", {"fields": ["reason", "granted_by", "created_at", "revoked_at", "revoked_by", "revoke_reason"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        fixed = ["capability", "tenant", "subject_display", "effect", "status", "scope_kind", "scope_values_display",
                 "limits_display", "tool_refs_display", "approval_policy_display", "reason", "granted_by", "created_at", "revoked_at", "revoked_by", "revoke_reason"]
        return fixed + (["expires_at"] if obj.revoked_at is not None else [])

    def get_inlines(self, request, obj):
        return [GrantChangeInline] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            if "expires_at" in form.changed_data:
                grant_set_expiry(grant=obj, user=request.user, expires_at=form.cleaned_data["expires_at"],
                                 reason=form.cleaned_data["change_reason"])
            return
        data = form.cleaned_data
        grant = grant_create(user=request.user, reason=data["reason"], **{f: data[f] for f in GRANT_VALUE_FIELDS})
        # The admin goes on to log and redirect with ``obj``: make it the row the service wrote.
        obj.pk, obj.tool_refs, obj.limits, obj.granted_by = grant.pk, grant.tool_refs, grant.limits, grant.granted_by
        obj.approval_policy = grant.approval_policy
        obj._state.adding, obj._state.db = False, grant._state.db

    # --- display ---------------------------------------------------------------------------
    @admin.display(description="subject", ordering="subject__name")
    def subject_display(self, obj):
        return obj.subject.name if obj.subject_id else format_html("<em>all subjects of {}</em>", obj.tenant.slug)

    @admin.display(description="scope")
    def scope_display(self, obj):
        if obj.scope_kind == Grant.ScopeKind.ANY:
            return "any"
        return f"{obj.scope_kind}: {', '.join(obj.scope_values or [])}"

    @admin.display(description="scope values")
    def scope_values_display(self, obj):
        return format_html("<code>{}</code>", json.dumps(obj.scope_values, ensure_ascii=False))

    @admin.display(description="limits")
    def limits_display(self, obj):
        # The stored JSON, then how it reads: amounts in major units of their currency, so
        # 50000 EUR-minor is seen as 500.00 EUR, not fifty thousand.
        return format_html("<code>{}</code>{}", json.dumps(obj.limits, ensure_ascii=False, sort_keys=True),
                           _in_words(obj.limits, limits_in_words))

    @admin.display(description="approval policy")
    def approval_policy_display(self, obj):
        if not obj.approval_policy:
            return "none: the grant's effect applies as is"
        return format_html("{}{}", pretty_json(obj.approval_policy),
                           _in_words(obj.approval_policy, policy_in_words))

    @admin.display(description="limits and policy")
    def rules_in_words(self, obj):
        # In the list too (issue 32): an EUR and a USD grant must not look identical.
        said = format_html("{}{}", _in_words(obj.limits, limits_in_words), _in_words(obj.approval_policy, policy_in_words))
        return said or "—"

    @admin.display(description="pinned tool versions")
    def tool_refs_display(self, obj):
        return format_html("<code>{}</code>", json.dumps(obj.tool_refs, ensure_ascii=False)) if obj.tool_refs else "any version"

    @admin.display(description="status")
    def status(self, obj):
        if obj.revoked_at is not None:
            return "revoked"
        return "live" if obj.is_live else "expired"

    # --- actions ---------------------------------------------------------------------------
    @admin.action(description="Revoke selected grants (reason required)")
    def revoke(self, request, queryset):
        reason = (request.POST.get("reason") or "").strip()
        if not reason:
            self.message_user(request, "Nothing revoked: type a reason next to the action first.", messages.ERROR)
            return
        revoked = sum(grant_revoke(grant=g, user=request.user, reason=reason) for g in queryset.select_related("tenant"))
        skipped = queryset.count() - revoked
        self.message_user(request, f"Revoked {revoked} grant(s)." + (f" {skipped} already revoked." if skipped else ""))


class UpstreamImportForm(forms.Form):
    url = forms.URLField(label="MCP server URL", assume_scheme="https", help_text="its streamable HTTP endpoint, e.g. http://127.0.0.1:8766/mcp")
    prefix = forms.CharField(help_text="ToolSpec names become PREFIX.<upstream tool name>")
    credential = forms.CharField(required=False, help_text='"secret:NAME" from TOOLOPS_TOOL_SECRETS (never the value)')
    lookups = forms.CharField(required=False, help_text="TOOL=LOOKUP_TOOL per line: the tool that finds TOOL's effect by key")
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), required=False,
                                    help_text="the tenant that owns the drafts (listed to it only); empty: global")

    def __init__(self, *args, tenants, platform: bool, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        field.queryset = tenants
        field.required = not platform  # only the platform makes global tools
        field.empty_label = "global (every tenant)" if platform else None

    def clean_lookups(self):
        pairs = {}
        for line in (self.cleaned_data["lookups"] or "").splitlines():
            if line.strip():
                tool, sep, finder = line.strip().partition("=")
                if not sep:
                    raise forms.ValidationError(f"expected TOOL=LOOKUP_TOOL, got {line!r}")
                pairs[tool.strip()] = finder.strip()
        return pairs


@admin.register(UpstreamTool)
class UpstreamToolAdmin(PlumbingListAdmin):
    """Imported MCP tools and their watch: quarantined ones first; import, confirm, re-version."""

    list_display = ["tool_spec", "upstream_name", "server_url", "state", "detected_at", "proposed_class", "confirmed", "checked_at"]
    list_filter = ["state", "server_url"]
    search_fields = ["upstream_name", "tool_spec__name", "server_url"]
    actions = ["confirm_class", "new_version_from_change", "refresh_now"]
    fields = UpstreamToolInline.fields[:-2] + ["class_confirmation", "difference"]
    readonly_fields = fields

    # --- scoping: as the ToolSpecs they watch, but a global tool's row is the platform's alone
    # (its server URL and credential name are the platform's business, and confirming a class
    # is an edit of the tool) ---
    def get_queryset(self, request):
        qs = super().get_queryset(request).select_related("tool_spec", "class_confirmed_by")
        platform, ids = toolspec_management_scope(request)
        return qs if platform else qs.filter(tool_spec__tenant_id__in=ids)

    def has_change_permission(self, request, obj=None):
        # Every field is read-only: "change" here is the right to run the actions on a row.
        platform, ids = toolspec_management_scope(request)
        return (super().has_change_permission(request, obj) and (platform or bool(ids))
                and (obj is None or platform or obj.tool_spec.tenant_id in ids))

    def get_ordering(self, request):
        return ["state", "server_url", "upstream_name"]  # "changed" and "missing" sort before "pinned"

    def has_add_permission(self, request):
        return False  # rows come from an import

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(boolean=True, description="class confirmed")
    def confirmed(self, obj):
        return obj.class_confirmed_by_admin

    class_confirmation = UpstreamToolInline.class_confirmation
    difference = UpstreamToolInline.difference

    def get_urls(self):
        return [path("import/", self.admin_site.admin_view(self.import_view), name="specs_app_upstreamtool_import")] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        extra = {"title": "Imported MCP tools", "import_url": reverse("admin:specs_app_upstreamtool_import")}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def import_view(self, request):
        """Read an upstream's tools/list and create draft ToolSpecs (the console face of mcp_import)."""
        platform, ids = toolspec_management_scope(request)
        if not request.user.has_perm("specs_app.add_toolspec") or not (platform or ids):
            raise PermissionDenied("importing creates ToolSpecs")
        tenants = Tenant.objects.all() if platform else Tenant.objects.filter(pk__in=ids)
        form = UpstreamImportForm(request.POST or None, tenants=tenants, platform=platform)
        if request.method == "POST" and form.is_valid():
            try:
                report = upstream_import(url=form.cleaned_data["url"], prefix=form.cleaned_data["prefix"],
                                         credential=form.cleaned_data["credential"], lookups=form.cleaned_data["lookups"],
                                         user=request.user, tenant=form.cleaned_data["tenant"])
            except (UpstreamUnavailable, ValidationError) as exc:
                form.add_error(None, "; ".join(getattr(exc, "messages", [str(exc)])))
            else:
                for spec in report.created:
                    self.message_user(request, f"Draft {spec.ref} ({spec.side_effect_class}, proposed from annotations): "
                                               "review and confirm its class, then publish.")
                for name, why in report.skipped.items():
                    self.message_user(request, f"Skipped {name}: {why}", messages.WARNING)
                if report.unchanged:
                    self.message_user(request, f"Already pinned: {', '.join(report.unchanged)}.")
                return redirect("admin:specs_app_upstreamtool_changelist")
        context = {**self.admin_site.each_context(request), "title": "Import tools from an MCP server", "form": form,
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/upstream/import.html", context)

    @admin.action(description="Confirm the side-effect class as it stands (trust it for calls)", permissions=["change"])
    def confirm_class(self, request, queryset):
        for watch in queryset:
            upstream_confirm_class(upstream=watch, user=request.user)
            self.message_user(request, f"{watch.tool_spec.ref}: class {watch.tool_spec.side_effect_class} confirmed.")

    @admin.action(description="New draft version from the changed upstream definition", permissions=["change"])
    def new_version_from_change(self, request, queryset):
        for watch in queryset:
            try:
                draft = upstream_new_version(upstream=watch, user=request.user)
            except ValidationError as exc:
                self.message_user(request, f"{watch.tool_spec.ref}: {'; '.join(exc.messages)}", messages.ERROR)
                continue
            self.message_user(request, f"Draft {draft.ref} made from the new definition: confirm its class and publish.")

    @admin.action(description="Refresh these servers' definitions now", permissions=["change"])
    def refresh_now(self, request, queryset):
        # Queued, not run here: each listing may take up to 10 s, longer than a request should.
        urls = sorted(set(queryset.values_list("server_url", flat=True)))
        try:
            upstream_refresh_enqueue(server_urls=urls)
        except UpstreamUnavailable as exc:
            self.message_user(request, f"{exc} The periodic refresh will still run.", messages.ERROR)
            return
        self.message_user(request, f"Refresh of {len(urls)} server{'s' if len(urls) != 1 else ''} queued "
                                   f"({', '.join(urls)}): reload this page in a few seconds; "
                                   "\"checked at\" moves when a worker has listed it.")
