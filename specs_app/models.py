"""Who may act and with which tools: tenants, subjects, API tokens and versioned ToolSpecs."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from toolops.model_io.mcp_definitions import definition_diff
from toolops.model_io.rendering import model_facing_name, tool_ref
from toolops.runtime.zones import is_iana_zone


def validate_timezone_name(value: str) -> None:
    if not is_iana_zone(value):
        raise ValidationError(f"{value!r} is not an IANA time zone (e.g. Europe/Paris)")


class Tenant(models.Model):
    """An isolation boundary: nothing of one tenant is visible to another's subjects."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        # Held per tenant (django-guardian object permissions); held model-wide they cover every
        # tenant (platform staff). Approving/resolving also needs the ToolSpec's own permission
        # (approve_toolspec / resolve_toolspec): the scope is (tenant, ToolSpec).
        permissions = [
            ("manage_grants_tenant", "Can grant capabilities inside this tenant"),
            ("approve_calls", "Can approve confirmations of this tenant's calls"),
            ("resolve_calls", "Can resolve unknown outcomes of this tenant's calls"),
            ("view_calls", "Can see this tenant's calls (dashboard, call records)"),
            ("manage_toolspecs_tenant", "Can edit ToolSpecs owned by this tenant (model-wide: also global ones)"),
            # Issue 33: consenting to an MCP client (OAuth) acting as one of this tenant's subjects.
            ("connect_agents", "Can let an MCP client act as one of this tenant's agents (OAuth consent)"),
        ]

    def __str__(self) -> str:
        return self.slug


class Subject(models.Model):
    """An acting identity (an agent runtime) inside one tenant; API tokens belong to it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="subjects")
    name = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True)
    # The person this agent acts for, set by an admin: every run it opens (REST or MCP) acts for
    # them, so they never approve its calls. PROTECT: a person named on runs is deactivated, not deleted.
    acts_for = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="the person this agent acts for (a user of its tenant): every run it opens acts for them, "
                  "and they can never approve its calls",
    )
    # Issue 33: the zone and locale of the runs the MCP server opens for this agent (a stock MCP
    # client cannot send _meta["dev.toolops/run"]), so "tomorrow 09:00" is read in its person's zone.
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone_name],
                                help_text="IANA time zone of the runs the MCP server opens for this agent")
    locale = models.CharField(max_length=35, default="en-US", help_text="BCP 47 locale of those runs")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="specs_subject_unique_name_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class ApiToken(models.Model):
    """A bearer token for one Subject. Only its SHA-256 is stored; the secret is shown once."""

    subject = models.ForeignKey(Subject, on_delete=models.PROTECT, related_name="tokens")
    label = models.CharField(max_length=200, blank=True)
    # The public prefix lets an admin recognise a token without the secret.
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 hex: the auth lookup
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name, verbose_name_plural = "API token", "API tokens"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.subject})"


class PersonalToken(models.Model):
    """A person's (Django user's) token for the Approvals API. Only its SHA-256 is stored.

    Kept apart from ``ApiToken`` on purpose: an agent's token never decides a confirmation and
    a person's token never proposes a call (each API authenticates against its own table)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personal_tokens")
    label = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)  # sha256 hex: the auth lookup
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name, verbose_name_plural = "personal API token", "personal API tokens"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class SideEffectClass(models.TextChoices):
    READ_ONLY = "read_only", "read only"
    WRITE_IDEMPOTENT = "write_idempotent", "write, idempotent (accepts a key)"
    WRITE_UNSAFE = "write_unsafe", "write, no idempotency guarantee"


class ExpiredKeyPolicy(models.TextChoices):
    REJECT = "reject", "reject the reused key"
    NEW_CALL = "new_call", "treat as a new call"


