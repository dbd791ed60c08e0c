"""Writes for tool specs and identities: publishing, new versions, API tokens."""
from __future__ import annotations

import hashlib
import secrets

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from toolops.runtime.normalizers import check_rules
from toolops.runtime.rendering import RenderableTool, ToolNameError
from toolops.runtime.validation import SchemaRefused, check_schema

from .models import ApiToken, Subject, ToolSpec

TOKEN_PREFIX = "tko_"

# Content a published version may never change (also enforced by a DB trigger).
IMMUTABLE_FIELDS = (
    "name", "version", "title", "description", "input_schema", "schema_dialect", "format_assertion",
    "side_effect_class", "normalizers", "required_capabilities", "timeout_policy", "retry_policy",
    "confirmation_policy", "result_policy", "executor", "idempotency_retention_seconds", "expired_key_policy",
)


def toolspec_check(*, spec: ToolSpec) -> str:
    """Everything that must hold before a version is published; returns the resolved dialect.

    Raises ``ValidationError`` with a clear message: bad name, unsupported ``$schema``,
    a schema invalid for its dialect, an unresolvable ``$ref`` or an unknown normalizer.
    """
    try:
        RenderableTool(
            name=spec.name, version=spec.version, description=spec.description,
            input_schema=spec.input_schema, side_effect_class=spec.side_effect_class,
        )
    except (ToolNameError, ValueError) as exc:
        raise ValidationError(str(exc)) from exc
    try:
        dialect = check_schema(spec.input_schema, spec.schema_dialect or None)
    except SchemaRefused as exc:
        raise ValidationError(f"schema refused ({exc.reason}): {exc.message}") from exc
    try:
        check_rules(list(spec.normalizers or []))
    except ValueError as exc:
        raise ValidationError(f"normalizers: {exc}") from exc
    return dialect


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
        draft = ToolSpec(**{f: getattr(spec, f) for f in IMMUTABLE_FIELDS}, created_by=user)
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
