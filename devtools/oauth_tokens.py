"""An OAuth access token as the console's consent page would lead to one, without the browser:
for benchmarks and tests that need a token of a given subject and resource (issue 33). The rows
are the toolkit's own (application, access token, refresh family) plus the consent behind them."""
from __future__ import annotations

import secrets
import uuid
from datetime import timedelta

from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model, get_refresh_token_model

from oauth.models import AgentConsent
from oauth.tokens import checksum, new_access_token, new_refresh_token


def issue_consented_token(*, subject, user, resource: str, client_name: str = "devtools client",
                          expires_in: int = 900) -> str:
    """A live (or, with ``expires_in`` <= 0, expired) access token acting as ``subject``, bound to
    ``resource``, consented by ``user``; returns its secret."""
    application = get_application_model().objects.create(
        name=client_name, client_type="public", authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1/callback")
    secret = new_access_token(None)
    access = get_access_token_model()(user=user, application=application, scope="mcp", resource=[resource],
                                      expires=timezone.now() + timedelta(seconds=expires_in))
    access.token, access.token_checksum = "", checksum(secret)  # stored hashed, as the toolkit stores them
    access.save()
    family = uuid.uuid4()
    refresh = get_refresh_token_model()(user=user, application=application, access_token=access, token_family=family,
                                        resource=[resource])
    refresh.token, refresh.token_checksum = "", checksum(new_refresh_token(None))
    refresh.save()
    AgentConsent.objects.create(application=application, user=user, subject=subject, resource=resource,
                                code_checksum=checksum(secrets.token_urlsafe(16)), token_family=family,
                                redeemed_at=timezone.now())
    return secret