class ToolSpec(models.Model):
    """One version of a tool. Published versions are immutable (service check + DB trigger)."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"
        RETIRED = "retired"

    name = models.CharField(max_length=120)
    version = models.PositiveIntegerField()
    # Empty: a global tool (platform admins), listed to every tenant. Set: listed to, granted in
    # and callable by that tenant only. Names stay unique across tenants, so a ref is unambiguous.
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="toolspecs",
        help_text="empty: a global tool, listed to every tenant; set: owned by and listed to that tenant only",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    title = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    schema_dialect = models.CharField(max_length=200, default="https://json-schema.org/draft/2020-12/schema")
    format_assertion = models.BooleanField(default=False)
    side_effect_class = models.CharField(max_length=20, choices=SideEffectClass.choices)
    normalizers = models.JSONField(default=list, blank=True, help_text='[{"pointer": "/date", "normalizer": "date", "options": {}}]')
    required_capabilities = models.JSONField(default=list, blank=True)
    timeout_policy = models.JSONField(default=dict, blank=True)
    retry_policy = models.JSONField(default=dict, blank=True)
    confirmation_policy = models.JSONField(default=dict, blank=True)
    result_policy = models.JSONField(default=dict, blank=True)
    executor = models.JSONField(default=dict, blank=True)
    idempotency_retention_seconds = models.PositiveIntegerField(default=24 * 3600)
    expired_key_policy = models.CharField(max_length=16, choices=ExpiredKeyPolicy.choices, default=ExpiredKeyPolicy.REJECT)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    published_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "-version"]
        permissions = [
            ("approve_toolspec", "Can approve confirmations of this tool"),
            ("resolve_toolspec", "Can resolve unknown outcomes of this tool"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="specs_toolspec_unique_version"),
            models.CheckConstraint(condition=Q(version__gte=1), name="specs_toolspec_version_positive"),
            models.CheckConstraint(
                condition=Q(status__in=["draft", "published", "retired"]), name="specs_toolspec_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(side_effect_class__in=["read_only", "write_idempotent", "write_unsafe"]),
                name="specs_toolspec_side_effect_valid",
            ),
            models.CheckConstraint(
                condition=Q(status="draft") | Q(published_at__isnull=False),
                name="specs_toolspec_published_has_time",
            ),
        ]
        indexes = [
            # GET /tools and model-call registration: published versions by name.
            models.Index(fields=["status", "name", "version"], name="specs_toolspec_status_name"),
        ]

    def __str__(self) -> str:
        return self.ref

    @property
    def ref(self) -> str:
        return tool_ref(self.name, self.version)

    @property
    def model_facing_name(self) -> str:  # noqa: D401
        return model_facing_name(self.name, self.version)

    @property
    def is_published(self) -> bool:
        return self.status != self.Status.DRAFT


class OperationClass(models.TextChoices):
    READ = "read"
    CREATE = "create"
    MODIFY = "modify"
    DELETE = "delete"


class Capability(models.Model):
    """A named right with one operation class, e.g. ``calendar.write`` (create)."""

    name = models.CharField(max_length=120, unique=True)
    operation_class = models.CharField(max_length=10, choices=OperationClass.choices)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "capabilities"
        constraints = [
            models.CheckConstraint(
                condition=Q(operation_class__in=["read", "create", "modify", "delete"]),
                name="specs_capability_operation_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.operation_class})"


class Grant(models.Model):
    """A capability given to a subject (or every subject of a tenant), with scope and limits.

    Grants are never deleted: revoking sets ``revoked_at``/``revoked_by``/``revoke_reason`` and
    every change is a ``GrantChange`` row (who, when, why).
    """

    class ScopeKind(models.TextChoices):
        ANY = "any"
        EXACT = "exact", "exact ids"
        PATH_PREFIX = "path_prefix", "path prefix"
        DOMAIN_SUFFIX = "domain_suffix", "domain suffix"
        GLOB = "glob"
        # Scheme, host and port pinned plus a path prefix (docs/concepts/admission.md Egress): the scope for URLs.
        URL_PREFIX = "url_prefix", "URL prefix"

    class Effect(models.TextChoices):
        ALLOW = "allow"
        CONFIRM = "confirm", "allow after a human confirms"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    capability = models.ForeignKey(Capability, on_delete=models.PROTECT, related_name="grants")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="grants")
    subject = models.ForeignKey(
        Subject, null=True, blank=True, on_delete=models.PROTECT, related_name="grants",
        help_text="empty: every subject of the tenant",
    )
    scope_kind = models.CharField(max_length=16, choices=ScopeKind.choices, default=ScopeKind.EXACT)
    scope_values = models.JSONField(default=list, blank=True, help_text='e.g. ["primary"] or ["/data/reports"]')
    limits = models.JSONField(default=dict, blank=True, help_text='e.g. {"max_amount_per_call": 10000, "calls_per_minute": 5}')
    effect = models.CharField(max_length=10, choices=Effect.choices, default=Effect.ALLOW)
    # Thresholds, quorum and escalation (toolops/decisions/approval_policy.py); {} = the grant's effect as is.
    approval_policy = models.JSONField(default=dict, blank=True, help_text=(
        'e.g. {"thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm"}, '
        '{"effect": "confirm", "approvals": 2}], "escalate_after_seconds": 600, "escalation_group": "payments-leads"}'))
    tool_refs = models.JSONField(default=list, blank=True, help_text='pinned "name@version" list; empty = the versions current when granted')
    expires_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(help_text="why this grant exists")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # Authorization snapshot: live grants of one tenant for the required capabilities.
            models.Index(
                fields=["tenant", "capability", "subject"], name="specs_grant_live_lookup",
                condition=Q(revoked_at__isnull=True),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(scope_kind__in=["any", "exact", "path_prefix", "domain_suffix", "glob", "url_prefix"]),
                name="specs_grant_scope_kind_valid",
            ),
            models.CheckConstraint(condition=Q(effect__in=["allow", "confirm"]), name="specs_grant_effect_valid"),
        ]

    def __str__(self) -> str:
        who = self.subject.name if self.subject_id else f"all of {self.tenant.slug}"
        return f"{self.capability.name} → {who} ({self.effect})"

    @property
    def is_live(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class GrantChange(models.Model):
    """Append-only audit of grant changes: granted, revoked, edited — with who, when and why."""

    grant = models.ForeignKey(Grant, on_delete=models.PROTECT, related_name="changes")
    action = models.CharField(max_length=16)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]


class RoleChange(models.Model):
    """Append-only audit of people's roles in a tenant (``specs_app.people``), as ``GrantChange``
    is for grants: who gave or took which role, on which tools, when and why."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="role_changes")
    person = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(max_length=16)  # "assigned" | "removed"
    role = models.CharField(max_length=16)
    tools = models.JSONField(default=list, blank=True, help_text='tool refs; [] = every tool of the tenant')
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]


