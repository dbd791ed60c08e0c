"""Bearer tokens for the MCP front door: the same ToolOps API tokens as the REST API, and the
OAuth access tokens the console's authorization server issues (``oauth/``, issue 33) — bound to
this server as their RFC 8707 resource and to the agent subject a person chose; either kind
makes the request that subject's, exactly alike (grants, limits, budgets, approvals, the record).

The SDK's ``BearerAuthBackend`` asks this verifier; a missing or unknown token leaves the
request unauthenticated and the SDK's ``RequireAuthMiddleware`` answers 401 with
``WWW-Authenticate: Bearer …, resource_metadata="<RFC 9728 document>"``.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from mcp.server.auth.provider import AccessToken

from oauth.tokens import ACCESS_PREFIX, OAuthPrincipal, oauth_token_remembered, oauth_token_verify

from specs_app.models import Subject

from agent_api.auth import api_token_remembered, api_token_verify
from mcp_server.db import in_db_thread

SUBJECT_CLAIM = "dev.toolops/subject"
TOKEN_CLAIM = "dev.toolops/token"  # the token's id: its rate limit counts with its REST requests
OAUTH_CLIENT_CLAIM = "dev.toolops/oauthClient"  # the OAuth client a call is made through


class ApiTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over ToolOps' hashed API tokens."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token.isascii():
            return None
        if token.startswith(ACCESS_PREFIX):
            return await _oauth_access(token)
        # A token verified moments ago needs no database thread (the same cache the REST API uses).
        found = api_token_remembered(secret=token) or await in_db_thread(api_token_verify, secret=token)
        if found is None:
            return None
        subject = found.subject
        return AccessToken(
            # client_id + subject identify the principal: an MCP session opened with one
            # subject's token cannot be used with another's (the SDK compares them).
            token=token, client_id=f"toolops-token-{found.pk}", subject=str(subject.pk), scopes=[],
            claims={"tenant": subject.tenant.slug, SUBJECT_CLAIM: subject, TOKEN_CLAIM: found.pk},
        )


async def _oauth_access(token: str) -> AccessToken | None:
    """An OAuth access token: live, of a live consent, and issued for this server (RFC 8707: a
    token for another resource is refused like an unknown one, 401 ``invalid_token``)."""
    principal = oauth_token_remembered(secret=token) or await in_db_thread(oauth_token_verify, secret=token)
    if principal is None or not _for_this_server(principal):
        return None
    subject = principal.subject
    return AccessToken(
        token=token, client_id=f"toolops-oauth-{principal.consent_id}", subject=str(subject.pk), scopes=["mcp"],
        expires_at=int(principal.expires_at.timestamp()), resource=settings.TOOLOPS_MCP_URL,
        claims={"tenant": subject.tenant.slug, SUBJECT_CLAIM: subject, TOKEN_CLAIM: f"oauth:{principal.consent_id}",
                OAUTH_CLIENT_CLAIM: {"client_id": principal.client_id, "name": principal.client_name}},
    )


def _for_this_server(principal: OAuthPrincipal) -> bool:
    own = settings.TOOLOPS_MCP_URL.rstrip("/")
    return any(resource.rstrip("/") == own for resource in principal.resources)


def request_oauth_client(request: Any) -> dict | None:
    """The OAuth client (``client_id``, ``name``) this HTTP request came through; None for an API token."""
    return request.scope["user"].access_token.claims.get(OAUTH_CLIENT_CLAIM)


def request_subject(request: Any) -> Subject:
    """The subject the SDK's auth middleware attached to this HTTP request."""
    return request.scope["user"].access_token.claims[SUBJECT_CLAIM]


def request_token_id(request: Any) -> int | None:
    """The id of the API token this HTTP request was authenticated with (None without one)."""
    user = request.scope.get("user") if request is not None else None
    access_token = getattr(user, "access_token", None)
    return access_token.claims.get(TOKEN_CLAIM) if access_token is not None else None
