"""Console for tool specs (draft → publish → new version), tenants, subjects and API tokens."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.utils.html import format_html

from .models import ApiToken, Subject, Tenant, ToolSpec
from .services import api_token_issue, api_token_revoke, toolspec_new_version, toolspec_publish, toolspec_retire


def pretty_json(value) -> str:
    return format_html("<pre class='toolops-json'>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Subject)
class SubjectAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "is_active", "created_at"]
    list_filter = ["tenant", "is_active"]
    search_fields = ["name", "tenant__slug"]
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
class ApiTokenAdmin(admin.ModelAdmin):
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


@admin.register(ToolSpec)
class ToolSpecAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "status", "side_effect_class", "published_at"]
    list_filter = ["status", "side_effect_class"]
    search_fields = ["name", "title", "description"]
    actions = ["publish", "retire", "new_version"]
    save_as = False

    def get_readonly_fields(self, request, obj=None):
        if obj and obj.is_published:
            return [f.name for f in self.model._meta.fields] + ["rendered_schema"]
        return ["status", "published_at", "retired_at", "created_by", "created_at"]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj and obj.is_published and "rendered_schema" not in fields:
            fields = list(fields) + ["rendered_schema"]
        return fields

    @admin.display(description="input schema")
    def rendered_schema(self, obj):
        return pretty_json(obj.input_schema)

    def has_delete_permission(self, request, obj=None):
        return bool(obj is None or not obj.is_published) and super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        try:
            obj.save()
        except IntegrityError as exc:  # the DB trigger refusing a change to a published version
            self.message_user(request, f"Not saved: {exc}", messages.ERROR)

    @admin.action(description="Publish selected drafts (immutable afterwards)")
    def publish(self, request, queryset):
        for spec in queryset:
            try:
                toolspec_publish(spec=spec)
                self.message_user(request, f"Published {spec.ref}.")
            except ValidationError as exc:
                self.message_user(request, f"{spec.ref} not published: {'; '.join(exc.messages)}", messages.ERROR)

    @admin.action(description="Retire selected versions (no longer offered to new model calls)")
    def retire(self, request, queryset):
        for spec in queryset:
            toolspec_retire(spec=spec)
        self.message_user(request, f"Retired {queryset.count()} version(s).")

    @admin.action(description="New draft version from this")
    def new_version(self, request, queryset):
        for spec in queryset:
            draft = toolspec_new_version(spec=spec, user=request.user)
            self.message_user(request, f"Created draft {draft.ref} from {spec.ref}.")
