"""Run budgets (SPEC §11): counted exactly, refusals recorded, exhaustion ends the Run."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from invocations_app import admission, runs
from invocations_app.execution import execution_claim, execution_run
from invocations_app.models import Invocation, Proposal, Run
from specs_app.demo import DEMO_TOOLSPECS
from specs_app.models import ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import make_grant, make_subject, make_toolspec
from tests.conftest import require_postgres
from toolops.errors import BudgetExhausted

ARGS = b'{"city": "Paris", "date": "2026-07-20"}'


def _run(*, budgets: dict):
    subject = make_subject()
    make_toolspec()
    make_grant(subject=subject)
    run = runs.run_create(subject=subject, budgets=budgets, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    return subject, run


@pytest.mark.django_db
def test_it_refuses_a_model_call_over_the_model_calls_budget():
    _, run = _run(budgets={"model_calls": 1})
    runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    with pytest.raises(BudgetExhausted):
        runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    run.refresh_from_db()
    assert (run.status, run.end_reason) == ("exhausted", "model_calls budget exhausted")


@pytest.mark.django_db
def test_it_records_a_proposal_refused_for_budget_and_ends_the_run():
    subject, run = _run(budgets={"tool_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    with pytest.raises(BudgetExhausted):
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="b", name="weather.get_forecast@1", arguments_bytes=ARGS)
    refused = Proposal.objects.get(model_call=call, proposal_id="b")
    assert refused.refusal == "budget_exhausted" and bytes(refused.arguments_bytes) == ARGS
    run.refresh_from_db()
    assert run.status == "exhausted"


def _proposal_lookups(ctx) -> int:
    return sum(1 for q in ctx.captured_queries
               if q["sql"].lstrip().upper().startswith("SELECT") and 'FROM "invocations_app_proposal"' in q["sql"])


@pytest.mark.django_db
def test_it_asks_already_posted_once_per_proposal_before_spending_a_unit():
    """One admission path: one look for a prior post, before the budget unit is taken (no callback
    from inside authorization); a concurrent duplicate is caught by the unique constraint instead."""
    subject, run = _run(budgets={"tool_calls": 5})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    with CaptureQueriesContext(connection) as fresh:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    with CaptureQueriesContext(connection) as repost:
        _, created = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert not created
    assert (_proposal_lookups(fresh), _proposal_lookups(repost)) == (1, 1)
    budget_updates = [q["sql"] for q in repost.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert budget_updates == [], "a re-post spent (or touched) a budget unit"
    assert Run.objects.get(pk=run.pk).tool_calls_used == 1


@pytest.mark.django_db
def test_it_does_not_charge_a_replayed_proposal():
    subject, run = _run(budgets={"tool_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    first, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    again, created = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert (again.pk, created) == (first.pk, False)
    assert Run.objects.get(pk=run.pk).tool_calls_used == 1


@pytest.mark.django_db
def test_it_cancels_what_has_not_crossed_the_boundary_when_the_run_is_exhausted():
    subject, run = _run(budgets={"tool_calls": 1, "model_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert inv.state == "AUTHORIZED"  # read-only, waiting for a worker
    with pytest.raises(BudgetExhausted):
        runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv.refresh_from_db()
    assert inv.state == "CANCELLED_BEFORE_COMMIT" and inv.error_code == "cancelled"


@pytest.mark.django_db
def test_it_refuses_a_read_claimed_after_the_run_ended_and_records_it_as_never_sent():
    subject, run = _run(budgets={})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    runs.run_finish(run=run, reason="the agent stopped")
    invocation, attempt = execution_claim(invocation_id=inv.pk)
    assert attempt.sent_at is not None  # the claim counts a read as sent …
    execution_run(invocation=invocation, attempt=attempt)
    attempt.refresh_from_db()
    assert (attempt.sent_at, attempt.failure_class) == (None, "not_reached")  # … until it provably was not
    inv.refresh_from_db()
    assert (inv.state, inv.error_code) == ("FAILED_BEFORE_COMMIT", "budget_exhausted")


@pytest.mark.django_db(transaction=True)
def test_it_admits_exactly_the_remaining_tool_calls_under_a_race():
    """10 parallel proposals against 3 remaining tool calls → exactly 3 admitted (PostgreSQL)."""
    require_postgres()
    subject, run = _run(budgets={"tool_calls": 3})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    barrier = threading.Barrier(10)
    outcomes: list[str] = []

    def post(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            admission.proposal_admit(model_call=call, subject=subject, proposal_id=f"p{i}", name="weather.get_forecast@1", arguments_bytes=ARGS)
            outcomes.append("admitted")
        except BudgetExhausted:
            outcomes.append("refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["admitted"] * 3 + ["refused"] * 7
    assert Invocation.objects.filter(run=run).count() == 3
    assert Proposal.objects.filter(model_call=call, refusal="budget_exhausted").count() == 7
    assert Run.objects.get(pk=run.pk).tool_calls_used == 3


WEATHER = next(s for s in DEMO_TOOLSPECS if s["name"] == "weather.get_forecast")  # runs in-process


def _observe_one_read(*, budgets: dict):
    """A read of the demo weather tool carried to its end in a run with ``budgets``."""
    subject = make_subject()
    spec = toolspec_publish(spec=ToolSpec.objects.create(**{**WEATHER, "version": 1}))
    make_grant(subject=subject)
    run = runs.run_create(subject=subject, budgets=budgets, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    call = runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="r", name=spec.ref, arguments_bytes=ARGS)
    invocation, attempt = execution_claim(invocation_id=inv.pk)
    execution_run(invocation=invocation, attempt=attempt)
    inv.refresh_from_db()
    run.refresh_from_db()
    return inv, run


@pytest.mark.django_db(transaction=True)
def test_it_counts_result_bytes_of_an_uncapped_run_with_the_result():
    inv, run = _observe_one_read(budgets={})
    assert inv.state == "OBSERVED"
    assert run.result_bytes_used == inv.result_body.total_bytes > 0
    assert run.status == "active"


@pytest.mark.django_db(transaction=True)
def test_a_result_over_the_result_bytes_budget_stands_and_ends_the_run():
    inv, run = _observe_one_read(budgets={"result_bytes": 10})
    assert inv.state == "OBSERVED"  # the result itself stands
    assert run.result_bytes_used == inv.result_body.total_bytes > 10
    assert (run.status, run.end_reason) == ("exhausted", "result_bytes budget exhausted")
