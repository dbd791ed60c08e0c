"""Bearer-token authentication for agent runtimes: subject and tenant come from the token only."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from specs_app.models import ApiToken, PersonalToken, Subject
from specs_app.services import token_hash, verified_tokens

# Writing last_used_at on every request would turn each read into a write; once a minute is plenty.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_verify(*, secret: str) -> ApiToken | None:
    """The live token with this secret (its subject and tenant loaded), or None.

    Shared by the REST API and the MCP front door: the same tokens, the same rule. A live token
    is remembered for ``TOOLOPS_TOKEN_CACHE_SECONDS`` (``specs_app.services.VerifiedTokenCache``:
    by hash, revocation through ``api_token_revoke`` forgets it at once, any other within that time).
    """
    digest = token_hash(secret)
    token = verified_tokens.get(digest)
    if token is not None:
        return token
    token = (
        ApiToken.objects.select_related("subject__tenant")
        .filter(token_hash=digest, revoked_at__isnull=True, subject__is_active=True)
        .first()
    )
    if token is not None:
        _touch(token)
        verified_tokens.put(digest, token)
    return token


def api_token_remembered(*, secret: str) -> ApiToken | None:
    """The live token with this secret if it was verified within ``TOOLOPS_TOKEN_CACHE_SECONDS``,
    else None — without touching the database (callable from an event loop)."""
    return verified_tokens.get(token_hash(secret))


def _touch(token: ApiToken | PersonalToken) -> None:
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        type(token).objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


@dataclass(frozen=True)
class AgentPrincipal:
    """The authenticated caller of the agent API (``request.user``)."""

    subject: Subject
    token_id: int

    is_authenticated = True
    is_anonymous = False
    is_staff = False

    @property
    def tenant(self):
        return self.subject.tenant

    def __str__(self) -> str:
        return str(self.subject)


def personal_token_verify(*, secret: str) -> PersonalToken | None:
    """The live personal token with this secret, of an active staff user (user loaded), or None.

    Only ``PersonalToken`` rows are looked at: an agent's ``ApiToken`` never authenticates a person."""
    token = (
        PersonalToken.objects.select_related("user")
        .filter(token_hash=token_hash(secret), revoked_at__isnull=True, user__is_active=True, user__is_staff=True)
        .first()
    )
    if token is not None:
        _touch(token)
    return token


def _bearer_secret(request, keyword: str) -> str | None:
    """The secret of ``Authorization: Bearer <secret>``, None when no such header."""
    header = authentication.get_authorization_header(request).split()
    if not header or header[0].lower() != keyword.lower().encode():
        return None
    if len(header) != 2:
        raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'", code="invalid_token")
    try:
        return header[1].decode("ascii")
    except UnicodeDecodeError:
        raise exceptions.AuthenticationFailed("token is not ASCII", code="invalid_token") from None


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        secret = _bearer_secret(request, self.keyword)
        if secret is None:
            return None
        token = api_token_verify(secret=secret)
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked token", code="invalid_token")
        return AgentPrincipal(subject=token.subject, token_id=token.pk), token

    def authenticate_header(self, request):
        return self.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agent_api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token issued in the console (shown once)."}


class PersonTokenAuthentication(authentication.BaseAuthentication):
    """The Approvals API: ``request.user`` is the Django user who holds the personal token."""

    keyword = "Bearer"

    def authenticate(self, request):
        secret = _bearer_secret(request, self.keyword)
        if secret is None:
            return None
        token = personal_token_verify(secret=secret)
        if token is None:
            raise exceptions.AuthenticationFailed("unknown or revoked personal token", code="invalid_token")
        user = token.user
        user.token_id = f"person:{token.pk}"  # the per-token rate limit (toolops/throttling.py)
        return user, token

    def authenticate_header(self, request):
        return self.keyword


class PersonTokenScheme(OpenApiAuthenticationExtension):
    target_class = "agent_api.auth.PersonTokenAuthentication"
    name = "personTokenAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "A person's token for the Approvals API, issued in the console (Your API tokens; shown once)."}
