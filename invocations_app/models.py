"""Runs, model calls, proposals, invocations and their append-only event log."""
from __future__ import annotations

import uuid

from django.core.validators import URLValidator
from django.db import models
from django.db.models import Q

from django.conf import settings

from specs_app.models import Grant, Subject, Tenant, ToolSpec
from toolops.decisions.approval_display import format_money
from toolops.runtime.states import State

STATE_CHOICES = [(s.value, s.value) for s in State]


class Run(models.Model):
    """A bounded agent loop owned by one subject; budgets are enforced by the runtime."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        FINISHED = "finished"
        EXHAUSTED = "exhausted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="runs")
    subject = models.ForeignKey(Subject, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    budgets = models.JSONField(default=dict, blank=True)
    model_calls_used = models.PositiveIntegerField(default=0)
    tool_calls_used = models.PositiveIntegerField(default=0)
    result_bytes_used = models.PositiveBigIntegerField(default=0)
    cost_used = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    timezone = models.CharField(max_length=64, default="UTC")
    locale = models.CharField(max_length=35, default="en-US")
    metadata = models.JSONField(default=dict, blank=True)
    # The person this run acts for: ``on_behalf_of`` as the agent declared it (username or email,
    # blank when it named nobody) and ``on_behalf_of_user``, the user of the run's tenant it was
    # resolved to at creation (or the subject's ``acts_for``). Separation of duties compares the
    # user: they never approve the run's calls nor grant its standing approvals.
    on_behalf_of = models.CharField(max_length=254, blank=True, default="")
    # Indexed below (partial): deleting a user checks PROTECT through it.
    on_behalf_of_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False,
    )
    # The MCP front door's key for a run it opened: "session:<Mcp-Session-Id>" or
    # "day:<YYYY-MM-DD>" (stateless clients); blank for runs opened over the REST API.
    mcp_key = models.CharField(max_length=200, blank=True, default="")
    trace_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["active", "finished", "exhausted"]), name="invocations_run_status_valid"
            ),
            # The MCP front door finds (or races to create) a session's or a day's run by this.
            models.UniqueConstraint(
                fields=["subject", "mcp_key"], condition=~Q(mcp_key=""), name="invocations_run_unique_mcp_key"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="invocations_run_tenant_recent"),
            # Deleting a user: PROTECT asks whether any run acts for them (most runs act for nobody).
            models.Index(fields=["on_behalf_of_user"], name="invocations_run_person",
                         condition=Q(on_behalf_of_user__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"run {self.id}"

    @property
    def person_name(self) -> str:
        """Whom the run acts for, for a page: the resolved user's username, else the declared text."""
        return self.on_behalf_of_user.get_username() if self.on_behalf_of_user_id else self.on_behalf_of