class UpstreamTool(models.Model):
    """The watch over one ToolSpec imported from an upstream MCP server (issue 16).

    The ToolSpec stays immutable and carries the pin in its executor config; this row holds
    what may change: the watch state (``toolops.model_io.mcp_definitions.Watch``), the changed
    definition and when it was seen, and an admin's confirmation of the side-effect class.
    """

    tool_spec = models.OneToOneField(ToolSpec, on_delete=models.PROTECT, related_name="upstream")
    server_url = models.CharField(max_length=500)
    upstream_name = models.CharField(max_length=200)
    credential = models.CharField(max_length=120, blank=True, help_text='"secret:NAME" reference; never the value')
    pinned_definition = models.JSONField(help_text="the governed part of the definition the spec was made from")
    pinned_sha256 = models.CharField(max_length=64)
    proposed_class = models.CharField(max_length=20, choices=SideEffectClass.choices)
    proposal_reasons = models.JSONField(default=list, blank=True)
    # Which class an admin confirmed (valid only while it equals the spec's class).
    class_confirmed = models.CharField(max_length=20, blank=True, choices=SideEffectClass.choices)
    class_confirmed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    class_confirmed_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, default="pinned")
    observed_definition = models.JSONField(null=True, blank=True)
    observed_sha256 = models.CharField(max_length=64, blank=True)
    detected_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    check_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["server_url", "upstream_name"]
        verbose_name, verbose_name_plural = "imported MCP tool", "imported MCP tools"
        constraints = [
            models.CheckConstraint(condition=Q(state__in=["pinned", "changed", "missing"]), name="specs_upstreamtool_state_valid"),
        ]
        indexes = [
            # Dashboard and refresh: the quarantined ones, and each server's tools.
            models.Index(fields=["state"], name="specs_upstreamtool_state", condition=~Q(state="pinned")),
            models.Index(fields=["server_url"], name="specs_upstreamtool_server"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream_name} @ {self.server_url} → {self.tool_spec.ref} ({self.state})"

    @property
    def quarantined(self) -> bool:
        return self.state != "pinned"

    @property
    def changed_fields(self) -> list[str]:
        return [d["field"] for d in definition_diff(self.pinned_definition, self.observed_definition)] if self.quarantined else []

    @property
    def class_confirmed_by_admin(self) -> bool:
        return bool(self.class_confirmed) and self.class_confirmed == self.tool_spec.side_effect_class
