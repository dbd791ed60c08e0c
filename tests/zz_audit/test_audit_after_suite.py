"""The audit over a realistic workload, as the suite's closing check.

Ordering: pytest collects ``tests/`` alphabetically, so ``zz_audit`` comes last, but
pytest-django then regroups the items — plain ``django_db`` tests first, transactional ones
second, tests without a database last. This test is marked ``transaction=True`` so it lands in
the second group, after every test that writes to the database (the integration tests with
the real worker included); only database-free tests follow it. Being transactional also means
the audit runs outside any test transaction, on committed rows, the way the management command
runs in production (one snapshot transaction per page).

Limitation: what the issue asks — "``audit_invariants`` finds none after the whole suite" —
cannot be done literally. pytest-django rolls back every ``django_db`` test and flushes every
table after each transactional one, so when this runs the test database holds nothing the
earlier tests wrote, and auditing it as found would prove nothing. Instead this test writes,
through the services only, the mix of histories the suite exercises — admissions;
parse, schema, normalization and unknown-tool rejections; authorization denials;
confirmations approved, denied, expired and edited; cancels before the commit boundary and
while executing; executions that commit, fail before the boundary, end OUTCOME_UNKNOWN or are
reconciled; retries; idempotent replays and key reuse — twice, then runs the audit and the
management command over the whole database in small pages and requires a clean report.

Execution runs in-process (``execution_claim`` / ``execution_run`` / ``reconcile`` with
``python`` executors) and nothing is handed to Celery; the worker, broker and demo HTTP
services are covered by ``tests/integration``, whose histories are flushed before this runs.
``tests/audit/test_audit_invariants.py`` shows, kind by kind, that the audit catches
what a history could get wrong.
"""
from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from django.core.management import call_command

from audit.checks import KINDS, audit
from invocations_app.models import Confirmation, Event, Invocation
from tests.builders import ServiceWorld
from tests.audit.test_audit_invariants import EXPECTED_STATES, build_mixed_workload

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def approver(django_user_model):
    return django_user_model.objects.create_user("closing-auditor", password="x")


@pytest.fixture
def in_process(monkeypatch):
    """Committed admissions would be handed to Celery: this test executes them itself instead."""
    monkeypatch.setattr("invocations_app.dispatch.execution_send", lambda *args, **kwargs: None)


def test_the_audit_finds_nothing_in_a_realistic_mixed_workload(approver, in_process):
    for _ in range(2):  # two subjects and runs over the same published tools
        built = build_mixed_workload(ServiceWorld(user=approver))
        assert {name: inv.state for name, inv in built.items()} == EXPECTED_STATES
    assert set(Invocation.objects.values_list("state", flat=True)) >= {
        "AUTHORIZED", "PREPARED", "EXECUTING", "OBSERVED", "OUTCOME_UNKNOWN", "PARSE_REJECTED", "VALIDATION_REJECTED",
        "AUTHORIZATION_REJECTED", "CANCELLED_BEFORE_COMMIT", "FAILED_BEFORE_COMMIT",
    }
    assert set(Confirmation.objects.values_list("state", flat=True)) == {"pending", "approved", "denied", "expired", "edited"}
    assert Event.objects.filter(to_state="COMMITTED").count() >= 4

    stats = Counter()
    assert list(audit(stats=stats, chunk_size=3)) == []
    assert stats["invocations"] == Invocation.objects.count() == 2 * len(EXPECTED_STATES)
    assert stats["events"] == Event.objects.count()
    assert stats["digests_checked"] > 0 and stats["digests_unverifiable"] == 0

    out, err = io.StringIO(), io.StringIO()
    call_command("audit_invariants", "--json", "--chunk-size", "5", "--progress-every", "10", stdout=out, stderr=err)
    report = json.loads(out.getvalue())
    assert report["ok"] is True and report["total"] == 0
    assert report["summary"] == {kind: 0 for kind in KINDS}
    assert report["checked"]["invocations"] == Invocation.objects.count()
    assert "checked 10 invocations… (0 violation(s) so far)" in err.getvalue()
