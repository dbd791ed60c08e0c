"""Console for runs and invocations: read-only records with the raw bytes and the event timeline."""
from __future__ import annotations

import json
import uuid
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import Q
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from specs_app.admin import PlumbingListAdmin, pretty_json
from specs_app.models import ToolSpec

from invocations_app.models import (
    HTTP_URL, WEBHOOK_EVENT_TYPES, Event, Invocation, ModelCall, Proposal, Run, WebhookAttempt, WebhookDelivery, WebhookEndpoint,
)
from webhooks.delivery import webhook_deliveries_resend, webhook_secret_new


class CappedCountPaginator(Paginator):
    """COUNT over at most CAP+1 rows: an exact count of millions is not worth a full scan."""

    CAP = 10_000

    @cached_property
    def count(self):
        return self.object_list[: self.CAP + 1].count()


class ToolNameFilter(admin.SimpleListFilter):
    """Tool choices from the ToolSpec table, not a DISTINCT over every invocation."""

    title, parameter_name = "tool", "tool_name"

    def lookups(self, request, model_admin):
        return [(n, n) for n in ToolSpec.objects.order_by("name").values_list("name", flat=True).distinct()]

    def queryset(self, request, queryset):
        return queryset.filter(tool_name=self.value()) if self.value() else queryset


class CreatedWithinFilter(admin.SimpleListFilter):
    """Recent windows on the created_at index (date_hierarchy would scan the table for MIN/MAX)."""

    title, parameter_name = "created", "created_within"
    WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}

    def lookups(self, request, model_admin):
        return [("1h", "last hour"), ("24h", "last 24 hours"), ("7d", "last 7 days"), ("30d", "last 30 days")]

    def queryset(self, request, queryset):
        window = self.WINDOWS.get(self.value() or "")
        return queryset.filter(created_at__gte=timezone.now() - window) if window else queryset