class ModelCall(models.Model):
    """One model request inside a Run: the exact tool versions shown, and the context it carried."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Led by the (run, created_at) index below, which also finds a run's latest model call.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="model_calls", db_index=False)
    format = models.CharField(max_length=16, default="openai")
    # Invocation ids whose tool messages were in this model call's context (the API's `context`).
    context = models.JSONField(default=list, blank=True)
    span_id = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The MCP front door resolves every tools/call against its run's latest listing;
            # a run opened per subject per day gathers one model call per tools/list.
            models.Index(fields=["run", "-created_at"], name="invocations_mc_run_latest"),
        ]

    def __str__(self) -> str:
        return f"model call {self.id}"


class ModelCallTool(models.Model):
    """One tool version visible to a model call, with the definition exactly as rendered."""

    model_call = models.ForeignKey(ModelCall, on_delete=models.CASCADE, related_name="visible_tools")
    tool_spec = models.ForeignKey(ToolSpec, on_delete=models.PROTECT, related_name="+")
    model_facing_name = models.CharField(max_length=128)
    tool_ref = models.CharField(max_length=140)
    rendered = models.JSONField()

    class Meta:
        ordering = ["id"]
        constraints = [
            # Proposal lookup: a name is resolved only inside this call's visible set.
            models.UniqueConstraint(fields=["model_call", "model_facing_name"], name="invocations_mct_unique_mf"),
            models.UniqueConstraint(fields=["model_call", "tool_ref"], name="invocations_mct_unique_ref"),
        ]


class Proposal(models.Model):
    """What the model proposed, with the argument bytes exactly as received."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Indexed by the unique (model_call, proposal_id) constraint, which leads with it.
    model_call = models.ForeignKey(ModelCall, on_delete=models.PROTECT, related_name="proposals", db_index=False)
    proposal_id = models.CharField(max_length=200)  # the model's tool_call id
    name = models.CharField(max_length=500)  # as the model wrote it
    arguments_bytes = models.BinaryField()
    # The parser's output as JSON text: text, not jsonb, because a JSON string may
    # legally hold U+0000, which PostgreSQL's jsonb cannot store.
    parsed_json = models.TextField(blank=True)
    # Why no invocation was made for this proposal (e.g. "budget_exhausted"); blank otherwise.
    refusal = models.CharField(max_length=64, blank=True)
    # Set when this proposal re-used an idempotency key that already has an invocation.
    replay_of = models.ForeignKey(
        "Invocation", null=True, blank=True, on_delete=models.PROTECT, related_name="replays", db_index=False
    )
    parser = models.JSONField(default=dict)  # parser name, version and limits
    # Where the proposal came in, beyond the API: for MCP {"transport": "mcp", "session_id",
    # "request_id", "protocol_version", "tracestate"}; empty for REST proposals.
    origin = models.JSONField(default=dict, blank=True)
    span_id = models.CharField(max_length=16)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            # The API's replay/409 rule: one proposal per (model call, tool_call id).
            models.UniqueConstraint(fields=["model_call", "proposal_id"], name="invocations_proposal_unique_id"),
        ]
        indexes = [
            models.Index(fields=["proposal_id"], name="invocations_proposal_tcid"),  # console search
            # Few proposals are replays: index only those rather than one NULL per proposal.
            models.Index(fields=["replay_of"], name="invocations_proposal_replay", condition=Q(replay_of__isnull=False)),
        ]


