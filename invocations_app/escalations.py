"""Escalation (issue 14): a confirmation nobody decided within its policy's time goes to a group.

The beat task calls ``confirmations_escalate_due(now=...)``; each escalation is a conditional
``UPDATE … SET escalated_at = now WHERE`` still pending, not yet escalated, due and not expired,
so a confirmation escalates once however many sweeps overlap. ``confirmation_escalated`` is the
one place an escalation is announced — the ``confirmation_escalated`` event, a log line, mail to
the group's members when ``TOOLOPS_NOTIFY_BY_EMAIL`` is on — and the hook for other channels
(webhooks). Escalation changes nobody's rights (members still need ``approve_toolspec`` to
decide) and not the expiry: an escalated confirmation still expires and denies at its time.
"""
from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from invocations_app.models import Confirmation
from invocations_app.transitions import event_append
from invocations_app import signals

logger = logging.getLogger(__name__)


def escalation_recipients(*, group_name: str) -> list:
    """The active members of the escalation group (empty when the group does not exist)."""
    group = Group.objects.filter(name=group_name).first()
    return list(group.user_set.filter(is_active=True).order_by("username")) if group else []


def confirmation_escalated(*, confirmation: Confirmation, now: datetime) -> None:
    """Announce one escalation (inside the escalating transaction): event, log, mail after commit."""
    members = escalation_recipients(group_name=confirmation.escalation_group)
    waited = int((now - confirmation.created_at).total_seconds())
    event_append(invocation=confirmation.invocation, kind="confirmation_escalated", data={
        "confirmation_id": str(confirmation.pk), "group": confirmation.escalation_group,
        "notified": [m.get_username() for m in members], "waited_seconds": waited,
        "expires_at": confirmation.expires_at.isoformat(),
    })
    signals.confirmation_escalated.send(sender=Confirmation, confirmation=confirmation)
    logger.warning("confirmation %s of %s escalated to group %r after %ss (%d member(s))", confirmation.pk,
                   confirmation.tool_spec.ref, confirmation.escalation_group, waited, len(members))
    addresses = [m.email for m in members if m.email]
    if addresses and settings.TOOLOPS_NOTIFY_BY_EMAIL:
        subject = f"[ToolOps] {confirmation.tool_spec.ref} is waiting for approval ({waited // 60} min)"
        body = (f"A call of {confirmation.tool_spec.ref} in tenant {confirmation.tenant.slug} has waited {waited} s "
                f"for approval and was escalated to {confirmation.escalation_group}.\n"
                f"Decide it before {confirmation.expires_at:%Y-%m-%d %H:%M} UTC: /console/confirmations/{confirmation.pk}/\n")
        transaction.on_commit(lambda: send_mail(subject, body, None, addresses, fail_silently=True))


def confirmation_escalate(*, confirmation: Confirmation, now: datetime) -> bool:
    """Escalate one due confirmation; False when it was decided, expired or escalated meanwhile."""
    with transaction.atomic():
        changed = Confirmation.objects.filter(
            pk=confirmation.pk, state=Confirmation.Status.PENDING, escalated_at__isnull=True,
            escalate_at__lte=now, expires_at__gt=now,
        ).update(escalated_at=now)
        if changed != 1:
            return False
        confirmation.escalated_at = now
        confirmation_escalated(confirmation=confirmation, now=now)
    return True


def confirmations_escalate_due(*, now: datetime | None = None, batch: int = 500) -> int:
    """Escalate every pending confirmation past its escalation time (the beat task)."""
    now = now or timezone.now()
    # Partial index invocations_conf_escalate: pending, not escalated, with an escalation time.
    due = (Confirmation.objects.filter(state=Confirmation.Status.PENDING, escalated_at__isnull=True, escalate_at__lte=now,
                                       expires_at__gt=now)
           .select_related("invocation", "tool_spec", "tenant").order_by("escalate_at"))
    return sum(confirmation_escalate(confirmation=c, now=now) for c in due[:batch])
