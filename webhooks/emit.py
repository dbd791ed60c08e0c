"""Outgoing webhooks, the emitting half: which tenants want an event, and the outbox rows.

``webhook_emit(tenant, event_type, payload)`` writes one ``WebhookDelivery`` per subscribed
endpoint inside the caller's transaction (so a rolled-back decision tells nobody) and hands
each to the workers after commit (``dispatch.enqueue_webhook_delivery``); the sending half is
``delivery.py``. The domain services send ``invocations_app.signals`` where the thing happens
(confirmation opened, decided, escalated or expired, an invocation reaching a terminal state);
``webhooks/apps.py`` connects each signal to its named emitter below.

Cost when nobody listens: which events a tenant listens for is cached per process for
``SUBSCRIPTION_TTL_SECONDS``, so a terminal transition of a tenant without endpoints costs no
query; a new or changed endpoint is therefore heard by other processes within that time. Whom to
deliver to is read afresh at each emit, so a deleted or deactivated endpoint gets no new delivery.
"""
from __future__ import annotations

import time
import uuid

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from invocations_app.approvers import confirmation_approvers
from invocations_app.confirmation_summaries import confirmation_summary, invocation_summary
from invocations_app.decision_links import decision_link_url
from invocations_app.dispatch import enqueue_webhook_delivery
from invocations_app.models import WEBHOOK_EVENT_TYPES, Confirmation, Invocation, WebhookDelivery, WebhookEndpoint

SUBSCRIPTION_TTL_SECONDS = 5.0
_subscriptions: dict[int, tuple[float, frozenset[str]]] = {}  # tenant → (expiry, events it listens for)


def _forget_subscriptions(sender, instance, **kwargs) -> None:
    _subscriptions.pop(instance.tenant_id, None)


post_save.connect(_forget_subscriptions, sender=WebhookEndpoint, dispatch_uid="webhooks-forget-on-save")
post_delete.connect(_forget_subscriptions, sender=WebhookEndpoint, dispatch_uid="webhooks-forget-on-delete")


def webhook_endpoints_for(tenant_id: int, event_type: str) -> list[int]:
    """Ids of the tenant's active endpoints subscribed to ``event_type``.

    Most tenants have none: that answer is cached briefly (a new endpoint starts receiving
    within ``SUBSCRIPTION_TTL_SECONDS``), so a settled call costs no query. A tenant with
    subscribers is read afresh each time: an endpoint deleted or deactivated by another process
    (whose signals never reach this cache) gets no delivery — a row pointing at a deleted
    endpoint would fail the caller's whole transaction at commit. (Only a delete committed
    between this read and that commit still can.)"""
    if not webhook_wanted(tenant_id, event_type):
        return []
    return _subscribed(tenant_id).get(event_type, [])


def webhook_wanted(tenant_id: int, event_type: str) -> bool:
    """Whether the tenant listened for ``event_type`` moments ago (cached): the cheap gate
    before building a payload; ``webhook_emit`` then asks afresh whom to deliver to."""
    cached = _subscriptions.get(tenant_id)
    if cached is None or cached[0] < time.monotonic():
        cached = (time.monotonic() + SUBSCRIPTION_TTL_SECONDS, frozenset(_subscribed(tenant_id)))
        _subscriptions[tenant_id] = cached
    return event_type in cached[1]


def _subscribed(tenant_id: int) -> dict[str, list[int]]:
    table: dict[str, list[int]] = {}
    for pk, events in WebhookEndpoint.objects.filter(tenant_id=tenant_id, is_active=True).values_list("pk", "events"):
        for name in events or ():
            table.setdefault(name, []).append(pk)
    return table


def webhook_emit(tenant, event_type: str, payload: dict) -> list[WebhookDelivery]:
    """Queue ``event_type`` with ``payload`` for every endpoint of ``tenant`` (a Tenant or its id)
    that subscribed to it; delivered by the workers after the caller's transaction commits."""
    if event_type not in WEBHOOK_EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    tenant_id = getattr(tenant, "pk", tenant)
    endpoint_ids = webhook_endpoints_for(tenant_id, event_type)
    if not endpoint_ids:
        return []
    event_id, now = uuid.uuid4(), timezone.now()
    deliveries = [
        WebhookDelivery(endpoint_id=pk, event_id=event_id, event_type=event_type, next_attempt_at=now, payload={
            "id": str(event_id), "type": event_type, "created_at": now.isoformat(), "data": payload,
        })
        for pk in endpoint_ids
    ]
    with transaction.atomic(savepoint=False):
        WebhookDelivery.objects.bulk_create(deliveries)
        for delivery in deliveries:
            enqueue_webhook_delivery(delivery.pk)
    return deliveries


def confirmation_event_payload(confirmation: Confirmation, *, with_links: bool = False) -> dict:
    """``{"confirmation": …}``, plus one fresh decision link per approver when asked: only
    people who may decide it (``approvers.confirmation_approvers``), never another tenant's."""
    payload = {"confirmation": confirmation_summary(confirmation)}
    if with_links:
        payload["approvers"] = [
            {"username": user.get_username(), "email": user.email,
             "decision_url": decision_link_url(confirmation=confirmation, user=user)}
            for user in confirmation_approvers(confirmation)
        ]
    return payload


def webhook_confirmation_event(confirmation: Confirmation, event_type: str, *, with_links: bool = False) -> None:
    """Queue a ``confirmation.*`` event if the confirmation's tenant listens for it (the payload is built only then)."""
    if webhook_wanted(confirmation.tenant_id, event_type):
        webhook_emit(confirmation.tenant_id, event_type, confirmation_event_payload(confirmation, with_links=with_links))


def webhook_confirmation_requested(confirmation: Confirmation) -> None:
    webhook_confirmation_event(confirmation, "confirmation.requested", with_links=True)


def webhook_confirmation_decided(confirmation: Confirmation) -> None:
    webhook_confirmation_event(confirmation, "confirmation.decided")


def webhook_confirmation_escalated(confirmation: Confirmation) -> None:
    """For the approval policies' ``confirmation_escalated``: the escalation group gets fresh links too."""
    webhook_confirmation_event(confirmation, "confirmation.escalated", with_links=True)


def webhook_confirmation_expired(confirmation: Confirmation) -> None:
    webhook_confirmation_event(confirmation, "confirmation.expired")


def webhook_invocation_settled(invocation: Invocation) -> None:
    if webhook_wanted(invocation.tenant_id, "invocation.settled"):
        webhook_emit(invocation.tenant_id, "invocation.settled", {"invocation": invocation_summary(invocation)})
