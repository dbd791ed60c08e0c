"""Outgoing webhooks, the sending half: claim a due delivery, sign, send (egress-checked), log.

Safe to run twice for one delivery: the claim is a conditional UPDATE (pending and due, or
sending with a lapsed lease) that one worker wins; the loser exits. Every try is a
``WebhookAttempt`` row (status, error, duration), visible in the admin. A failure — no answer,
or any status outside 2xx — schedules the next try ``webhook_retry_delay`` later
(``next_attempt_at`` in the database; short waits go to the broker as a countdown, longer
ones to the beat task ``webhooks.deliver_due``), until ``TOOLOPS_WEBHOOK_MAX_ATTEMPTS`` tries
have failed and the delivery is ``failed``. Egress is checked against the webhook receivers' own
allow-list (``TOOLOPS_WEBHOOK_EGRESS_ALLOW``), not the tools'; a refusal sent nothing and would
be refused again, so the delivery fails at once with the reason (no retries; a resend from the
admin once the address is opened sends it). A try whose endpoint has been deactivated since
sends nothing: the delivery ends ``failed`` with that reason (the operator turned it off; a
resend from the admin after reactivating it sends it). No I/O inside a transaction.
"""
from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from worker.egress_net import webhook_openers
from toolops import metrics
from toolops.decisions.egress import ADDRESS_DENIED, EgressRefused
from toolops.decisions.webhooks import SIGNATURE_HEADER, webhook_retry_delay, webhook_signature

from worker.executors import http_client
from invocations_app.dispatch import enqueue_webhook_delivery, webhook_delivery_send
from invocations_app.models import WebhookAttempt, WebhookDelivery

logger = logging.getLogger(__name__)

RESPONSE_EXCERPT_BYTES = 500
MAX_RESPONSE_BYTES = 16 * 1024
ENDPOINT_INACTIVE = "endpoint deactivated: not sent"
EGRESS_REFUSED = "egress refused, not sent and not retried"


@dataclass(frozen=True)
class Sent:
    """What one try got: the receiver's status (None without an answer), the error, an excerpt of
    the answer, how long it took, and whether egress refused it (nothing sent; permanent)."""

    status_code: int | None
    error: str
    excerpt: str
    duration_ms: int
    refused: bool = False


def _claim(delivery_id, now) -> WebhookDelivery | None:
    """Win this try of the delivery, or None (delivered, given up, not due, or another worker has it)."""
    lease = now + timedelta(seconds=settings.TOOLOPS_WEBHOOK_TIMEOUT_SECONDS + 30)
    claimable = Q(state=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        state=WebhookDelivery.Status.SENDING, lease_expires_at__lte=now)
    changed = WebhookDelivery.objects.filter(claimable, pk=delivery_id).update(
        state=WebhookDelivery.Status.SENDING, attempts=F("attempts") + 1, lease_expires_at=lease,
    )
    if changed != 1:
        return None
    return WebhookDelivery.objects.select_related("endpoint").get(pk=delivery_id)


def webhook_delivery_attempt(*, delivery_id) -> str:
    """One try of one delivery: ``delivered``, ``retry``, ``failed`` or ``skipped`` (not ours to send)."""
    started = timezone.now()
    delivery = _claim(delivery_id, started)
    if delivery is None:
        return "skipped"
    if not delivery.endpoint.is_active:
        WebhookDelivery.objects.filter(pk=delivery.pk, state=WebhookDelivery.Status.SENDING).update(
            state=WebhookDelivery.Status.FAILED, next_attempt_at=None, lease_expires_at=None,
            attempts=F("attempts") - 1, last_status_code=None, last_error=ENDPOINT_INACTIVE)  # nothing was tried
        logger.info("webhook %s %s → %s: not sent, %s", delivery.event_type, delivery.pk, delivery.endpoint.url,
                    ENDPOINT_INACTIVE)
        metrics.webhook_delivery(status="failed")
        return "failed"
    sent = _send(delivery)
    status_code, error = sent.status_code, sent.error
    ok = status_code is not None and 200 <= status_code < 300
    next_at = None
    if ok:
        outcome = WebhookDelivery.Status.DELIVERED
    elif sent.refused or delivery.attempts >= settings.TOOLOPS_WEBHOOK_MAX_ATTEMPTS:
        outcome = WebhookDelivery.Status.FAILED
    else:
        outcome = WebhookDelivery.Status.PENDING
        delay = webhook_retry_delay(delivery.attempts, base_seconds=settings.TOOLOPS_WEBHOOK_BACKOFF_SECONDS)
        next_at = timezone.now() + timedelta(seconds=delay)
    WebhookAttempt.objects.create(
        delivery=delivery, number=delivery.attempts, started_at=started, duration_ms=sent.duration_ms,
        status_code=status_code, error=error[:500], response_excerpt=sent.excerpt, next_attempt_at=next_at,
    )
    WebhookDelivery.objects.filter(pk=delivery.pk, state=WebhookDelivery.Status.SENDING).update(
        state=outcome, next_attempt_at=next_at, lease_expires_at=None, last_status_code=status_code,
        last_error=error[:500], delivered_at=timezone.now() if ok else None,
    )
    if next_at is not None:
        enqueue_webhook_delivery(delivery.pk, countdown=(next_at - timezone.now()).total_seconds())
    logger.info("webhook %s %s → %s: attempt %s %s", delivery.event_type, delivery.pk, delivery.endpoint.url,
                delivery.attempts, outcome)
    result = "delivered" if ok else ("retry" if next_at else "failed")
    metrics.webhook_delivery(status=result)
    return result


