"""Writes for tool specs and identities: publishing, new versions, API tokens."""
from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max, QuerySet
from django.utils import timezone
from guardian.shortcuts import get_objects_for_user

from toolops.sql import column_attnames
from toolops.decisions.approval_policy import ApprovalPolicy, PolicyError
from toolops.decisions.deadlines import TimeoutPolicy
from toolops.decisions.retry import RetryPolicy
from toolops.decisions.authorization import GRANT_EFFECTS, SCOPE_KINDS, Limits, url_parts
from toolops.decisions.egress import MAX_REDIRECTS
from toolops.db_guards import TOOLSPEC_IMMUTABLE_COLUMNS
from toolops.runtime.normalizers import check_rules
from toolops.model_io.rendering import RenderableTool, ToolNameError, parse_tool_ref
from toolops.model_io.tool_messages import ResultPolicy
from toolops.runtime.validation import SchemaRefused, check_schema

from specs_app.models import ApiToken, Capability, Grant, GrantChange, PersonalToken, Subject, Tenant, ToolSpec
from specs_app.selectors import toolspec_scope_q

TOKEN_PREFIX = "tko_"

# Content a published version may never change: the same list the DB trigger guards
# (publishing itself sets published_at, so it is not copied into a new version).
IMMUTABLE_FIELDS = tuple(c for c in TOOLSPEC_IMMUTABLE_COLUMNS if c != "published_at")


def toolspec_check(*, spec: ToolSpec) -> str:
    """Everything that must hold before a version is published; returns the resolved dialect.

    Raises ``ValidationError`` with a clear message: bad name, unsupported ``$schema``,
    a schema invalid for its dialect, an unresolvable ``$ref``, a ``format`` ToolOps cannot
    assert while the spec asks for format assertion, or an unknown normalizer.
    """
    try:
        RenderableTool(
            name=spec.name, version=spec.version, description=spec.description,
            input_schema=spec.input_schema, side_effect_class=spec.side_effect_class,
        )
    except (ToolNameError, ValueError) as exc:
        raise ValidationError(str(exc)) from exc
    try:
        dialect = check_schema(spec.input_schema, spec.schema_dialect or None, format_assertion=spec.format_assertion)
    except SchemaRefused as exc:
        raise ValidationError(f"schema refused ({exc.reason}): {exc.message}") from exc
    try:
        check_rules(list(spec.normalizers or []))
    except ValueError as exc:
        raise ValidationError(f"normalizers: {exc}") from exc
    try:
        ResultPolicy.from_dict(spec.result_policy or None)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"result_policy: {exc}") from exc
    for field, parse in (("timeout_policy", TimeoutPolicy.from_dict), ("retry_policy", RetryPolicy.from_dict)):
        try:
            parse(getattr(spec, field) or None)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"{field}: {exc}") from exc
    _check_cost(spec.executor if isinstance(spec.executor, dict) else {})
    try:
        spec_policy = ApprovalPolicy.from_dict(
            (spec.confirmation_policy or {}).get("approval") if isinstance(spec.confirmation_policy, dict) else None)
    except PolicyError as exc:
        raise ValidationError(f"confirmation_policy.approval: {exc}") from exc
    if spec_policy is not None and spec_policy.thresholds and spec_policy.currency is None:
        raise ValidationError(f"confirmation_policy.approval: {MISSING_POLICY_CURRENCY}")
    follow = (spec.executor or {}).get("follow_redirects", 0) if isinstance(spec.executor, dict) else 0
    if isinstance(follow, bool) or not isinstance(follow, int) or not 0 <= follow <= MAX_REDIRECTS:
        raise ValidationError(f"executor.follow_redirects must be an integer from 0 to {MAX_REDIRECTS}")
    toolspec_check_owner(spec=spec)
    return dialect


