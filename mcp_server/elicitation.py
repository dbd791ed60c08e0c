"""Human confirmation as a URL-mode elicitation (MCP 2026-07-28, SEP-2322 multi-round trip).

A client that declares ``elicitation.url`` gets, for a call waiting for a person, an
``InputRequiredResult``: one URL elicitation pointing at the console's confirmation page, and a
sealed ``requestState``. The client shows the URL, then retries ``tools/call`` with the state;
the retry is answered with the call's result once decided (waiting for it a while), or with a
fresh state to retry again.

The state is signed with ``django.core.signing`` (the deployment's ``SECRET_KEY``, its own salt)
and bound to the invocation, its digest, the subject and an expiry; each state is redeemed
once. Refused, with a JSON-RPC invalid-params error naming why: a state whose signature does not
verify (altered), whose expiry has passed, that belongs to another subject or digest, or that
was already redeemed (replayed). Redemptions are events of the invocation (``mcp_state_redeemed``),
checked and written under the invocation's row lock, so two concurrent replays cannot both pass.
"""
from __future__ import annotations

import secrets
from datetime import timedelta

import mcp_types as types
from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from mcp.shared.exceptions import MCPError

from specs_app.models import Subject

from invocations_app.models import Confirmation, Event, Invocation
from invocations_app.transitions import event_append

SALT = "toolops.mcp.confirmation-state"
REDEEMED = "mcp_state_redeemed"
ELICITATION_KEY = "toolops.confirmation"
# A state outlives one retry round by far; the confirmation's own expiry still governs the call.
STATE_LIFETIME = timedelta(minutes=15)


def client_accepts_url_elicitation(meta: dict) -> bool:
    """Whether this 2026-07-28 request's client declared URL-mode elicitation."""
    capabilities = meta.get(types.CLIENT_CAPABILITIES_META_KEY) or {}
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and elicitation.get("url") is not None


def confirmation_state_seal(*, invocation: Invocation, subject: Subject) -> str:
    expires = timezone.now() + STATE_LIFETIME
    return signing.dumps({"inv": str(invocation.pk), "digest": invocation.digest, "sub": str(subject.pk),
                          "exp": int(expires.timestamp()), "nonce": secrets.token_hex(12)}, salt=SALT)


def confirmation_elicitation(*, invocation_id, subject: Subject) -> types.InputRequiredResult | None:
    """The input-required answer for a call waiting for a person: the console page + a sealed
    state; None when a person decided meanwhile (the caller answers as for any other client)."""
    invocation = Invocation.objects.get(pk=invocation_id, subject=subject)
    confirmation = invocation.confirmations.filter(state=Confirmation.Status.PENDING).first()
    if confirmation is None:
        return None
    url = settings.TOOLOPS_CONSOLE_URL + reverse("confirmations:detail", args=[confirmation.pk])
    message = (f"A person must confirm this call ({invocation.tool_ref}, digest {invocation.digest[:12]}…) "
               f"before it runs; the request expires at {confirmation.expires_at.isoformat()}.")
    return types.InputRequiredResult(
        input_requests={ELICITATION_KEY: types.ElicitRequest(params=types.ElicitRequestURLParams(message=message, url=url))},
        request_state=confirmation_state_seal(invocation=invocation, subject=subject),
    )


def confirmation_state_redeem(*, state: str, subject: Subject) -> Invocation:
    """The invocation a retry's state stands for, once; ``MCPError`` (invalid params) otherwise."""
    try:
        claims = signing.loads(state, salt=SALT)
    except signing.BadSignature:
        raise _refused("invalid_request_state", "the request state was altered or is not ours") from None
    if claims.get("sub") != str(subject.pk):
        raise _refused("invalid_request_state", "the request state belongs to another agent")
    if claims["exp"] <= timezone.now().timestamp():
        raise _refused("request_state_expired", "the request state has expired; call the tool again")
    with transaction.atomic():
        invocation = Invocation.objects.select_for_update().filter(pk=claims["inv"], subject=subject).first()
        if invocation is None or invocation.digest != claims["digest"]:
            raise _refused("invalid_request_state", "the request state does not match this call")
        if Event.objects.filter(invocation=invocation, kind=REDEEMED, data__nonce=claims["nonce"]).exists():
            raise _refused("request_state_replayed", "this request state was already used")
        event_append(invocation=invocation, kind=REDEEMED, data={"nonce": claims["nonce"]}, actor=f"subject:{subject.pk}")
    return invocation


def _refused(code: str, message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message, data={"code": code})