class Invocation(models.Model):
    """The runtime's binding of a proposal to a tool version, a subject and a digest."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    proposal = models.OneToOneField(Proposal, on_delete=models.PROTECT, related_name="invocation")
    # run and tenant lead composite indexes below; a single-column index each would only
    # cost every admission two more index insertions.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="invocations", db_index=False)
    model_call = models.ForeignKey(ModelCall, on_delete=models.PROTECT, related_name="invocations")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="invocations", db_index=False)
    subject = models.ForeignKey(Subject, on_delete=models.PROTECT, related_name="invocations")
    tool_spec = models.ForeignKey(ToolSpec, null=True, blank=True, on_delete=models.PROTECT, related_name="invocations")
    tool_name = models.CharField(max_length=120, blank=True)
    tool_version = models.PositiveIntegerField(null=True, blank=True)
    state = models.CharField(max_length=32, choices=STATE_CHOICES, default=State.PROPOSED)
    # The last event's seq; bumped by the same UPDATE that moves the state (see services).
    event_seq = models.PositiveIntegerField(default=0)
    validation = models.JSONField(default=dict, blank=True)
    normalized_arguments = models.JSONField(null=True, blank=True)
    normalization_context = models.JSONField(default=dict, blank=True)
    normalization_trace = models.JSONField(default=list, blank=True)
    digest = models.CharField(max_length=64, blank=True)
    idempotency_key = models.CharField(max_length=255, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    authorization = models.JSONField(default=dict, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    error_message = models.TextField(blank=True)
    error_detail = models.JSONField(default=dict, blank=True)
    edited_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="edits", db_index=False
    )
    # Execution: retry scheduling lives here (not in a broker countdown), visible to the console.
    attempt_count = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    result_status = models.CharField(max_length=16, blank=True)  # ok | error | unknown
    result_value = models.JSONField(null=True, blank=True)
    commit_status = models.CharField(max_length=16, blank=True)  # not_committed | committed | unknown | not_applicable
    external_resource_id = models.CharField(max_length=255, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Not a column: the tool messages (format → bytes) the transition that ended this call
    # wrote through this instance (results.invocation_finish_with_message), for an answer that
    # need not read them back.
    written_tool_messages: dict[str, bytes] | None = None

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in State]), name="invocations_invocation_state_valid"
            ),
        ]
        indexes = [
            # Admin/API lists: a tenant's invocations by state, newest first.
            models.Index(fields=["tenant", "state", "-created_at"], name="invocations_inv_tenant_state"),
            # Admin list filtered by state across tenants, and queues (oldest first).
            models.Index(fields=["state", "created_at"], name="invocations_inv_state_created"),
            # Filter by tool.
            models.Index(fields=["tool_name", "tool_version", "-created_at"], name="invocations_inv_tool"),
            models.Index(fields=["run", "created_at"], name="invocations_inv_run"),
            models.Index(fields=["-created_at"], name="invocations_inv_recent"),
            # The beat task re-enqueueing due retries.
            models.Index(fields=["next_attempt_at"], name="invocations_inv_due", condition=Q(next_attempt_at__isnull=False)),
            # Console search and the record page's links (trace, digest, same idempotency key).
            models.Index(fields=["trace_id"], name="invocations_inv_trace"),
            models.Index(fields=["digest"], name="invocations_inv_digest"),
            models.Index(fields=["idempotency_key"], name="invocations_inv_idem_key"),
            # Few invocations are an approver's edit of another.
            models.Index(fields=["edited_from"], name="invocations_inv_edited", condition=Q(edited_from__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.tool_ref or self.proposal_id_display} [{self.state}]"

    @property
    def tool_ref(self) -> str:
        return f"{self.tool_name}@{self.tool_version}" if self.tool_name and self.tool_version else ""

    @property
    def proposal_id_display(self) -> str:
        return str(self.id)


class Event(models.Model):
    """Append-only log entry: every transition and decision, with W3C trace/span ids."""

    # Indexed by the unique (invocation, seq) constraint, which leads with it.
    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="events", db_index=False)
    seq = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=32, blank=True)
    to_state = models.CharField(max_length=32, blank=True)
    kind = models.CharField(max_length=64)
    data = models.JSONField(default=dict, blank=True)
    actor = models.CharField(max_length=200, default="system")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)

    class Meta:
        ordering = ["invocation", "seq"]
        constraints = [
            # GET /invocations/{id}/events orders by seq; uniqueness catches a lost race.
            models.UniqueConstraint(fields=["invocation", "seq"], name="invocations_event_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.from_state}→{self.to_state}"


class Confirmation(models.Model):
    """A human decision bound to one invocation digest (docs/concepts/confirmation.md)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        DENIED = "denied"
        EXPIRED = "expired"
        EDITED = "edited", "replaced by an edited invocation"
        CANCELLED = "cancelled", "the call was cancelled while waiting"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="confirmations")
    tool_spec = models.ForeignKey(ToolSpec, on_delete=models.PROTECT, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    subject = models.ForeignKey(Subject, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    digest = models.CharField(max_length=64)
    arguments = models.JSONField()  # the normalized arguments the digest stands for
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    replacement = models.ForeignKey(Invocation, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # Quorum: this many distinct people approve (ConfirmationApproval rows) before the call runs.
    approvals_needed = models.PositiveSmallIntegerField(default=1)
    # Escalation: undecided at escalate_at → escalated_at is set and escalation_group is notified.
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalation_group = models.CharField(max_length=150, blank=True, default="")
    escalated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(approvals_needed__gte=1), name="invocations_confirmation_quorum_positive"),
            # One open confirmation per invocation.
            models.UniqueConstraint(
                fields=["invocation"], condition=Q(state="pending"), name="invocations_confirmation_one_pending"
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "approved", "denied", "expired", "edited", "cancelled"]),
                name="invocations_confirmation_state_valid",
            ),
        ]
        indexes = [
            # The queue: pending first, oldest first, per tool / tenant.
            models.Index(fields=["state", "created_at"], name="invocations_conf_queue"),
            models.Index(fields=["tool_spec", "state", "created_at"], name="invocations_conf_tool"),
            models.Index(fields=["state", "expires_at"], name="invocations_conf_expiry"),
            # The queue's "recently decided" list.
            models.Index(fields=["-decided_at", "-created_at"], name="invocations_conf_decided"),
            # The escalation sweep: pending, not yet escalated, due by escalate_at.
            models.Index(fields=["escalate_at"], name="invocations_conf_escalate",
                         condition=Q(state="pending", escalated_at__isnull=True, escalate_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"confirmation {self.digest[:12]} [{self.state}]"

    def approvals_list(self) -> list[dict]:
        """``[{user, at}]`` of the partial approvals so far, oldest first (API and console)."""
        return [{"user": a.user.get_username(), "at": a.at.isoformat()}
                for a in sorted(self.approvals.all(), key=lambda a: a.at)]


class ConfirmationApproval(models.Model):
    """One person's approval of a confirmation's digest; the N-th distinct one decides it."""

    confirmation = models.ForeignKey(Confirmation, on_delete=models.PROTECT, related_name="approvals", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    digest = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["confirmation", "at"]
        constraints = [
            # One approval per person: approving twice never counts twice (also the lookup index).
            models.UniqueConstraint(fields=["confirmation", "user"], name="invocations_approval_one_per_user"),
        ]


class StandingApproval(models.Model):
    """An approver's run-scoped approval of further calls of one tool within limits, for a while.

    Covers a later call of that tool in that run when its amount and the call count stay within
    the limits and it needs a single approver; named as the reason on every call it covers.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="standing_approvals", db_index=False)
    tool_spec = models.ForeignKey(ToolSpec, on_delete=models.PROTECT, related_name="+")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    from_confirmation = models.ForeignKey(Confirmation, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    reason = models.TextField()
    max_amount = models.BigIntegerField(null=True, blank=True, help_text="minor units per call; empty = no cap")
    # The granting call's currency ("" when it stated none; before migration 0017 also "" when
    # uncapped), the one max_amount is in. A call in another currency is not covered, capped or
    # not, unless the approver named it in other_currencies (uncapped only: a cap is in one currency).
    currency = models.CharField(max_length=3, blank=True, default="")
    other_currencies = models.JSONField(default=list, blank=True, help_text="ISO 4217 codes the approver also named")
    max_calls = models.PositiveIntegerField(null=True, blank=True)
    calls_covered = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    revoke_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(max_amount__isnull=True) | Q(max_amount__gte=0),
                                   name="invocations_standing_amount_nonneg"),
            models.CheckConstraint(condition=Q(max_amount__isnull=True) | Q(other_currencies=[]),
                                   name="invocations_standing_cap_one_currency"),
        ]
        indexes = [
            # Authorization: the live standing approvals of (run, tool).
            models.Index(fields=["run", "tool_spec"], name="invocations_standing_live", condition=Q(revoked_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"standing approval of {self.tool_spec} in {self.run_id}"

    @property
    def max_amount_display(self) -> str:
        """The cap as a person reads it: ``amount ≤ 500.00 EUR`` (minor units when no currency is
        known), or ``any amount, EUR or USD only`` without one."""
        if self.max_amount is None:  # uncapped, still in the currencies it covers
            return f"any amount, {' or '.join(c or 'no stated currency' for c in (self.currency, *self.other_currencies))} only"
        if self.currency:
            return f"amount ≤ {format_money(self.max_amount, self.currency)}"
        return f"amount ≤ {self.max_amount} (minor units, no currency stated)"


class GrantUsage(models.Model):
    """One counted use of a grant (database backend of the counting limits)."""

    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    # Not a foreign key: units are reserved before the invocation row is written (same request).
    invocation_id = models.UUIDField(null=True, blank=True)
    amount = models.BigIntegerField(default=0)
    at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [
            # Rate and rolling-amount windows: a grant's uses since T.
            models.Index(fields=["grant", "at"], name="invocations_usage_window"),
            # Calls per run.
            models.Index(fields=["grant", "run"], name="invocations_usage_run"),
        ]


class Attempt(models.Model):
    """One try at executing an invocation; its id is the span id sent as ``traceparent``."""

    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="attempts")
    # Denormalized from the invocation: the dashboard's attempts-per-tool is an index-only scan.
    tool_spec = models.ForeignKey(ToolSpec, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    number = models.PositiveIntegerField()
    span_id = models.CharField(max_length=16)
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)  # the request may have reached the tool from here on
    ended_at = models.DateTimeField(null=True, blank=True)
    # The live worker renews this while the attempt runs; only a lapsed lease means the worker
    # is gone (docs/concepts/admission.md: "abandoned" is never merely "slow"). Null on attempts from before leases.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # The idempotency key / client reference the remote saw: derived per tenant, never the raw key.
    remote_key = models.CharField(max_length=100, blank=True, default="")
    commit = models.CharField(max_length=16, blank=True)
    failure_class = models.CharField(max_length=32, blank=True)
    outcome = models.JSONField(default=dict, blank=True)
    decision = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["invocation", "number"]
        constraints = [
            models.UniqueConstraint(fields=["invocation", "number"], name="invocations_attempt_unique_number"),
        ]
        indexes = [
            # Recovery: attempts that started and never ended (a worker died mid-attempt).
            models.Index(fields=["started_at"], name="invocations_attempt_open", condition=Q(ended_at__isnull=True)),
            # Dashboard: attempts and failure classes per tool over a window.
            models.Index(fields=["started_at"], include=["tool_spec", "failure_class", "ended_at"],
                         name="invocations_attempt_started"),
        ]


class ToolMessage(models.Model):
    """The exact bytes given to the model for one invocation, per format; written once."""

    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="tool_messages")
    format = models.CharField(max_length=16)
    message_bytes = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["invocation", "format"], name="invocations_toolmessage_unique_format"),
        ]


class ResultBody(models.Model):
    """The full (redacted) serialized result, for paging a truncated tool message."""

    invocation = models.OneToOneField(Invocation, on_delete=models.PROTECT, related_name="result_body")
    body = models.BinaryField()
    total_bytes = models.PositiveBigIntegerField()


class ResultBinary(models.Model):
    """A result that is bytes, not text (docs/concepts/results.md): stored as received, referenced from the tool
    message by media type, size and SHA-256, served at its result URL until ``expires_at``; the
    beat's purge then drops the bytes (``purged_at``) and the URL answers 410 ``result_expired``."""

    invocation = models.OneToOneField(Invocation, on_delete=models.PROTECT, related_name="result_binary")
    media_type = models.CharField(max_length=200)
    body = models.BinaryField()
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    truncated = models.BooleanField(default=False)  # reading stopped at the result policy's cap
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    # Set by the purge (``retention.binaries_purge_expired``) when it drops the bytes; the row keeps
    # media type, size and SHA-256, so the record still says what the model was shown.
    purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="resultbinary_unpurged_exp",
                                condition=models.Q(purged_at__isnull=True))]


class ModelCallMessage(models.Model):
    """A tool message exactly as one model call carried it in its context (docs/concepts/record.md): the final
    message, or the interim ``awaiting_confirmation`` / ``outcome_unknown`` one the model read
    while the call was still open."""

    class Kind(models.TextChoices):
        FINAL = "final"
        AWAITING_CONFIRMATION = "awaiting_confirmation"
        OUTCOME_UNKNOWN = "outcome_unknown"

    model_call = models.ForeignKey(ModelCall, on_delete=models.CASCADE, related_name="carried_messages")
    # Indexed: the invocation record lists the messages of one call and who carried them.
    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="carried_messages")
    format = models.CharField(max_length=16)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    message_bytes = models.BinaryField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["model_call", "invocation"], name="invocations_mcmsg_unique_carried"),
            models.CheckConstraint(
                condition=Q(kind__in=["final", "awaiting_confirmation", "outcome_unknown"]), name="invocations_mcmsg_kind_valid",
            ),
        ]


