"""Bearer tokens for the MCP front door: the same ToolOps API tokens as the REST API.

The SDK's ``BearerAuthBackend`` asks this verifier; a missing or unknown token leaves the
request unauthenticated and the SDK's ``RequireAuthMiddleware`` answers 401 with
``WWW-Authenticate: Bearer …, resource_metadata="<RFC 9728 document>"``.
"""
from __future__ import annotations

from typing import Any

from mcp.server.auth.provider import AccessToken

from specs_app.models import Subject

from agent_api.auth import api_token_remembered, api_token_verify
from mcp_server.db import in_db_thread

SUBJECT_CLAIM = "dev.toolops/subject"
TOKEN_CLAIM = "dev.toolops/token"  # the token's id: its rate limit counts with its REST requests


class ApiTokenVerifier:
    """``mcp.server.auth.provider.TokenVerifier`` over ToolOps' hashed API tokens."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token.isascii():
            return None
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


def request_subject(request: Any) -> Subject:
    """The subject the SDK's auth middleware attached to this HTTP request."""
    return request.scope["user"].access_token.claims[SUBJECT_CLAIM]


def request_token_id(request: Any) -> int | None:
    """The id of the API token this HTTP request was authenticated with (None without one)."""
    user = request.scope.get("user") if request is not None else None
    access_token = getattr(user, "access_token", None)
    return access_token.claims.get(TOKEN_CLAIM) if access_token is not None else None
