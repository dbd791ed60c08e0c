"""Webhooks end to end: a real worker signs and sends, the demo receiver (its own process) verifies.

The receiver checks ``ToolOps-Signature`` with its own code written from the documented format;
a failing receiver is retried with exponential backoff; every attempt is logged.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import requests
from django.urls import reverse
from rest_framework.test import APIClient

from invocations_app.models import Confirmation, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from specs_app.models import ToolSpec
from tests.builders import Agent, allow_approving, make_approver, make_staff, make_tenant
from tests.conftest import REPO_ROOT
from tests.servers import free_port

from webhooks.delivery import EGRESS_REFUSED

from tests.integration.conftest import wait_for
from tests.integration.test_execution import CALENDAR_ARGS, _propose, _settled

SECRET = "whsec_integration"
ALL = ["confirmation.requested", "confirmation.decided", "confirmation.expired", "invocation.settled"]


class Receiver:
    def __init__(self, port: int):
        self.port, self.base, self.address = port, f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"

    def received(self) -> list[dict]:
        return requests.get(f"{self.base}/webhooks/received", timeout=5).json()["received"]

    def fail_next(self, count: int, status: int = 503) -> None:
        requests.post(f"{self.base}/_control/fail", json={"count": count, "status": status}, timeout=5).raise_for_status()

    def reset(self) -> None:
        requests.post(f"{self.base}/_control/reset", timeout=5).raise_for_status()


@pytest.fixture(scope="module")
def receiver_process():
    """``python -m demo_services.webhook_receiver`` as its own process, as an operator would run it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "demo_services.webhook_receiver", "--port", str(port), "--secret", SECRET],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert "webhook receiver on" in proc.stdout.readline()
    yield Receiver(port)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def receiver(receiver_process, settings):
    """The receiver, reset, reachable by the worker (the webhook egress allow-list names it)."""
    receiver_process.reset()
    settings.TOOLOPS_WEBHOOK_EGRESS_ALLOW = [receiver_process.address]
    settings.TOOLOPS_WEBHOOK_BACKOFF_SECONDS = 1
    settings.TOOLOPS_WEBHOOK_MAX_ATTEMPTS = 4
    return receiver_process


def _endpoint(agent, receiver, *, events=ALL, secret=SECRET) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(tenant=agent.subject.tenant, url=f"{receiver.base}/webhooks", secret=secret, events=events)


@pytest.mark.django_db(transaction=True)
def test_it_delivers_signed_events_a_chat_bot_acts_on(receiver, demo_agent, worker):
    """requested (with a decision link) → the bot approves through the Approvals API → decided → settled."""
    _endpoint(demo_agent, receiver)
    inv = _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    spec = Confirmation.objects.get(invocation_id=inv["id"]).tool_spec
    _, secret = make_approver(username="ann", spec=spec)
    requested = wait_for(lambda: [r for r in receiver.received() if r["event"] == "confirmation.requested"], timeout=30)[0]
    assert requested["verified"] is True
    confirmation = requested["payload"]["data"]["confirmation"]
    bot = Agent(APIClient(), secret)
    resp = bot.post(f"/api/v1/confirmations/{confirmation['id']}/approve", {"digest": confirmation["digest"]})
    assert resp.status_code == 200, resp.content
    assert _settled(demo_agent, inv["id"])["state"] == "OBSERVED"
    got = wait_for(lambda: (lambda r: r if {e["event"] for e in r} >= set(ALL) - {"confirmation.expired"} else None)(receiver.received()),
                   timeout=30)
    assert all(e["verified"] for e in got), got
    decided = next(e for e in got if e["event"] == "confirmation.decided")["payload"]["data"]["confirmation"]
    assert decided["state"] == "approved" and decided["decided_by"] == "ann"
    settled = next(e for e in got if e["event"] == "invocation.settled")["payload"]["data"]["invocation"]
    assert settled == {**settled, "id": inv["id"], "state": "OBSERVED", "commit_status": "committed"}
    # Every delivery is logged with its one successful attempt (recorded just after the receiver answered).
    wait_for(lambda: set(WebhookDelivery.objects.values_list("state", flat=True)) == {"delivered"}, timeout=10)
    assert set(WebhookAttempt.objects.values_list("status_code", flat=True)) == {204}


@pytest.mark.django_db(transaction=True)
def test_a_request_names_only_the_people_who_may_decide_it(receiver, demo_agent, worker):
    """The approvers a receiver is told of (with e-mail and a decision link) are those the console
    lets decide the call: not an approver of the same tool in another tenant, not someone who
    cannot log in (deactivated, or not staff)."""
    from django.contrib.auth.models import User

    spec, tenant = ToolSpec.objects.get(name="calendar.create_event", version=1), demo_agent.subject.tenant
    allow_approving(user=make_staff(username="dana"), spec=spec, tenant=tenant)
    allow_approving(user=make_staff(username="acme-approver"), spec=spec, tenant=make_tenant(slug="acme"))
    gone = make_staff(username="left-in-june")
    allow_approving(user=gone, spec=spec, tenant=tenant)
    User.objects.filter(pk=gone.pk).update(is_active=False)
    allow_approving(user=User.objects.create_user("no-console", "no-console@example.invalid", "x"), spec=spec, tenant=tenant)
    _endpoint(demo_agent, receiver, events=["confirmation.requested"])
    _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    requested = wait_for(lambda: [r for r in receiver.received() if r["event"] == "confirmation.requested"], timeout=30)[0]
    approvers = requested["payload"]["data"]["approvers"]
    assert [(a["username"], a["email"]) for a in approvers] == [("dana", "dana@example.invalid")], approvers