def toolspec_check_owner(*, spec: ToolSpec) -> None:
    """Every version of a name has one owner (a tenant, or none: global), so a tenant's tool
    never gains a version another tenant — or every tenant — is shown."""
    others = ToolSpec.objects.filter(name=spec.name).exclude(pk=spec.pk)
    others = others.filter(tenant__isnull=False) if spec.tenant_id is None else others.exclude(tenant_id=spec.tenant_id)
    owners = list(others.values_list("tenant__slug", flat=True)[:1])
    if owners:
        owner = owners[0]
        raise ValidationError(f"{spec.name} already has versions owned by {owner or 'the platform (global)'}: "
                              "all versions of a tool have the same owner")


def _check_cost(executor: dict) -> None:
    """``executor.cost`` (the declared cost of one sent attempt) is a non-negative decimal;
    ``executor.cost_header`` (where an HTTP tool reports its own cost) a header name."""
    cost = executor.get("cost")
    plain = isinstance(cost, (int, float, str)) and not isinstance(cost, bool) and re.fullmatch(r"[0-9]{1,12}(\.[0-9]{1,6})?", str(cost))
    if cost is not None and not plain:
        raise ValidationError("executor.cost must be a non-negative decimal (up to 12 digits, 6 after the point)")
    header = executor.get("cost_header")
    if header is not None and not (isinstance(header, str) and re.fullmatch(r"[A-Za-z0-9-]{1,64}", header)):
        raise ValidationError("executor.cost_header must be an HTTP header name")


def toolspec_publish(*, spec: ToolSpec) -> ToolSpec:
    """Publish a draft. From here on the version is immutable; a change is a new version."""
    dialect = toolspec_check(spec=spec)
    updated = ToolSpec.objects.filter(pk=spec.pk, status=ToolSpec.Status.DRAFT).update(
        status=ToolSpec.Status.PUBLISHED, published_at=timezone.now(), schema_dialect=dialect
    )
    if updated != 1:
        raise ValidationError(f"{spec.ref} is not a draft")
    spec.refresh_from_db()
    return spec


def toolspec_retire(*, spec: ToolSpec) -> ToolSpec:
    """Stop offering a published version to new model calls; history keeps pointing at it."""
    ToolSpec.objects.filter(pk=spec.pk, status=ToolSpec.Status.PUBLISHED).update(
        status=ToolSpec.Status.RETIRED, retired_at=timezone.now()
    )
    spec.refresh_from_db()
    return spec


def toolspec_new_version(*, spec: ToolSpec, user=None) -> ToolSpec:
    """A draft copy of ``spec`` as the next free version of the same name."""
    with transaction.atomic():
        top = ToolSpec.objects.select_for_update().filter(name=spec.name).aggregate(v=Max("version"))["v"] or 0
        draft = ToolSpec(**{f: getattr(spec, f) for f in IMMUTABLE_FIELDS}, tenant_id=spec.tenant_id, created_by=user)
        draft.version = top + 1
        draft.save()
    return draft


def toolspec_save_draft(*, spec: ToolSpec) -> ToolSpec:
    """Save edits to a draft; published versions refuse (the trigger would too)."""
    if spec.pk and ToolSpec.objects.filter(pk=spec.pk).exclude(status=ToolSpec.Status.DRAFT).exists():
        raise ValidationError(f"{spec.ref} is published and immutable; make a new version instead")
    spec.save()
    return spec


def token_hash(secret: str) -> str:
    # Tokens are 256-bit random values, so one SHA-256 (no salt, no stretching) is enough
    # and keeps the per-request lookup an indexed equality match.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def api_token_issue(*, subject: Subject, label: str = "", user=None, secret: str | None = None) -> tuple[ApiToken, str]:
    """Create a token for ``subject``; returns the row and the secret, which is never stored."""
    secret = secret or TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        subject=subject, label=label, prefix=secret[: len(TOKEN_PREFIX) + 6], token_hash=token_hash(secret), created_by=user
    )
    return token, secret


