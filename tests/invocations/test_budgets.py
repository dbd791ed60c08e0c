"""Run budgets (docs/concepts/execution.md): counted exactly, refusals recorded, exhaustion ends the Run and refuses
*further* work — admitted calls are never undone; only the wall clock cancels."""
from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from invocations_app import admission, authorization, budgets, runs
from worker.attempt import execution_run
from worker.claim import execution_claim
from invocations_app.models import Invocation, Proposal, Run
from devtools.demo import DEMO_TOOLSPECS
from specs_app.models import ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import RunWorld, make_capability, make_grant, make_subject, make_toolspec
from tests.conftest import require_postgres
from toolops.errors import BudgetExhausted
from toolops.decisions.deadlines import DEFAULT_DEADLINE_SECONDS
from toolops.decisions.execution import Commit, ExecutionOutcome

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
    admitted, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    with pytest.raises(BudgetExhausted) as refusal:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="b", name="weather.get_forecast@1", arguments_bytes=ARGS)
    refused = Proposal.objects.get(model_call=call, proposal_id="b")
    assert refused.refusal == "budget_exhausted" and bytes(refused.arguments_bytes) == ARGS
    assert refusal.value.extra["refusal_id"] == str(refused.pk) and refusal.value.extra["budget"] == "tool_calls"
    run.refresh_from_db()
    assert (run.status, run.end_reason) == ("exhausted", "tool_calls budget exhausted")
    admitted.refresh_from_db()
    assert admitted.state == "AUTHORIZED", "a refusal undid a call admitted within the budget"


