"""OAuth tokens: their form, their verification for the MCP server (cached), a consent's revocation.

Access tokens start with ``tkoa_`` and refresh tokens with ``tkor_`` (API tokens: ``tko_``), so
the MCP server knows which store to ask and a leaked one is recognisable. Only their SHA-256 is
stored (the toolkit's RFC 9700 token storage).
"""
from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Subquery
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from specs_app.models import Subject

from oauth.models import AgentConsent

ACCESS_PREFIX, REFRESH_PREFIX = "tkoa_", "tkor_"


def new_access_token(request, *args, **kwargs) -> str:
    return ACCESS_PREFIX + secrets.token_urlsafe(32)


def new_refresh_token(request, *args, **kwargs) -> str:
    return REFRESH_PREFIX + secrets.token_urlsafe(32)


def checksum(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class OAuthPrincipal:
    """What an OAuth access token lets its bearer be: ``subject``, through ``client_id`` (and its
    name), for ``resources``, until ``expires_at``; ``consent_id`` names the consent (its rate
    limit and its MCP sessions)."""

    subject: Subject
    consent_id: int
    client_id: str
    client_name: str
    resources: tuple[str, ...]
    expires_at: datetime


class _Remembered:
    """Per process: access-token checksum → the principal read moments ago, for at most
    ``TOOLOPS_TOKEN_CACHE_SECONDS`` (as ``VerifiedTokenCache`` for API tokens) and never past the
    token's expiry. A revocation through ``consent_revoke`` forgets this process's entries at
    once; one made elsewhere (another process, RFC 7009 revocation) is honoured within that time."""

    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, OAuthPrincipal]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str) -> OAuthPrincipal | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        until, principal = entry
        if time.monotonic() >= until or principal.expires_at <= timezone.now():
            self._entries.pop(digest, None)
            return None
        return principal

    def put(self, digest: str, principal: OAuthPrincipal) -> None:
        ttl = min(float(settings.TOOLOPS_TOKEN_CACHE_SECONDS), (principal.expires_at - timezone.now()).total_seconds())
        if ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + ttl, principal)

    def forget_consent(self, consent_id: int) -> None:
        with self._lock:
            for digest in [d for d, (_, p) in self._entries.items() if p.consent_id == consent_id]:
                del self._entries[digest]

    def clear(self) -> None:
        self._entries.clear()


remembered = _Remembered()


def oauth_token_remembered(*, secret: str) -> OAuthPrincipal | None:
    """The principal of this access token if verified within the cache time (no database)."""
    return remembered.get(checksum(secret))


def oauth_token_verify(*, secret: str) -> OAuthPrincipal | None:
    """The principal of a live access token of a live consent of an active subject, or None."""
    digest = checksum(secret)
    principal = remembered.get(digest)
    if principal is not None:
        return principal
    token = (get_access_token_model().objects.select_related("application")
             .filter(token_checksum=digest, expires__gt=timezone.now()).first())
    if token is None or token.application is None:
        return None
    # The consent stands behind the token's refresh-token family: one round trip with the subject.
    family = get_refresh_token_model().objects.filter(access_token_id=token.pk).values("token_family")[:1]
    consent = (AgentConsent.objects.select_related("subject__tenant")
               .filter(token_family=Subquery(family), application_id=token.application_id, revoked_at__isnull=True,
                       subject__is_active=True)
               .first())
    if consent is None:  # a token no consent stands behind (e.g. a replayed code's): nobody
        return None
    principal = OAuthPrincipal(
        subject=consent.subject, consent_id=consent.pk, client_id=token.application.client_id,
        client_name=token.application.name, resources=tuple(token.resource or ()), expires_at=token.expires,
    )
    remembered.put(digest, principal)
    return principal


def consent_revoke(consent: AgentConsent) -> None:
    """Revoke a consent and every token issued under it (its refresh-token family)."""
    with transaction.atomic():
        AgentConsent.objects.filter(pk=consent.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if consent.token_family is not None:
            get_refresh_token_model().revoke_family(consent.token_family)
    remembered.forget_consent(consent.pk)