@pytest.fixture
def receiver_opened_for_tools_only(receiver, settings):
    """The receiver's address in the tools' allow-list, not in the webhook receivers' (set before the worker starts)."""
    settings.TOOLOPS_WEBHOOK_EGRESS_ALLOW = []
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, receiver.address]
    return receiver


@pytest.fixture
def receiver_not_opened(receiver, settings):
    settings.TOOLOPS_WEBHOOK_EGRESS_ALLOW = []
    return receiver


def _failed_delivery(demo_agent, receiver) -> WebhookDelivery:
    """Propose a call the receiver would hear of; its delivery, once it has ended ``failed``."""
    _endpoint(demo_agent, receiver, events=["confirmation.requested"])
    _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    return wait_for(lambda: WebhookDelivery.objects.filter(state="failed").first(), timeout=30)


@pytest.mark.django_db(transaction=True)
def test_an_address_opened_for_tools_is_not_open_to_webhooks(receiver_opened_for_tools_only, demo_agent, worker,
                                                             admin_client):
    """Nothing is sent to it, and the delivery fails with the reason, shown on its admin page."""
    receiver = receiver_opened_for_tools_only
    delivery = _failed_delivery(demo_agent, receiver)
    assert delivery.last_error.startswith(EGRESS_REFUSED) and "TOOLOPS_WEBHOOK_EGRESS_ALLOW" in delivery.last_error
    assert receiver.received() == []
    page = admin_client.get(reverse("admin:invocations_app_webhookdelivery_change", args=[delivery.pk])).content.decode()
    assert "gave up" in page and "loopback address" in page and EGRESS_REFUSED in page


@pytest.mark.django_db(transaction=True)
def test_an_egress_refusal_fails_the_delivery_at_once_without_retries(receiver_not_opened, demo_agent, worker):
    """Refused once, refused every time: one attempt, no backoff (four tries are allowed here)."""
    delivery = _failed_delivery(demo_agent, receiver_not_opened)
    assert (delivery.attempts, delivery.next_attempt_at) == (1, None), delivery.last_error
    assert [a.error.startswith(EGRESS_REFUSED) for a in WebhookAttempt.objects.filter(delivery=delivery)] == [True]


@pytest.mark.django_db(transaction=True)
def test_it_retries_a_failing_receiver_with_backoff_and_logs_every_attempt(receiver, demo_agent, worker):
    receiver.fail_next(2, status=503)
    _endpoint(demo_agent, receiver, events=["confirmation.requested"])
    _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    delivery = wait_for(lambda: WebhookDelivery.objects.filter(state="delivered").first(), timeout=40)
    attempts = list(WebhookAttempt.objects.filter(delivery=delivery).order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [(1, 503), (2, 503), (3, 204)]
    assert attempts[0].error == "HTTP 503 Service Unavailable"
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in zip(attempts, attempts[1:])]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0, gaps  # base 1 s, doubling
    assert [r["answered"] for r in receiver.received()] == [503, 503, 204]
    assert len({r["delivery"] for r in receiver.received()}) == 1  # the same delivery, tried again


@pytest.mark.django_db(transaction=True)
def test_it_gives_up_after_the_last_attempt_when_the_receiver_rejects_the_signature(receiver, demo_agent, worker):
    _endpoint(demo_agent, receiver, events=["confirmation.requested"], secret="not-the-receivers-secret")
    _propose(demo_agent, "calendar.create_event@1", CALENDAR_ARGS)
    delivery = wait_for(lambda: WebhookDelivery.objects.filter(state="failed").first(), timeout=60)
    assert delivery.attempts == 4 and delivery.last_status_code == 401
    assert WebhookAttempt.objects.filter(delivery=delivery).count() == 4
    got = receiver.received()
    assert len(got) == 4 and not any(r["verified"] for r in got) and got[0]["why"] == "bad signature"


@pytest.mark.django_db(transaction=True)
def test_a_retry_already_queued_for_an_endpoint_deactivated_since_is_not_sent(receiver, demo_agent):
    """Deactivating an endpoint stops what is already waiting for it too: its next try sends
    nothing and ends the delivery ``failed`` with the reason (not a receiver's answer)."""
    from datetime import timedelta

    from django.utils import timezone

    from webhooks.delivery import ENDPOINT_INACTIVE, webhook_delivery_attempt

    endpoint = _endpoint(demo_agent, receiver, events=["invocation.settled"])
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, event_type="invocation.settled", payload={"n": 1},
                                              next_attempt_at=timezone.now() - timedelta(seconds=1))
    receiver.fail_next(1, status=503)
    assert webhook_delivery_attempt(delivery_id=delivery.pk) == "retry"
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(is_active=False)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))  # due
    assert webhook_delivery_attempt(delivery_id=delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("failed", 1, ENDPOINT_INACTIVE)
    assert [r["answered"] for r in receiver.received()] == [503]  # the first try only
    assert WebhookAttempt.objects.filter(delivery=delivery).count() == 1

    from webhooks.delivery import webhook_deliveries_resend

    chosen = WebhookDelivery.objects.filter(pk=delivery.pk)
    assert webhook_deliveries_resend(deliveries=chosen) == (0, 1)  # still deactivated: left alone
    assert WebhookDelivery.objects.get(pk=delivery.pk).state == "failed"
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(is_active=True)
    assert webhook_deliveries_resend(deliveries=chosen) == (1, 0)
    assert webhook_delivery_attempt(delivery_id=delivery.pk) in ("delivered", "skipped")  # unless a worker was first
    wait_for(lambda: WebhookDelivery.objects.get(pk=delivery.pk).state == "delivered", timeout=10)
    assert [r["answered"] for r in receiver.received()] == [503, 204]
