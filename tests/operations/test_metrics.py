"""``GET /metrics`` (toolops/metrics.py, control/operations.py): refused without the bearer token;
with it, the counters move after a proposal, an approval, a failed attempt and an unknown
outcome; the row gauges read the database; two processes' counts add up in one scrape.
Real parts: the admission, confirmation and execution services on the database, in-process
``python`` executors (tests/builders.py), the Django test client.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from invocations_app.confirmations import confirmation_approve
from tests.builders import HERE, allow_approving, fresh, make_calendar_spec, make_planner, make_staff, pending_confirmation
from tests.conftest import REPO_ROOT
from toolops import metrics
from toolops.runtime.states import State
from worker.attempt import execution_run
from worker.claim import execution_claim

TOKEN = "metrics-" + uuid.uuid4().hex


@pytest.fixture
def scrape(client, settings):
    settings.TOOLOPS_METRICS_TOKEN = TOKEN

    def read() -> dict[tuple, float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(response.content.decode()) for sample in family.samples}

    return read


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.mark.parametrize("configured,header", [
    ("", None), ("", "Bearer "), ("s3cret-token", None), ("s3cret-token", "Bearer s3cret-tokem"),
    ("s3cret-token", "Basic s3cret-token"), ("s3cret-token", "Bearer s3cret-token-longer"),
])
def test_a_scrape_without_the_configured_token_is_a_plain_404(client, settings, configured, header):
    settings.TOOLOPS_METRICS_TOKEN = configured
    response = client.get("/metrics", **({"HTTP_AUTHORIZATION": header} if header else {}))
    assert response.status_code == 404
    assert b"toolops_" not in response.content and b"metrics" not in response.content


@pytest.mark.django_db
def test_counters_move_after_a_proposal_an_approval_a_failed_attempt_and_an_unknown_outcome(
        scrape, django_capture_on_commit_callbacks):
    spec = make_calendar_spec(retry_policy={"maximum_attempts": 1},
                              executor={"kind": "python", "callable": f"{HERE}.calendar_create"})
    subject = make_planner()
    approver = make_staff(username="ops-approver")
    allow_approving(user=approver, spec=spec, tenant=subject.tenant)
    tool, tenant = spec.name, subject.tenant.slug
    before = scrape()

    with django_capture_on_commit_callbacks(execute=True):
        refused = pending_confirmation(subject=subject, spec=spec, arguments={"calendar_id": "primary", "title": "reject me"})
        lost = pending_confirmation(subject=subject, spec=spec, arguments={"calendar_id": "primary", "title": "lost call"})
    waiting = scrape()
    assert value(waiting, "toolops_proposals_total", tool=tool, tenant=tenant, outcome="needs_person") == \
        value(before, "toolops_proposals_total", tool=tool, tenant=tenant, outcome="needs_person") + 2
    assert value(waiting, "toolops_confirmations_pending", tenant=tenant) == 2
    assert value(waiting, "toolops_confirmation_oldest_pending_seconds", tenant=tenant) >= 0

    assert value(waiting, "toolops_outbox_backlog", queue="invocations") == 0  # both wait for a person
    for confirmation in (refused, lost):
        with django_capture_on_commit_callbacks(execute=True):
            confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest)
        assert value(scrape(), "toolops_outbox_backlog", queue="invocations") == 1  # released, not yet claimed
        invocation, attempt = execution_claim(invocation_id=confirmation.invocation_id)
        execution_run(invocation=invocation, attempt=attempt)
    assert fresh(lost.invocation).state == State.OUTCOME_UNKNOWN
    after = scrape()

    def moved(name: str, **labels) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("toolops_confirmation_decisions_total", tool=tool, tenant=tenant, outcome="approved") == 2
    assert moved("toolops_confirmation_decision_seconds_count", tool=tool) == 2
    assert value(after, "toolops_confirmations_pending", tenant=tenant) == 0
    assert moved("toolops_attempts_total", tool=tool, side_effect_class="write_idempotent",
                 failure_class="business_rejected") == 1
    assert moved("toolops_attempts_total", tool=tool, side_effect_class="write_idempotent",
                 failure_class="timeout_unknown") == 1
    assert moved("toolops_attempt_duration_seconds_count", tool=tool) == 2
    assert moved("toolops_queue_lag_seconds_count") == 2
    assert moved("toolops_outcomes_unknown_total", tool=tool, tenant=tenant) == 1
    assert value(after, "toolops_outcomes_unknown_open", tenant=tenant) == 1
    assert value(after, "toolops_outbox_backlog", queue="invocations") == 0
    assert moved("toolops_http_request_duration_seconds_count", method="GET", route="metrics", status="2xx") >= 2
    # Bounded labels: no invocation, proposal or confirmation id anywhere in the scrape.
    labels = {v for (_, pairs) in after for _, v in pairs}
    for ident in (refused.pk, lost.pk, refused.invocation_id, lost.invocation_id):
        assert str(ident) not in labels


@pytest.mark.django_db
def test_two_processes_counts_add_up_in_one_scrape(scrape, settings):
    tenant = f"multi-{uuid.uuid4().hex[:8]}"
    for _ in range(2):
        metrics.proposal_admitted(tool="weather.get_forecast", tenant=tenant, state="PARSE_REJECTED", needs_person=False)
    # Another process (as a second gunicorn worker or a Celery child is), same metrics directory.
    script = ("from toolops import metrics\n"
              f"for _ in range(3): metrics.proposal_admitted(tool='weather.get_forecast', tenant='{tenant}',"
              " state='PARSE_REJECTED', needs_person=False)")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(settings.TOOLOPS_METRICS_DIR)}
    subprocess.run([sys.executable, "manage.py", "shell", "-c", script], cwd=REPO_ROOT, env=env, check=True,
                   capture_output=True)
    assert value(scrape(), "toolops_proposals_total", tool="weather.get_forecast", tenant=tenant,
                 outcome="parse_rejected") == 5



@pytest.mark.django_db
def test_mcp_requests_are_counted_by_method_and_result_with_unknown_methods_bounded(scrape):
    import asyncio
    from types import SimpleNamespace

    from mcp.shared.exceptions import MCPError

    from mcp_server.operations import RequestMetrics

    async def ok(ctx):
        return SimpleNamespace(is_error=False)

    async def tool_error(ctx):
        return SimpleNamespace(is_error=True)

    async def refused(ctx):
        raise MCPError(-32602, "no such call")

    before = scrape()
    for method, handler in (("tools/list", ok), ("tools/call", tool_error), ("tasks/get", refused),
                            ("x-" + uuid.uuid4().hex, ok)):
        try:
            asyncio.run(RequestMetrics()(SimpleNamespace(method=method), handler))
        except MCPError:
            pass
    after = scrape()
    for labels in ({"method": "tools/list", "result": "ok"}, {"method": "tools/call", "result": "tool_error"},
                   {"method": "tasks/get", "result": "error"}, {"method": "other", "result": "ok"}):
        assert value(after, "toolops_mcp_requests_total", **labels) - value(before, "toolops_mcp_requests_total", **labels) == 1


@pytest.mark.django_db
def test_the_grafana_dashboard_draws_only_metrics_that_exist_and_every_one_of_them():
    import json
    import re

    from prometheus_client import Counter, Histogram

    from invocations_app.operations import operational_gauges

    dashboard = json.loads((REPO_ROOT / "deploy" / "grafana" / "toolops.json").read_text())
    drawn = {re.sub(r"_(total|bucket|count|sum)$", "", name)
             for panel in dashboard["panels"] for target in panel["targets"]
             for name in re.findall(r"toolops_[a-z_]+", target["expr"])}
    defined = {m._name for m in vars(metrics).values() if isinstance(m, (Counter, Histogram))} | set(operational_gauges())
    assert drawn == defined


@pytest.mark.django_db
def test_webhook_deliveries_are_counted_by_status_and_the_pending_ones_are_the_webhook_backlog(scrape):
    from django.utils import timezone

    from invocations_app.models import WebhookDelivery, WebhookEndpoint
    from tests.builders import make_tenant
    from webhooks.delivery import webhook_delivery_attempt

    tenant = make_tenant()
    inactive = WebhookEndpoint.objects.create(tenant=tenant, url="https://hooks.example.invalid/a", secret="s",
                                              events=["invocation.settled"], is_active=False)
    # Loopback is on no webhook allow-list: the egress check refuses it, a failure at once.
    refused = WebhookEndpoint.objects.create(tenant=tenant, url="http://127.0.0.1:9/hook", secret="s",
                                             events=["invocation.settled"])
    deliveries = [WebhookDelivery.objects.create(endpoint=e, event_type="invocation.settled", payload={},
                                                 next_attempt_at=timezone.now()) for e in (inactive, refused)]
    before = scrape()
    assert value(before, "toolops_outbox_backlog", queue="webhooks") == 2
    assert [webhook_delivery_attempt(delivery_id=d.pk) for d in deliveries] == ["failed", "failed"]
    after = scrape()
    assert value(after, "toolops_webhook_deliveries_total", status="failed") - \
        value(before, "toolops_webhook_deliveries_total", status="failed") == 2
    assert value(after, "toolops_outbox_backlog", queue="webhooks") == 0


@pytest.mark.django_db
def test_a_released_read_waiting_for_a_worker_is_in_the_invocations_backlog(scrape):
    from tests.builders import admit_proposal, make_grant, make_subject, make_toolspec

    spec, subject = make_toolspec(), make_subject()
    make_grant(subject=subject)
    assert value(scrape(), "toolops_outbox_backlog", queue="invocations") == 0
    invocation = admit_proposal(subject=subject, spec=spec, arguments={"city": "Oslo", "date": "2026-07-20"})
    assert invocation.state == State.AUTHORIZED  # a read is claimed from AUTHORIZED
    assert value(scrape(), "toolops_outbox_backlog", queue="invocations") == 1
    claimed, attempt = execution_claim(invocation_id=invocation.pk)
    assert value(scrape(), "toolops_outbox_backlog", queue="invocations") == 0
    execution_run(invocation=claimed, attempt=attempt)