class ReadOnlyAdmin(admin.ModelAdmin):
    """The record is written by services only; the console shows it."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "subject", "status", "model_calls_used", "tool_calls_used", "created_at"]
    list_filter = ["status", "tenant"]
    search_fields = ["=id", "trace_id"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant", "subject"]


@admin.register(ModelCall)
class ModelCallAdmin(PlumbingListAdmin, ReadOnlyAdmin):
    list_display = ["id", "run", "format", "created_at"]
    search_fields = ["=id", "=run__id"]
    readonly_fields = ["visible"]

    @admin.display(description="visible tools (exactly as rendered)")
    def visible(self, obj):
        return pretty_json([t.rendered for t in obj.visible_tools.all()])


@admin.register(Invocation)
class InvocationAdmin(ReadOnlyAdmin):
    list_display = ["id", "tool_display", "state", "tenant", "subject", "error_code", "created_at"]
    list_filter = ["state", ToolNameFilter, CreatedWithinFilter, "tenant"]
    search_fields = ["=id"]  # see get_search_results: exact matches on indexed columns
    list_select_related = ["proposal", "tenant", "subject__tenant"]
    paginator = CappedCountPaginator
    show_full_result_count = False  # no COUNT(*) over millions of rows on every page load
    fieldsets = [
        (None, {"fields": ["id", "state", "tool_display", "tenant", "subject", "run", "model_call", "trace_id", "span_id"]}),
        ("Proposal (exactly as received)", {"fields": ["proposal_name", "raw_bytes", "raw_hex", "parser_record", "parsed"]}),
        ("Validation and normalization", {"fields": ["validation_record", "normalization_context_display", "normalization_trace_display", "normalized", "digest", "idempotency_key"]}),
        ("Outcome", {"fields": ["error_code", "error_message", "error_detail_display"]}),
        ("Event timeline", {"fields": ["timeline"]}),
    ]
    readonly_fields = [
        "id", "state", "tool_display", "tenant", "subject", "run", "model_call", "trace_id", "span_id",
        "proposal_name", "raw_bytes", "raw_hex", "parser_record", "parsed", "validation_record",
        "normalization_context_display", "normalization_trace_display", "normalized", "digest", "idempotency_key",
        "error_code", "error_message", "error_detail_display", "timeline",
    ]

    def get_queryset(self, request):
        # One select_related with every relation the list shows: Django skips
        # list_select_related when the queryset already has one (3 queries per row otherwise).
        return super().get_queryset(request).select_related("proposal", "tenant", "subject__tenant")

    def get_search_results(self, request, queryset, search_term):
        """Exact id, trace id, digest, idempotency key or tool_call id (icontains over 1M rows took 8.6 s)."""
        term = search_term.strip()
        if not term:
            return queryset, False
        q = Q(trace_id=term) | Q(digest=term) | Q(idempotency_key=term)
        proposal_ids = list(Proposal.objects.filter(proposal_id=term).values_list("pk", flat=True)[:1000])
        if proposal_ids:
            q |= Q(proposal_id__in=proposal_ids)
        try:
            q |= Q(pk=uuid.UUID(term))
        except ValueError:
            pass
        return queryset.filter(q), False

    @admin.display(description="tool", ordering="tool_name")
    def tool_display(self, obj):
        return obj.tool_ref or format_html("<em>unresolved: {}</em>", obj.proposal.name)

    @admin.display(description="name as proposed")
    def proposal_name(self, obj):
        return obj.proposal.name

    @admin.display(description="argument bytes (as text, invalid UTF-8 escaped)")
    def raw_bytes(self, obj):
        raw = bytes(obj.proposal.arguments_bytes)
        return format_html("<pre>{}</pre><small>{} bytes</small>", raw.decode("utf-8", "backslashreplace")[:20000], len(raw))

    @admin.display(description="argument bytes (hex, first 2 KiB)")
    def raw_hex(self, obj):
        return format_html("<pre>{}</pre>", bytes(obj.proposal.arguments_bytes)[:2048].hex(" "))

    @admin.display(description="parser")
    def parser_record(self, obj):
        return pretty_json(obj.proposal.parser)

    @admin.display(description="parsed value")
    def parsed(self, obj):
        return format_html("<pre class='toolops-json'>{}</pre>", obj.proposal.parsed_json or "—")

    @admin.display(description="validator record (schema and semantic layers)")
    def validation_record(self, obj):
        return pretty_json(obj.validation)

    @admin.display(description="normalization context")
    def normalization_context_display(self, obj):
        return pretty_json(obj.normalization_context)

    @admin.display(description="normalizer outputs")
    def normalization_trace_display(self, obj):
        return pretty_json(obj.normalization_trace)

    @admin.display(description="normalized arguments")
    def normalized(self, obj):
        return pretty_json(obj.normalized_arguments)

    @admin.display(description="error detail")
    def error_detail_display(self, obj):
        return pretty_json(obj.error_detail)

    @admin.display(description="events")
    def timeline(self, obj):
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td><td><code>{}</code></td><td><pre>{}</pre></td></tr>",
            (
                (e.seq, e.at.isoformat(timespec="milliseconds"), e.kind, e.from_state or "∅", e.to_state, e.actor,
                 e.span_id, pretty_json_text(e.data))
                for e in Event.objects.filter(invocation=obj).order_by("seq")
            ),
        )
        return format_html(
            "<table class='toolops-timeline'><thead><tr><th>#</th><th>at</th><th>kind</th><th>edge</th>"
            "<th>actor</th><th>span</th><th>data</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )


def pretty_json_text(value) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True)


# --- outgoing webhooks: endpoints per tenant, every delivery and every attempt ---------------------

class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https", validators=[HTTP_URL],
                         error_messages={"invalid": HTTP_URL.message})  # the form's own "Enter a valid URL." hid why
    events = forms.MultipleChoiceField(choices=[(e, e) for e in WEBHOOK_EVENT_TYPES], widget=forms.CheckboxSelectMultiple)
    secret = forms.CharField(required=False, max_length=200,
                             help_text="leave empty to generate one; the receiver checks ToolOps-Signature with it")

    class Meta:
        model = WebhookEndpoint
        fields = ["tenant", "url", "events", "secret", "is_active", "description"]


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ["url", "tenant", "subscribed", "is_active", "created_at"]
    list_filter = ["tenant", "is_active"]
    search_fields = ["url", "tenant__slug", "description"]

    @admin.display(description="events")
    def subscribed(self, obj):
        return ", ".join(obj.events or [])

    def save_model(self, request, obj, form, change):
        if not obj.secret:
            obj.secret = webhook_secret_new()
            self.message_user(request, f"Signing secret for {obj.url}: {obj.secret} — configure it in the receiver.",
                              messages.WARNING)
        super().save_model(request, obj, form, change)


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    can_delete = False
    extra = 0
    max_num = 0
    fields = readonly_fields = ["number", "started_at", "duration_ms", "status_code", "error", "response_excerpt", "next_attempt_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(PlumbingListAdmin):
    """Every delivery and its attempts (read-only); failed ones can be sent again."""

    list_display = ["created_at", "event_type", "endpoint", "state", "attempts", "last_status_code", "next_attempt_at", "delivered_at"]
    list_filter = ["state", "event_type", "endpoint__tenant"]
    search_fields = ["event_id", "endpoint__url"]
    list_select_related = ["endpoint__tenant"]
    inlines = [WebhookAttemptInline]
    fields = ["event_id", "event_type", "endpoint", "state", "attempts", "next_attempt_at", "last_status_code", "last_error",
              "created_at", "delivered_at", "body"]
    readonly_fields = fields
    actions = ["send_again"]

    @admin.display(description="payload")
    def body(self, obj):
        return pretty_json(obj.payload)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # the delivery log is a record

    @admin.action(description="Send again now (failed or waiting deliveries)")
    def send_again(self, request, queryset):
        count, inactive = webhook_deliveries_resend(deliveries=queryset)
        skipped = f" {inactive} left alone: their endpoint is deactivated (activate it first)." if inactive else ""
        self.message_user(request, f"{count} delivery(ies) queued again.{skipped}",
                          level=messages.WARNING if inactive else messages.INFO)
