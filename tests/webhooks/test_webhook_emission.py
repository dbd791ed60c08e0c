"""Webhook events are queued by the services where things happen, in their transaction, only for subscribers."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction

from invocations_app.confirmations import confirmation_approve, confirmation_deny, confirmations_expire_due
from invocations_app.models import WebhookDelivery, WebhookEndpoint
from webhooks.emit import webhook_confirmation_escalated, webhook_emit, webhook_wanted
from tests.approvals.conftest import propose_calendar
from tests.builders import make_approver

pytestmark = pytest.mark.django_db

ALL = ["confirmation.requested", "confirmation.decided", "confirmation.escalated", "confirmation.expired", "invocation.settled"]


def _endpoint(tenant, events=ALL) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(tenant=tenant, url="https://hooks.example.invalid/toolops", secret="s", events=events)


def _types() -> list[str]:
    return list(WebhookDelivery.objects.order_by("created_at", "event_type").values_list("event_type", flat=True))


def test_it_announces_a_request_with_a_decision_link_per_approver(agent, calendar):
    _endpoint(agent.subject.tenant)
    make_approver(username="ann", spec=calendar)
    pending = propose_calendar(agent, calendar)
    delivery = WebhookDelivery.objects.get(event_type="confirmation.requested")
    data = delivery.payload["data"]
    assert delivery.payload["type"] == "confirmation.requested" and delivery.payload["id"] == str(delivery.event_id)
    assert data["confirmation"]["id"] == str(pending.pk) and data["confirmation"]["digest"] == pending.digest
    assert [a["username"] for a in data["approvers"]] == ["ann"]
    assert "/console/confirmations/link/" in data["approvers"][0]["decision_url"]


def test_it_announces_a_denial_and_the_settled_call(agent, calendar):
    _endpoint(agent.subject.tenant)
    pending = propose_calendar(agent, calendar)
    ann, _ = make_approver(username="ann", spec=calendar)
    confirmation_deny(confirmation=pending, user=ann, reason="wrong day")
    assert _types() == ["confirmation.requested", "confirmation.decided", "invocation.settled"]
    decided = WebhookDelivery.objects.get(event_type="confirmation.decided").payload["data"]["confirmation"]
    assert decided["state"] == "denied" and decided["decided_by"] == "ann" and decided["reason"] == "wrong day"
    settled = WebhookDelivery.objects.get(event_type="invocation.settled").payload["data"]["invocation"]
    assert settled["state"] == "AUTHORIZATION_REJECTED" and settled["error_code"] == "confirmation_denied"


def test_it_announces_an_approval(agent, calendar):
    _endpoint(agent.subject.tenant, events=["confirmation.decided"])
    pending = propose_calendar(agent, calendar)
    ann, _ = make_approver(username="ann", spec=calendar)
    confirmation_approve(confirmation=pending, user=ann, digest_seen=pending.digest)
    assert _types() == ["confirmation.decided"]  # only what the endpoint subscribed to


def test_it_announces_an_expiry(agent, calendar):
    _endpoint(agent.subject.tenant, events=["confirmation.expired", "invocation.settled"])
    pending = propose_calendar(agent, calendar)
    assert confirmations_expire_due(now=pending.expires_at + timedelta(seconds=1)) == 1
    assert _types() == ["confirmation.expired", "invocation.settled"]
    assert WebhookDelivery.objects.get(event_type="confirmation.expired").payload["data"]["confirmation"]["state"] == "expired"


def test_it_queues_nothing_for_a_tenant_without_endpoints_or_an_inactive_one(agent, calendar):
    endpoint = _endpoint(agent.subject.tenant)
    endpoint.is_active = False
    endpoint.save()
    propose_calendar(agent, calendar)
    assert not WebhookDelivery.objects.exists()


def test_it_offers_the_escalation_hook_with_fresh_decision_links(agent, calendar):
    _endpoint(agent.subject.tenant, events=["confirmation.escalated"])
    pending = propose_calendar(agent, calendar)
    make_approver(username="ann", spec=calendar)
    webhook_confirmation_escalated(pending)
    data = WebhookDelivery.objects.get(event_type="confirmation.escalated").payload["data"]
    assert data["confirmation"]["id"] == str(pending.pk) and [a["username"] for a in data["approvers"]] == ["ann"]


def test_it_queues_nothing_when_the_transaction_rolls_back(agent):
    _endpoint(agent.subject.tenant)
    with pytest.raises(RuntimeError), transaction.atomic():
        webhook_emit(agent.subject.tenant, "confirmation.escalated", {"confirmation": {"id": "x"}})
        assert WebhookDelivery.objects.count() == 1
        raise RuntimeError("the escalation's transaction fails")
    assert not WebhookDelivery.objects.exists()


def test_it_refuses_an_unknown_event_type(agent):
    with pytest.raises(ValueError):
        webhook_emit(agent.subject.tenant, "confirmation.maybe", {})


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_another_process_deleted_or_deactivated_gets_nothing_from_a_stale_cache(agent):
    """The subscription cache is per process: a delete or deactivation elsewhere sends no signal
    here. Queuing for a deleted endpoint would fail the emitting transaction (a settled call, a
    decision) at commit; for a deactivated one it would deliver what its owner switched off."""
    tenant = agent.subject.tenant
    gone, off = _endpoint(tenant), _endpoint(tenant)
    assert webhook_wanted(tenant.pk, "invocation.settled")  # cached with both endpoints
    with connection.cursor() as cur:  # as another process would: no signal reaches this cache
        cur.execute(f"DELETE FROM {WebhookEndpoint._meta.db_table} WHERE id = %s", [gone.pk])
        cur.execute(f"UPDATE {WebhookEndpoint._meta.db_table} SET is_active = %s WHERE id = %s", [False, off.pk])
    with transaction.atomic():
        assert webhook_emit(tenant, "invocation.settled", {"invocation": {}}) == []
    assert not WebhookDelivery.objects.exists()

    on = _endpoint(tenant)  # saved here: the cache is told at once
    with transaction.atomic():
        assert [d.endpoint_id for d in webhook_emit(tenant, "invocation.settled", {"invocation": {}})] == [on.pk]