def api_token_revoke(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    verified_tokens.forget(token.token_hash)


class VerifiedTokenCache:
    """Per process: token hash → the live token row (with subject and tenant) read moments ago.

    Every API request authenticates; without this each one pays an indexed three-table read
    and its query building (~1 ms of CPU on the measured path, bench/load.py). An entry lives
    ``TOOLOPS_TOKEN_CACHE_SECONDS`` (5 s; 0: off) and is keyed by the SHA-256 (never the
    secret). Revoking a token through ``api_token_revoke`` forgets it here at once; a
    revocation made by another process, or a subject deactivated, is honoured within that many
    seconds. Only live tokens are remembered: an unknown or revoked one is looked up each time.
    Each hit returns fresh model instances (nothing is shared between requests or threads).
    """

    MAX_ENTRIES = 4096

    def __init__(self):
        self._entries: dict[str, tuple[float, tuple, tuple, tuple]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def ttl() -> float:
        return float(settings.TOOLOPS_TOKEN_CACHE_SECONDS)  # read per call: tests may change it

    def get(self, digest: str) -> ApiToken | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        expires, token_values, subject_values, tenant_values = entry
        if time.monotonic() >= expires:
            self._entries.pop(digest, None)
            return None
        token = ApiToken.from_db("default", _TOKEN_FIELDS, token_values)
        subject = Subject.from_db("default", _SUBJECT_FIELDS, subject_values)
        subject.tenant = Tenant.from_db("default", _TENANT_FIELDS, tenant_values)
        token.subject = subject
        return token

    def put(self, digest: str, token: ApiToken) -> None:
        ttl = self.ttl()
        if ttl <= 0:
            return
        entry = (time.monotonic() + ttl, tuple(getattr(token, f) for f in _TOKEN_FIELDS),
                 tuple(getattr(token.subject, f) for f in _SUBJECT_FIELDS),
                 tuple(getattr(token.subject.tenant, f) for f in _TENANT_FIELDS))
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()  # bounded; the next requests simply read again
            self._entries[digest] = entry

    def forget(self, digest: str) -> None:
        self._entries.pop(digest, None)

    def clear(self) -> None:
        self._entries.clear()


_TOKEN_FIELDS = column_attnames(ApiToken)
_SUBJECT_FIELDS = column_attnames(Subject)
_TENANT_FIELDS = column_attnames(Tenant)
verified_tokens = VerifiedTokenCache()


PERSONAL_TOKEN_PREFIX = "tkp_"


def personal_token_issue(*, user, label: str = "") -> tuple[PersonalToken, str]:
    """Create an Approvals API token for ``user``; returns the row and the secret (shown once, never stored)."""
    secret = PERSONAL_TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = PersonalToken.objects.create(
        user=user, label=label, prefix=secret[: len(PERSONAL_TOKEN_PREFIX) + 6], token_hash=token_hash(secret)
    )
    return token, secret


def personal_token_revoke(*, token: PersonalToken) -> None:
    PersonalToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())


# --- grants -------------------------------------------------------------------------------

def grant_tenants_for_user(*, user) -> QuerySet[Tenant]:
    """Tenants in which ``user`` may grant and revoke: all for superusers (and holders of the
    model-wide permission), else those where they hold ``manage_grants_tenant`` (guardian)."""
    if not (user.is_authenticated and user.is_active):  # guardian has no anonymous user here
        return Tenant.objects.none()
    return get_objects_for_user(user, "specs_app.manage_grants_tenant", klass=Tenant)


def _require_manage(user, tenant: Tenant) -> None:
    if user is None or not grant_tenants_for_user(user=user).filter(pk=tenant.pk).exists():
        raise PermissionDenied(f"you may not manage grants of tenant {tenant.slug}")


def _require_reason(reason: str) -> str:
    if not (reason or "").strip():
        raise ValidationError("a reason is required", code="reason_required")
    return reason.strip()


def grant_current_tool_refs(*, capability: Capability, tenant: Tenant) -> list[str]:
    """``name@version`` of the published ToolSpecs ``tenant`` may see (global or its own) whose
    ``required_capabilities`` name ``capability``.

    Filtered in Python: the JSON list shape is not indexable portably, and there are few specs.
    """
    specs = (ToolSpec.objects.filter(status=ToolSpec.Status.PUBLISHED).filter(toolspec_scope_q(tenant_id=tenant.pk))
             .only("name", "version", "required_capabilities"))
    return sorted(
        spec.ref for spec in specs
        if any(isinstance(e, dict) and e.get("capability") == capability.name for e in spec.required_capabilities or [])
    )


MISSING_POLICY_CURRENCY = ('invalid approval policy: thresholds need their currency, e.g. {"currency": "EUR", "thresholds": '
                           '[...]} (up_to amounts are minor units of it; a call in another currency is denied)')


def approval_policy_errors(policy) -> str | None:
    """Why ``policy`` is not a usable approval policy (schema: toolops/decisions/approval_policy.py), or None."""
    try:
        parsed = ApprovalPolicy.from_dict(policy)
    except PolicyError as exc:
        return f"invalid approval policy: {exc}"
    if parsed is not None and parsed.thresholds and parsed.currency is None:
        return MISSING_POLICY_CURRENCY
    if parsed is not None and parsed.escalation_group and not Group.objects.filter(name=parsed.escalation_group).exists():
        return f"escalation_group {parsed.escalation_group!r} is not a group: create it under Authentication › Groups first"
    return None


def grant_validate(*, capability, tenant, subject, scope_kind, scope_values, limits, effect, tool_refs, expires_at,
                   approval_policy=None) -> None:
    """Raise ``ValidationError`` keyed by field for grant values the runtime could not use."""
    errors = {}
    policy_error = approval_policy_errors(approval_policy or {})
    if policy_error:
        errors["approval_policy"] = policy_error
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = "the expiry is in the past"
    if subject is not None and subject.tenant_id != tenant.pk:
        errors["subject"] = f"{subject} is not a subject of tenant {tenant.slug}"
    if scope_kind not in SCOPE_KINDS:
        errors["scope_kind"] = f"scope kind must be one of {', '.join(SCOPE_KINDS)}"
    if not isinstance(scope_values, list) or not all(isinstance(v, str) for v in scope_values):
        errors["scope_values"] = 'a JSON list of strings, e.g. ["primary"]'
    elif scope_kind != "any" and not scope_values:
        errors["scope_values"] = f"scope kind {scope_kind!r} needs at least one value (or use 'any')"
    elif scope_kind == "url_prefix" and any(url_parts(v) is None for v in scope_values):
        errors["scope_values"] = ("each URL prefix must be an absolute http(s) URL without userinfo, "
                                  "e.g. http://127.0.0.1:8765/web/pages/")
    if not isinstance(limits, dict):
        errors["limits"] = 'a JSON object, e.g. {"calls_per_minute": 5}'
    else:
        try:
            parsed = Limits.from_dict(limits)
        except (TypeError, ValueError) as exc:
            errors["limits"] = f"invalid limits: {exc}"
        else:
            if parsed.has_money_limits and parsed.currency is None:
                errors["limits"] = ('amount limits need their currency, e.g. {"currency": "EUR", "max_amount_per_call": 50000} '
                                    '(minor units of it; a call in another currency is not covered)')
    if effect not in GRANT_EFFECTS:
        errors["effect"] = f"effect must be one of {', '.join(GRANT_EFFECTS)}"
    if not isinstance(tool_refs, list):
        errors["tool_refs"] = 'a JSON list of "name@version" strings'
    elif not tool_refs and not grant_current_tool_refs(capability=capability, tenant=tenant):
        # Empty means "pin the current versions"; with none to pin it would silently mean "any".
        errors["tool_refs"] = f"no published tool needs {capability.name} yet: name the tool versions explicitly"
    else:
        for ref in tool_refs:
            try:
                parse_tool_ref(ref)
            except ToolNameError as exc:
                errors["tool_refs"] = str(exc)
        if "tool_refs" not in errors and (foreign := _foreign_tool_refs(tool_refs, tenant)):
            errors["tool_refs"] = f"owned by another tenant, not grantable in {tenant.slug}: {', '.join(foreign)}"
    if errors:
        raise ValidationError(errors)


def _foreign_tool_refs(tool_refs: list[str], tenant: Tenant) -> list[str]:
    """The refs in ``tool_refs`` naming a ToolSpec owned by a tenant other than ``tenant``."""
    wanted = {parse_tool_ref(ref) for ref in tool_refs}
    if not wanted:
        return []
    names = {name for name, _ in wanted}
    owned = (ToolSpec.objects.filter(name__in=names, tenant__isnull=False).exclude(tenant_id=tenant.pk)
             .values_list("name", "version"))
    return sorted(f"{name}@{version}" for name, version in owned if (name, version) in wanted)


def grant_create(
    *, user, capability: Capability, tenant: Tenant, subject: Subject | None, scope_kind: str, scope_values: list,
    limits: dict, effect: str, tool_refs: list, expires_at, reason: str, approval_policy: dict | None = None,
) -> Grant:
    """Give ``capability`` to ``subject`` (``None``: every subject of ``tenant``); audited as "granted".

    Empty ``tool_refs`` pins the grant to the tool versions published now that need the
    capability, so a later version does not inherit it silently. Raises ``PermissionDenied``
    when ``user`` may not manage grants of ``tenant`` and ``ValidationError`` for bad values.
    """
    _require_manage(user, tenant)
    reason = _require_reason(reason)
    grant_validate(
        capability=capability, tenant=tenant, subject=subject, scope_kind=scope_kind, scope_values=scope_values,
        limits=limits, effect=effect, tool_refs=tool_refs, expires_at=expires_at, approval_policy=approval_policy,
    )
    pinned = list(tool_refs) or grant_current_tool_refs(capability=capability, tenant=tenant)
    policy = ApprovalPolicy.from_dict(approval_policy or {})
    with transaction.atomic():
        grant = Grant.objects.create(
            capability=capability, tenant=tenant, subject=subject, scope_kind=scope_kind, scope_values=scope_values,
            limits=Limits.from_dict(limits).to_dict(), effect=effect, tool_refs=pinned, expires_at=expires_at,
            reason=reason, granted_by=user, approval_policy=policy.to_dict() if policy else {},
        )
        GrantChange.objects.create(grant=grant, action="granted", actor=user, reason=reason, data=_grant_record(grant))
    return grant


def grant_revoke(*, grant: Grant, user, reason: str) -> bool:
    """Revoke a live grant. Returns False when it was already revoked (nothing is written then)."""
    _require_manage(user, grant.tenant)
    reason = _require_reason(reason)
    now = timezone.now()
    with transaction.atomic():
        # Conditional: of two admins revoking at once, one writes the row and the audit entry.
        changed = Grant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by=user, revoke_reason=reason
        )
        if changed != 1:
            return False
        GrantChange.objects.create(grant=grant, action="revoked", actor=user, reason=reason, data={"revoked_at": now.isoformat()})
    grant.revoked_at, grant.revoked_by, grant.revoke_reason = now, user, reason
    return True