@pytest.mark.django_db
def test_it_answers_a_reposted_refusal_with_the_same_refusal_and_an_admitted_call_with_its_invocation():
    subject, run = _run(budgets={"tool_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    admitted, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    with pytest.raises(BudgetExhausted) as first:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="b", name="weather.get_forecast@1", arguments_bytes=ARGS)
    call.run.refresh_from_db()  # a later request reads the ended run
    with pytest.raises(BudgetExhausted) as again:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="b", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert again.value.extra["refusal_id"] == first.value.extra["refusal_id"]
    replay, created = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert (replay.pk, created) == (admitted.pk, False)
    with pytest.raises(BudgetExhausted) as new:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="c", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert Proposal.objects.get(pk=new.value.extra["refusal_id"]).proposal_id == "c"
    assert Invocation.objects.filter(run=run).count() == 1 and Run.objects.get(pk=run.pk).tool_calls_used == 1


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
def test_a_counted_budget_running_out_leaves_admitted_calls_alone():
    subject, run = _run(budgets={"tool_calls": 1, "model_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert inv.state == "AUTHORIZED"  # read-only, waiting for a worker
    with pytest.raises(BudgetExhausted):
        runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv.refresh_from_db()
    assert (inv.state, inv.error_code) == ("AUTHORIZED", "")
    run.refresh_from_db()
    assert (run.status, run.end_reason) == ("exhausted", "model_calls budget exhausted")


def _age(run, seconds: float) -> None:
    """Move the run's start into the past, as if ``seconds`` of its wall clock had gone by."""
    Run.objects.filter(pk=run.pk).update(created_at=run.created_at - timedelta(seconds=seconds))
    run.refresh_from_db()


@pytest.mark.django_db
def test_the_wall_clock_running_out_cancels_what_has_not_crossed_the_boundary():
    subject, run = _run(budgets={"wall_seconds": 60})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    _age(run, 61)
    with pytest.raises(BudgetExhausted) as refusal:
        runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    assert refusal.value.extra["budget"] == "wall_seconds"
    inv.refresh_from_db()
    assert (inv.state, inv.error_code) == ("CANCELLED_BEFORE_COMMIT", "cancelled")
    assert "wall_seconds" in inv.error_message


@pytest.mark.django_db
def test_the_wall_clock_sweep_cancels_waiting_calls_of_a_run_another_budget_ended():
    subject, run = _run(budgets={"wall_seconds": 60, "tool_calls": 1})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    with pytest.raises(BudgetExhausted):
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="b", name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert budgets.runs_wall_clock_sweep() == 0  # the clock has not run out: the admitted call waits on
    assert Invocation.objects.get(pk=inv.pk).state == "AUTHORIZED"
    _age(run, 61)
    assert budgets.runs_wall_clock_sweep() == 1
    assert Invocation.objects.get(pk=inv.pk).state == "CANCELLED_BEFORE_COMMIT"
    assert Run.objects.get(pk=run.pk).end_reason == "tool_calls budget exhausted"  # the first reason stands


@pytest.mark.django_db
def test_a_call_gets_the_earlier_of_its_own_deadline_and_the_runs_wall_clock_end():
    subject, run = _run(budgets={"wall_seconds": 3600})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id="a", name="weather.get_forecast@1", arguments_bytes=ARGS)
    own = inv.tool_spec.timeout_policy.get("deadline_seconds", DEFAULT_DEADLINE_SECONDS)
    assert inv.created_at < inv.deadline <= inv.created_at + timedelta(seconds=own + 1)
    short = runs.run_create(subject=subject, budgets={"wall_seconds": 2}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    short_call = runs.model_call_create(run=short, tool_refs=None, fmt="openai", context=[])
    capped, _ = admission.proposal_admit(model_call=short_call, subject=subject, proposal_id="a",
                                         name="weather.get_forecast@1", arguments_bytes=ARGS)
    assert capped.deadline == short.created_at + timedelta(seconds=2)


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
    assert (inv.state, inv.error_code) == ("FAILED_BEFORE_COMMIT", "cancelled")


@pytest.mark.django_db(transaction=True)
def test_it_admits_exactly_the_remaining_tool_calls_under_a_race():
    """10 parallel proposals against 3 remaining tool calls → exactly 3 admitted (PostgreSQL)."""
    require_postgres()
    subject, run = _run(budgets={"tool_calls": 3})
    call = runs.model_call_create(run=run, tool_refs=None, fmt="openai", context=[])
    barrier = threading.Barrier(10)
    outcomes: list[str] = []
    refusal_ids: list[str] = []

    def post(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            admission.proposal_admit(model_call=call, subject=subject, proposal_id=f"p{i}", name="weather.get_forecast@1", arguments_bytes=ARGS)
            outcomes.append("admitted")
        except BudgetExhausted as exc:
            outcomes.append("refused")
            refusal_ids.append(exc.extra["refusal_id"])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["admitted"] * 3 + ["refused"] * 7
    assert Invocation.objects.filter(run=run).count() == 3
    assert sorted(refusal_ids) == sorted(str(pk) for pk in Proposal.objects.filter(model_call=call, refusal="budget_exhausted").values_list("pk", flat=True))
    assert len(set(refusal_ids)) == 7
    assert Run.objects.get(pk=run.pk).tool_calls_used == 3
    assert set(Invocation.objects.filter(run=run).values_list("state", flat=True)) == {"AUTHORIZED"}  # none cancelled


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


# --- cost: the executor's reported cost where it has one, else the ToolSpec's ------------------

def reporting_forecast(arguments, ctx):
    """A tool that reports what each call cost (as an HTTP tool would in its cost header)."""
    return ExecutionOutcome(commit=Commit.NOT_APPLICABLE, value={"city": arguments["city"]}, cost="0.75")


def silent_forecast(arguments, ctx):
    return {"city": arguments["city"]}


def _costly_run(*, callable_name: str, declared: str, budgets: dict):
    subject = make_subject()
    spec = make_toolspec(name="weather.costly", executor={"kind": "python", "callable": f"{__name__}.{callable_name}", "cost": declared})
    make_grant(subject=subject)
    run = runs.run_create(subject=subject, budgets=budgets, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    return subject, spec, run, runs.model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])


def _read(call, subject, spec, proposal_id: str) -> Invocation:
    inv, _ = admission.proposal_admit(model_call=call, subject=subject, proposal_id=proposal_id, name=spec.ref, arguments_bytes=ARGS)
    invocation, attempt = execution_claim(invocation_id=inv.pk)
    execution_run(invocation=invocation, attempt=attempt)
    inv.refresh_from_db()
    return inv


@pytest.mark.django_db(transaction=True)
def test_it_charges_the_cost_the_executor_reports_over_the_declared_one():
    subject, spec, run, call = _costly_run(callable_name="reporting_forecast", declared="5", budgets={"cost": "1"})
    assert _read(call, subject, spec, "a").state == "OBSERVED"
    run.refresh_from_db()
    assert (run.cost_used, run.status) == (Decimal("0.75"), "active")
    second = _read(call, subject, spec, "b")  # admitted with 0.25 left; it reports 0.75 more
    run.refresh_from_db()
    assert second.state == "OBSERVED", "the call admitted within the budget was undone"
    assert (run.cost_used, run.status, run.end_reason) == (Decimal("1.5"), "exhausted", "cost budget exhausted")
    with pytest.raises(BudgetExhausted) as refusal:
        admission.proposal_admit(model_call=call, subject=subject, proposal_id="c", name=spec.ref, arguments_bytes=ARGS)
    assert refusal.value.extra["budget"] == "cost"
    assert Proposal.objects.get(pk=refusal.value.extra["refusal_id"]).refusal == "budget_exhausted"


@pytest.mark.django_db(transaction=True)
def test_it_charges_the_toolspecs_declared_cost_when_the_executor_reports_none():
    subject, spec, run, call = _costly_run(callable_name="silent_forecast", declared="0.4", budgets={"cost": "10"})
    _read(call, subject, spec, "a")
    _read(call, subject, spec, "b")
    run.refresh_from_db()
    assert (run.cost_used, run.status) == (Decimal("0.8"), "active")


@pytest.mark.django_db
def test_a_call_authorized_after_it_was_recorded_gets_its_deadline_then():
    """The path of an approver's edited replacement: recorded VALIDATED, authorized afterwards."""
    make_capability(name="weather.read", operation_class="read")
    spec = make_toolspec(name="ledger.peek", required_capabilities=[{"capability": "weather.read"}],
                         timeout_policy={"deadline_seconds": 42})
    world = RunWorld(spec=spec, amount=1)
    make_grant(subject=world.subject)
    (inv,) = world.validated(1)
    assert inv.deadline is None
    authorization.invocation_authorize(invocation=inv)
    inv.refresh_from_db()
    assert inv.state == "AUTHORIZED"
    assert timedelta(seconds=40) < inv.deadline - inv.updated_at <= timedelta(seconds=42)
