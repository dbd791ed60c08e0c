"""What an operator watches (docs/how-to/operate.md): the gauges a ``/metrics`` scrape reads from
the database, and the decisions counted from the domain's signals.

The gauges are counts of rows (pending confirmations, unknown outcomes, work waiting for a
worker or a webhook sender), read when scraped — a few indexed aggregate queries — so no process
has to keep them in step. Labels are tenant slugs and fixed names only.
"""
from __future__ import annotations

from django.db import transaction
from django.db.models import Count, Exists, Min, OuterRef, Q
from django.utils import timezone

from invocations_app import signals
from invocations_app.models import Confirmation, Invocation, WebhookDelivery
from toolops import metrics
from toolops.runtime.states import State


def _by_tenant(rows, now) -> tuple[list, list]:
    counts, ages = [], []
    for row in rows:
        counts.append(([row["tenant__slug"]], row["n"]))
        ages.append(([row["tenant__slug"]], max(0.0, (now - row["oldest"]).total_seconds())))
    return counts, ages


def operational_gauges() -> dict:
    """``{metric name: (help, label names, [(label values, value), …])}`` for ``toolops.metrics``."""
    now = timezone.now()
    pending, pending_age = _by_tenant(
        Confirmation.objects.filter(state=Confirmation.Status.PENDING).values("tenant__slug")
        .annotate(n=Count("id"), oldest=Min("created_at")).order_by(), now)
    unknown, unknown_age = _by_tenant(
        Invocation.objects.filter(state=State.OUTCOME_UNKNOWN).values("tenant__slug")
        .annotate(n=Count("id"), oldest=Min("updated_at")).order_by(), now)
    # Work the queue owes: released calls no worker has claimed yet — writes PREPARED, reads
    # AUTHORIZED with no confirmation still pending (worker.claim._claimable_src) — and retries past due.
    waiting_for_person = Confirmation.objects.filter(invocation=OuterRef("pk"), state=Confirmation.Status.PENDING)
    ready = Invocation.objects.filter(
        Q(state=State.PREPARED) | Q(state=State.EXECUTING, next_attempt_at__lte=now)
        | (Q(state=State.AUTHORIZED, tool_spec__side_effect_class="read_only") & ~Exists(waiting_for_person))
    ).count()
    webhooks = WebhookDelivery.objects.filter(state=WebhookDelivery.Status.PENDING).count()
    return {
        "toolops_confirmations_pending": ("Confirmations waiting for a person", ["tenant"], pending),
        "toolops_confirmation_oldest_pending_seconds": ("Age of the oldest pending confirmation", ["tenant"], pending_age),
        "toolops_outcomes_unknown_open": ("Calls in OUTCOME_UNKNOWN, not yet settled", ["tenant"], unknown),
        "toolops_outcome_unknown_oldest_seconds": ("Age of the oldest open unknown outcome", ["tenant"], unknown_age),
        "toolops_outbox_backlog": ("Work waiting to be picked up, by queue", ["queue"],
                                   [(["invocations"], ready), (["webhooks"], webhooks)]),
    }


def _count_decision(sender, confirmation: Confirmation, **kwargs) -> None:
    """Counted once the decision commits (a rolled-back decision did not happen)."""
    if not metrics.ENABLED:
        return
    facts = {"tool": confirmation.tool_spec.name, "tenant": confirmation.tenant.slug, "outcome": confirmation.state,
             "requested_at": confirmation.created_at, "decided_at": confirmation.decided_at}
    transaction.on_commit(lambda: metrics.confirmation_decided(**facts))


def connect_metrics() -> None:
    """Called once from ``InvocationsAppConfig.ready``."""
    for signal in (signals.confirmation_decided, signals.confirmation_expired):
        signal.connect(_count_decision, dispatch_uid=f"toolops.metrics.{id(signal)}")
