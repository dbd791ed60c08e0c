"""Reconciliation of a write_idempotent call the tool reports absent, with no attempt left.

Real parts: admission, execution and reconciliation services on the database; the tool is an
in-process ``python`` executor whose attempt gets no answer and whose lookup finds nothing.
"Absent" right after a cut-off attempt is not proof: the request may still be processed over
there, so the call is only failed once it can no longer land (``ABSENT_SETTLE``).
"""
from __future__ import annotations

import pytest
from django.utils import timezone

from invocations_app import admission, runs
from worker.attempt import execution_run
from worker.claim import execution_claim
from worker.recovery import ABSENT_SETTLE, reconcile
from invocations_app.models import Attempt
from tests.builders import HERE, fresh, make_calendar_spec, make_grant, make_subject
from toolops.decisions.execution import LookupOutcome
from toolops.runtime.states import State

pytestmark = pytest.mark.django_db


def nothing_found(arguments, ctx):
    return LookupOutcome(committed=False)


def _unknown_write_with_no_attempt_left():
    spec = make_calendar_spec(confirm_seconds=None, retry_policy={"maximum_attempts": 1}, executor={
        "kind": "python", "callable": f"{HERE}.calendar_create", "lookup": f"{__name__}.nothing_found"})
    subject = make_subject()
    make_grant(subject=subject, capability="calendar.write", operation_class="create")
    run = runs.run_create(subject=subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="call_1", name=spec.ref,
                                      arguments_bytes=b'{"calendar_id": "primary", "title": "lost in transit"}')
    claimed = execution_claim(invocation_id=inv.pk)
    execution_run(invocation=claimed[0], attempt=claimed[1])
    inv = fresh(inv)
    assert inv.state == State.OUTCOME_UNKNOWN
    return inv


def test_absent_right_after_the_cut_off_attempt_is_looked_up_again_not_failed():
    inv = _unknown_write_with_no_attempt_left()
    assert reconcile(invocation=inv) == "absent_settling"
    inv = fresh(inv)
    assert inv.state == State.OUTCOME_UNKNOWN and inv.next_attempt_at is not None and inv.next_attempt_at > timezone.now()


def test_absent_once_the_request_can_no_longer_land_fails_the_call_as_not_committed():
    inv = _unknown_write_with_no_attempt_left()
    Attempt.objects.filter(invocation=inv).update(ended_at=timezone.now() - ABSENT_SETTLE - ABSENT_SETTLE / 60)
    assert reconcile(invocation=fresh(inv)) == "failed"
    inv = fresh(inv)
    assert inv.state == State.FAILED_BEFORE_COMMIT and inv.commit_status == "not_committed"