def grant_set_expiry(*, grant: Grant, user, expires_at, reason: str) -> Grant:
    """Change the expiry of an unrevoked grant (the only edit a grant allows); audited as "edited"."""
    _require_manage(user, grant.tenant)
    reason = _require_reason(reason)
    with transaction.atomic():
        before = Grant.objects.select_for_update().filter(pk=grant.pk).values_list("expires_at", "revoked_at").get()
        if before[1] is not None:
            raise ValidationError("a revoked grant cannot be edited")
        Grant.objects.filter(pk=grant.pk).update(expires_at=expires_at)
        GrantChange.objects.create(
            grant=grant, action="edited", actor=user, reason=reason,
            data={"field": "expires_at", "from": _iso(before[0]), "to": _iso(expires_at)},
        )
    grant.expires_at = expires_at
    return grant


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _grant_record(grant: Grant) -> dict:
    return {
        "capability": grant.capability.name, "tenant": grant.tenant.slug,
        "subject_id": str(grant.subject_id) if grant.subject_id else None, "scope_kind": grant.scope_kind,
        "scope_values": grant.scope_values, "limits": grant.limits, "effect": grant.effect,
        "tool_refs": grant.tool_refs, "expires_at": _iso(grant.expires_at), "approval_policy": grant.approval_policy,
    }