class IdempotencyRecord(models.Model):
    """docs/concepts/execution.md: one record per (tenant, name@version, key), bound to the digest it was used with."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    tool_ref = models.CharField(max_length=140)
    key = models.CharField(max_length=255)
    digest = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    invocation = models.ForeignKey(Invocation, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "tool_ref", "key"], name="invocations_idem_unique_scope"),
        ]


# --- outgoing webhooks (per tenant) ----------------------------------------------------------

WEBHOOK_EVENT_TYPES = (
    "confirmation.requested", "confirmation.decided", "confirmation.escalated", "confirmation.expired",
    "invocation.settled",
)


# http(s) only, as egress sends: Django's URLField alone also takes ftp:// and ftps://.
HTTP_URL = URLValidator(schemes=["http", "https"], message="Enter an http:// or https:// URL.")


class WebhookEndpoint(models.Model):
    """Where a tenant wants to hear about confirmations and settled calls (configured in the admin).

    The secret signs every body (``toolops.decisions.webhooks``); it is kept readable because
    signing needs it, and shown to admins only on this form."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="webhook_endpoints")
    url = models.URLField(max_length=500, validators=[HTTP_URL])
    secret = models.CharField(max_length=200, help_text="shared with the receiver; signs ToolOps-Signature")
    events = models.JSONField(default=list, help_text=f"any of: {', '.join(WEBHOOK_EVENT_TYPES)}")
    is_active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant", "url"]

    def __str__(self) -> str:
        return f"{self.tenant.slug} → {self.url}"


