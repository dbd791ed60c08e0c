"""The key a remote sees for an invocation (docs/concepts/execution.md): derived per tenant, recorded per attempt.

``toolops.decisions.remote_keys`` holds the derivation and why it is an HMAC; this module binds it
to settings (the server secret) and to the record (the key each attempt actually sent).
"""
from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

from toolops.decisions.remote_keys import remote_key

from invocations_app.models import Attempt, Invocation


def remote_key_secret() -> bytes:
    """``TOOLOPS_REMOTE_KEY_SECRET`` when set, else a key derived from ``SECRET_KEY`` for this use only."""
    explicit = getattr(settings, "TOOLOPS_REMOTE_KEY_SECRET", "")
    if explicit:
        return explicit.encode("utf-8")
    return hmac.new(settings.SECRET_KEY.encode("utf-8"), b"toolops.remote-key-secret/1", hashlib.sha256).digest()


def invocation_remote_key(invocation: Invocation) -> str:
    """The derived key for this invocation's (tenant, name@version, key); "" when it has no key."""
    if not invocation.idempotency_key or not invocation.tool_ref:
        return ""
    return remote_key(secret=remote_key_secret(), tenant_id=str(invocation.tenant_id), tool_ref=invocation.tool_ref,
                      key=invocation.idempotency_key)


def recorded_remote_key(invocation: Invocation) -> str:
    """The key the remote was actually sent (for lookups): the latest attempt's record, else derived."""
    sent = (Attempt.objects.filter(invocation=invocation).exclude(remote_key="")
            .order_by("-number").values_list("remote_key", flat=True).first())
    return sent or invocation_remote_key(invocation)