def webhook_request_body(delivery: WebhookDelivery) -> bytes:
    """The exact bytes signed and sent (compact JSON, keys sorted)."""
    return json.dumps(delivery.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _send(delivery: WebhookDelivery) -> Sent:
    """POST the signed body, egress-checked against the webhook receivers' allow-list."""
    body = webhook_request_body(delivery)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json", "User-Agent": "ToolOps-Webhooks/1",
        SIGNATURE_HEADER: webhook_signature(delivery.endpoint.secret, timestamp, body),
        "ToolOps-Event": delivery.event_type, "ToolOps-Delivery": str(delivery.pk),
    }
    policy = http_client.EgressPolicy(
        deadline=time.monotonic() + settings.TOOLOPS_WEBHOOK_TIMEOUT_SECONDS, max_response_bytes=MAX_RESPONSE_BYTES,
        openers=webhook_openers(),  # TOOLOPS_WEBHOOK_EGRESS_ALLOW: the operator opens a private receiver
    )
    began = time.monotonic()

    def took() -> int:
        return int((time.monotonic() - began) * 1000)

    try:
        response = http_client.send(http_client.HttpRequest("POST", delivery.endpoint.url, headers, body), policy)
    except EgressRefused as exc:
        hint = " (a private receiver is opened with TOOLOPS_WEBHOOK_EGRESS_ALLOW)" if exc.code == ADDRESS_DENIED else ""
        return Sent(None, f"{EGRESS_REFUSED}: {exc.message}{hint}", "", took(), refused=True)
    except http_client.TransportFailure as exc:
        return Sent(None, f"{type(exc).__name__}: {exc}", "", took())
    excerpt = response.body[:RESPONSE_EXCERPT_BYTES].decode("utf-8", errors="replace")
    error = "" if 200 <= response.status < 300 else f"HTTP {response.status} {response.reason}"
    return Sent(response.status, error, excerpt, took())


def webhook_deliveries_due(*, batch: int = 200) -> int:
    """Send every delivery that is due (a retry past the broker's countdown) or abandoned mid-send."""
    now = timezone.now()
    due = WebhookDelivery.objects.filter(
        Q(state=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now - timedelta(seconds=2))
        | Q(state=WebhookDelivery.Status.SENDING, lease_expires_at__lte=now)
    ).values_list("pk", flat=True)[:batch]
    ids = list(due)
    for pk in ids:
        webhook_delivery_send(pk)
    return len(ids)


def webhook_deliveries_resend(*, deliveries) -> tuple[int, int]:
    """Queue failed or waiting deliveries again now (an admin action): ``(queued, left alone
    because their endpoint is deactivated)``. Delivered ones stay delivered, and one a worker is
    sending right now is not touched (the state is checked again in the UPDATE)."""
    resendable = [WebhookDelivery.Status.FAILED, WebhookDelivery.Status.PENDING]
    chosen = list(deliveries.filter(state__in=resendable).values_list("pk", "endpoint__is_active"))
    ids = [pk for pk, active in chosen if active]
    inactive = len(chosen) - len(ids)
    WebhookDelivery.objects.filter(pk__in=ids, state__in=resendable).update(
        state=WebhookDelivery.Status.PENDING, next_attempt_at=timezone.now())
    for pk in ids:
        webhook_delivery_send(pk)
    return len(ids), inactive


def webhook_secret_new() -> str:
    return "whsec_" + secrets.token_urlsafe(32)