class WebhookDelivery(models.Model):
    """One event for one endpoint (an outbox row written with the event's own transaction).

    Retry state lives here (``attempts``, ``next_attempt_at``), not in a broker countdown."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        DELIVERED = "delivered"
        FAILED = "failed", "gave up"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.PROTECT, related_name="deliveries")
    event_id = models.UUIDField(default=uuid.uuid4)  # the same for every endpoint told of one event
    event_type = models.CharField(max_length=64)
    payload = models.JSONField()
    state = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # The beat task's "due or abandoned" scan (webhooks.delivery.webhook_deliveries_due).
            models.Index(fields=["next_attempt_at"], name="invocations_whd_due",
                         condition=Q(state__in=["pending", "sending"])),
            models.Index(fields=["endpoint", "-created_at"], name="invocations_whd_endpoint"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=["pending", "sending", "delivered", "failed"]),
                                   name="invocations_webhookdelivery_state_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint.url} [{self.state}]"


class WebhookAttempt(models.Model):
    """Every try of a delivery, kept: when, what came back, how long it took."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(default=0)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    response_excerpt = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="invocations_webhookattempt_unique")]


class DecisionLinkUse(models.Model):
    """A decision link that was opened (single use): its nonce can never open the page again."""

    nonce = models.CharField(max_length=32, unique=True)
    confirmation = models.ForeignKey(Confirmation, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    used_at = models.DateTimeField(auto_now_add=True)
