"""Decision links for chat and email: a signed, single-use, expiring URL per confirmation and approver.

The link only *opens* the console's decision page (after login); it never decides anything.
Its token is ``django.core.signing`` over ``{confirmation, user, nonce, expiry}`` (SECRET_KEY,
its own salt), so an altered token fails the signature; opening it is a POST from the
interstitial page that records the nonce (``DecisionLinkUse``, unique), so a second use finds
the nonce taken. A link for another user, past its expiry, or for a confirmation that is no
longer pending does nothing and says why. A link whose person may not decide the confirmation
(``approvers.may_approve``: rights withdrawn since, another tenant's approver, a deactivated
account) does nothing either, and its page shows nothing of the call — checked before any other
refusal that would show it.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from invocations_app.approvers import may_approve
from invocations_app.models import Confirmation, DecisionLinkUse

SALT = "toolops.decision-link.v1"


class LinkRefusal:
    """Why a link does nothing (shown to the person who opened it)."""

    ALTERED = "altered"
    FOREIGN = "foreign"
    NOT_APPROVER = "not_approver"
    EXPIRED = "expired"
    USED = "used"
    DECIDED = "decided"
    UNKNOWN = "unknown"


REFUSAL_TEXT = {
    LinkRefusal.ALTERED: "This link has been altered or is not a ToolOps decision link.",
    LinkRefusal.FOREIGN: "This link was issued to another person; it does nothing for you.",
    LinkRefusal.NOT_APPROVER: "This link does not open a confirmation you may decide; it does nothing for you.",
    LinkRefusal.EXPIRED: "This link has expired.",
    LinkRefusal.USED: "This link has already been used; open the confirmation queue instead.",
    LinkRefusal.DECIDED: "This confirmation is no longer waiting for a decision.",
    LinkRefusal.UNKNOWN: "The confirmation of this link does not exist.",
}


@dataclass(frozen=True)
class LinkCheck:
    confirmation: Confirmation | None
    refusal: str = ""  # a LinkRefusal value; "" when the link may be used
    nonce: str = ""

    @property
    def message(self) -> str:
        return REFUSAL_TEXT.get(self.refusal, "")


def decision_link_token(*, confirmation: Confirmation, user, expires_at: datetime | None = None) -> str:
    """A fresh single-use token for ``user`` to open ``confirmation`` (expiring with it by default)."""
    expires_at = expires_at or confirmation.expires_at
    return signing.dumps(
        {"c": str(confirmation.pk), "u": user.pk, "n": secrets.token_hex(16), "e": int(expires_at.timestamp())}, salt=SALT,
    )


def decision_link_url(*, confirmation: Confirmation, user, expires_at: datetime | None = None) -> str:
    """The absolute URL of a fresh decision link (``TOOLOPS_CONSOLE_URL`` + the link page)."""
    token = decision_link_token(confirmation=confirmation, user=user, expires_at=expires_at)
    return settings.TOOLOPS_CONSOLE_URL + reverse("confirmations:link", args=[token])


def decision_link_check(*, token: str, user, now: datetime | None = None) -> LinkCheck:
    """What opening ``token`` as ``user`` would do (reads only)."""
    try:
        claims = signing.loads(token, salt=SALT)
        confirmation_id, user_id, nonce, expiry = claims["c"], claims["u"], claims["n"], int(claims["e"])
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        return LinkCheck(None, LinkRefusal.ALTERED)
    confirmation = Confirmation.objects.select_related("tool_spec", "tenant").filter(pk=confirmation_id).first()
    now = now or timezone.now()
    if confirmation is None:
        refusal = LinkRefusal.UNKNOWN
    elif user_id != user.pk:
        refusal = LinkRefusal.FOREIGN
    elif not may_approve(user=user, tenant_id=confirmation.tenant_id, tool_spec_id=confirmation.tool_spec_id):
        refusal = LinkRefusal.NOT_APPROVER
    elif now.timestamp() >= expiry:
        refusal = LinkRefusal.EXPIRED
    elif DecisionLinkUse.objects.filter(nonce=nonce).exists():
        refusal = LinkRefusal.USED
    elif confirmation.state != Confirmation.Status.PENDING or confirmation.expires_at <= now:
        refusal = LinkRefusal.DECIDED
    else:
        refusal = ""
    return LinkCheck(confirmation, refusal, nonce)


def decision_link_use(*, token: str, user) -> LinkCheck:
    """Spend the link (once): returns the check; ``refusal`` is ``used`` for every later try."""
    check = decision_link_check(token=token, user=user)
    if check.refusal:
        return check
    try:
        with transaction.atomic():
            DecisionLinkUse.objects.create(nonce=check.nonce, confirmation=check.confirmation, user=user)
    except IntegrityError:  # two tabs at once: the other one spent it
        return LinkCheck(check.confirmation, LinkRefusal.USED, check.nonce)
    return check
