"""Counting limits under concurrency: N racers for the last units of a grant get exactly the limit.

Both counter backends (``DatabaseCounter`` with the grant row locked FOR UPDATE, ``RedisCounter``
with one Lua script) and both levels (``counter.reserve`` directly, and the whole
``invocation_authorize`` service on distinct VALIDATED invocations of one run). Threads need real
servers: PostgreSQL for anything that touches the database from several threads, Redis for the
Redis backend. Sequential versions run everywhere.
"""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from invocations_app.authorization import invocation_authorize
from invocations_app.counters import DatabaseCounter, RedisCounter
from invocations_app.models import GrantUsage, Invocation
from tests.builders import DIALECT, RunWorld, make_capability, make_grant, make_toolspec
from tests.conftest import require_postgres, require_redis
from toolops.runtime.states import State

RACERS = 20
LIMIT = 5
AMOUNT = 200  # each call spends 1/5 of the window limit below

# (limits of the grant, reason code of the calls over the limit)
LIMITS = {
    "calls_per_run": ({"calls_per_run": LIMIT}, "run_call_limit"),
    "calls_per_minute": ({"calls_per_minute": LIMIT}, "rate_limited"),
    "amount_per_window": ({"max_amount_per_window": LIMIT * AMOUNT, "amount_window_seconds": 3600}, "amount_over_window_limit"),
}


# --- fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture(params=["database", "redis"])
def counter(request):
    if request.param == "database":
        yield DatabaseCounter()
        return
    url = require_redis()
    backend = RedisCounter(url, prefix=f"test:{uuid.uuid4().hex}")
    yield backend
    for key in backend.client.scan_iter(match=f"{backend.prefix}:*"):
        backend.client.delete(key)


def spend_tool(*, capabilities=(("ledger.spend", "/account", "/amount_minor"),)):
    """A write tool whose capabilities point at an account and an amount in minor units."""
    declared = []
    for name, resource, amount in capabilities:
        make_capability(name=name, operation_class="create")
        declared.append({"capability": name, "resource_pointer": resource, "amount_pointer": amount, "currency": "EUR"})
    return make_toolspec(
        name="ledger.spend",
        schema={
            "$schema": DIALECT,
            "type": "object",
            "properties": {"account": {"type": "string"}, "amount_minor": {"type": "integer"}},
            "required": ["account", "amount_minor"],
            "additionalProperties": False,
        },
        normalizers=[],
        side_effect_class="write_idempotent",
        required_capabilities=declared,
    )


def race(target, items) -> list:
    """Run ``target(item)`` in one thread per item, all released at once; results in item order."""
    barrier = threading.Barrier(len(items))
    results: list = [None] * len(items)

    def worker(i, item):
        try:
            barrier.wait(timeout=30)
            results[i] = target(item)
        except Exception as exc:  # noqa: BLE001 - surfaced by the caller's assertions
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(i, item)) for i, item in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a racer hung"
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors
    return results


def reason_codes(inv: Invocation) -> set[str]:
    return {r["code"] for r in inv.authorization["reasons"]}


def settle(invocations: list[Invocation]) -> tuple[list[Invocation], list[Invocation]]:
    fresh = [Invocation.objects.get(pk=inv.pk) for inv in invocations]
    allowed = [inv for inv in fresh if inv.state == State.PREPARED]
    denied = [inv for inv in fresh if inv.state == State.AUTHORIZATION_REJECTED]
    assert len(allowed) + len(denied) == len(fresh), [inv.state for inv in fresh]
    return allowed, denied


# --- the whole service, concurrently ---------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limit", list(LIMITS))
def test_it_authorizes_exactly_the_limit_of_20_concurrent_calls(counter, limit):
    require_postgres()
    limits, code = LIMITS[limit]
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant(limits)
    invocations = world.validated(RACERS)
    race(lambda inv: invocation_authorize(invocation=inv, counter=counter), invocations)
    allowed, denied = settle(invocations)
    assert (len(allowed), len(denied)) == (LIMIT, RACERS - LIMIT)
    assert all(inv.authorization["capabilities"][0]["grant_id"] == str(grant.pk) for inv in allowed)
    assert all(code in reason_codes(inv) and inv.error_code == "authorization_denied" for inv in denied)
    if isinstance(counter, DatabaseCounter):
        assert GrantUsage.objects.filter(grant=grant).count() == LIMIT
    # The limit stays spent: one more call is denied too.
    late = world.validated(1)[0]
    assert invocation_authorize(invocation=late, counter=counter).state == State.AUTHORIZATION_REJECTED


@pytest.mark.django_db
@pytest.mark.parametrize("limit", list(LIMITS))
def test_it_authorizes_exactly_the_limit_of_20_sequential_calls(counter, limit):
    limits, code = LIMITS[limit]
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    world.grant(limits)
    invocations = world.validated(RACERS)
    states = [invocation_authorize(invocation=inv, counter=counter).state for inv in invocations]
    assert states == [State.PREPARED] * LIMIT + [State.AUTHORIZATION_REJECTED] * (RACERS - LIMIT)
    _, denied = settle(invocations)
    assert all(code in reason_codes(inv) for inv in denied)


@pytest.mark.django_db
def test_it_falls_back_to_another_grant_when_the_first_one_is_used_up(counter):
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    first_id, second_id = sorted((uuid.uuid4() for _ in range(2)), key=str)
    limited = world.grant({"calls_per_run": 2}, id=first_id)  # evaluated first (grant_id order)
    spare = world.grant({"calls_per_run": 1}, id=second_id)
    used = [inv.authorization["capabilities"][0]["grant_id"] if inv.state == State.PREPARED else None
            for inv in (invocation_authorize(invocation=i, counter=counter) for i in world.validated(4))]
    assert used == [str(limited.pk), str(limited.pk), str(spare.pk), None]


@pytest.mark.django_db
def test_it_does_not_count_a_run_limit_across_runs(counter):
    spec = spend_tool()
    world = RunWorld(spec=spec, amount=AMOUNT)
    world.grant({"calls_per_run": 1})
    other_run = RunWorld(spec=spec, amount=AMOUNT, subject=world.subject)
    assert invocation_authorize(invocation=world.validated(1)[0], counter=counter).state == State.PREPARED
    assert invocation_authorize(invocation=other_run.validated(1)[0], counter=counter).state == State.PREPARED
    assert invocation_authorize(invocation=world.validated(1)[0], counter=counter).state == State.AUTHORIZATION_REJECTED


# --- the counters themselves --------------------------------------------------------------


def _reserve_all(counter, snapshot, run, invocations, *, threaded: bool) -> list[list[str]]:
    def one(inv):
        return counter.reserve(grant=snapshot, run_id=run.pk, invocation_id=inv.pk, amount=AMOUNT, now=timezone.now())

    return race(one, invocations) if threaded else [one(inv) for inv in invocations]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limit", list(LIMITS))
def test_it_reserves_exactly_the_limit_for_20_concurrent_callers(counter, limit):
    if isinstance(counter, DatabaseCounter):
        require_postgres()  # SQLite cannot serve 20 threads; the Redis backend needs no database here
    limits, code = LIMITS[limit]
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant(limits)
    invocations = world.validated(RACERS)
    results = _reserve_all(counter, world.snapshot(grant), world.run, invocations, threaded=True)
    assert sum(1 for r in results if r == []) == LIMIT
    assert [r for r in results if r] == [[code]] * (RACERS - LIMIT)
    if isinstance(counter, DatabaseCounter):
        assert GrantUsage.objects.filter(grant=grant).count() == LIMIT


@pytest.mark.django_db
@pytest.mark.parametrize("limit", list(LIMITS))
def test_it_reserves_exactly_the_limit_for_20_sequential_callers(counter, limit):
    limits, code = LIMITS[limit]
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant(limits)
    results = _reserve_all(counter, world.snapshot(grant), world.run, world.validated(RACERS), threaded=False)
    assert results == [[]] * LIMIT + [[code]] * (RACERS - LIMIT)


@pytest.mark.django_db
def test_it_does_not_count_uses_of_a_grant_without_counting_limits(counter):
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant({"max_amount_per_call": 10**6})
    results = _reserve_all(counter, world.snapshot(grant), world.run, world.validated(RACERS), threaded=False)
    assert results == [[]] * RACERS
    assert not GrantUsage.objects.filter(grant=grant).exists()


@pytest.mark.django_db
def test_it_frees_the_minute_window_after_a_minute(counter):
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant({"calls_per_minute": 1})
    snap, run = world.snapshot(grant), world.run
    a, b, c = world.validated(3)
    t0 = timezone.now()
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=a.pk, amount=0, now=t0) == []
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=b.pk, amount=0, now=t0 + timedelta(seconds=30)) == ["rate_limited"]
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=c.pk, amount=0, now=t0 + timedelta(seconds=61)) == []


@pytest.mark.django_db
def test_it_refuses_an_amount_that_would_overrun_the_window_even_with_room_for_a_smaller_one(counter):
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant({"max_amount_per_window": 1000, "amount_window_seconds": 3600})
    snap, run = world.snapshot(grant), world.run
    a, b, c = world.validated(3)
    now = timezone.now()
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=a.pk, amount=700, now=now) == []
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=b.pk, amount=301, now=now) == ["amount_over_window_limit"]
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=c.pk, amount=300, now=now) == []


# --- bookkeeping across several grants of one call ------------------------------------------------


def two_capability_tool():
    return spend_tool(capabilities=(("ledger.spend", "/account", "/amount_minor"), ("ledger.notify", "/account", None)))


@pytest.mark.django_db
def test_it_serves_a_call_from_a_spare_grant_without_charging_the_other_capability_twice(counter):
    """Regression: a lost reservation on one grant used to leave (and then double) the units on the others."""
    world = RunWorld(spec=two_capability_tool(), amount=AMOUNT)
    world.grant({"calls_per_run": 2})  # ledger.spend: room for both calls below
    first_id, second_id = sorted((uuid.uuid4() for _ in range(2)), key=str)
    notify = dict(subject=world.subject, capability="ledger.notify", operation_class="create")
    make_grant(**notify, limits={"calls_per_run": 1}, id=first_id)  # tried first, then used up
    make_grant(**notify, id=second_id)  # unlimited spare
    one, two = world.validated(2)
    assert invocation_authorize(invocation=one, counter=counter).state == State.PREPARED
    assert invocation_authorize(invocation=two, counter=counter).state == State.PREPARED


@pytest.mark.django_db
def test_it_does_not_charge_a_denied_call_to_the_grant_that_had_room(counter):
    """Regression: a denied multi-capability call used to keep the units it had reserved elsewhere."""
    world = RunWorld(spec=two_capability_tool(), amount=AMOUNT)
    spend = world.grant({"calls_per_run": 2})
    make_grant(subject=world.subject, capability="ledger.notify", operation_class="create", limits={"calls_per_run": 1})
    one, two, three = world.validated(3)
    assert invocation_authorize(invocation=one, counter=counter).state == State.PREPARED
    assert invocation_authorize(invocation=two, counter=counter).state == State.AUTHORIZATION_REJECTED  # notify used up
    make_grant(subject=world.subject, capability="ledger.notify", operation_class="create")  # a new notify grant
    assert invocation_authorize(invocation=three, counter=counter).state == State.PREPARED  # spend: 1 of 2 used
    assert three.authorization["capabilities"][0]["grant_id"] == str(spend.pk)


@pytest.mark.django_db
def test_it_gives_only_the_limit_that_was_hit_as_the_reason(counter):
    """Regression: a lost reservation used to be reported as every counting limit of the grant."""
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    world.grant({"calls_per_minute": 1, "calls_per_run": 100})
    one, two = world.validated(2)
    invocation_authorize(invocation=one, counter=counter)
    denied = invocation_authorize(invocation=two, counter=counter)
    assert denied.state == State.AUTHORIZATION_REJECTED
    assert reason_codes(denied) == {"rate_limited"}


@pytest.mark.django_db
def test_it_gives_a_released_unit_back_to_the_next_caller(counter):
    world = RunWorld(spec=spend_tool(), amount=AMOUNT)
    grant = world.grant({"calls_per_run": 1, "calls_per_minute": 1, "max_amount_per_window": AMOUNT, "amount_window_seconds": 60})
    snap, run = world.snapshot(grant), world.run
    a, b = world.validated(2)
    now = timezone.now()
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=a.pk, amount=AMOUNT, now=now) == []
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=b.pk, amount=AMOUNT, now=now) == [
        "rate_limited", "run_call_limit", "amount_over_window_limit"
    ]
    counter.release(grant=snap, run_id=run.pk, invocation_id=a.pk, amount=AMOUNT)
    assert counter.reserve(grant=snap, run_id=run.pk, invocation_id=b.pk, amount=AMOUNT, now=now) == []


# --- a re-posted proposal never spends a unit ------------------------------------------------------


@pytest.mark.django_db
def test_it_spends_no_unit_for_a_replayed_proposal():
    from rest_framework.test import APIClient

    from tests.builders import Agent, make_token

    spec = spend_tool()
    subject, token = make_token()
    make_grant(subject=subject, capability="ledger.spend", operation_class="create", limits={"calls_per_run": 2})
    agent = Agent(APIClient(), token)
    run = agent.run()
    call = agent.model_call(run["id"], tools=[spec.ref])
    body = '{"account": "acct_1", "amount_minor": 1}'
    first = agent.propose(call["id"], name=spec.ref, arguments=body, proposal_id="call_1")
    again = agent.propose(call["id"], name=spec.ref, arguments=body, proposal_id="call_1")
    assert (first.status_code, again.status_code) == (201, 200)
    second = agent.propose(call["id"], name=spec.ref, arguments=body, proposal_id="call_2")
    assert (first.json()["state"], second.json()["state"]) == ("PREPARED", "PREPARED")


@pytest.mark.django_db
def test_it_spends_no_unit_for_a_proposal_that_loses_the_insert_race(monkeypatch):
    """Two posts of one proposal both pass the replay check; the one that loses the INSERT must give its unit back.

    Regression: the losing post used to keep the unit it had reserved.

    The interleaving is reproduced deterministically: the second post's replay check runs "before the
    first post's row exists" (patched to see nothing), so it reserves, then hits the unique constraint.
    """
    from invocations_app import admission

    spec = spend_tool()
    world = RunWorld(spec=spec, amount=AMOUNT)
    world.grant({"calls_per_run": 2})
    body = b'{"account": "acct_1", "amount_minor": 1}'
    first, created = admission.proposal_admit(model_call=world.call, subject=world.subject, proposal_id="call_1", name=spec.ref, arguments_bytes=body)
    assert created and first.state == State.PREPARED
    real_replayed, checks = admission._replayed, []

    def blind_first_check(*args):  # the race: the first look happens before the first row commits
        checks.append(args)
        return None if len(checks) == 1 else real_replayed(*args)

    monkeypatch.setattr(admission, "_replayed", blind_first_check)
    again, created = admission.proposal_admit(model_call=world.call, subject=world.subject, proposal_id="call_1", name=spec.ref, arguments_bytes=body)
    assert not created and again.pk == first.pk
    monkeypatch.undo()
    second, _ = admission.proposal_admit(model_call=world.call, subject=world.subject, proposal_id="call_2", name=spec.ref, arguments_bytes=body)
    assert second.state == State.PREPARED, second.authorization["reasons"]  # 2 real calls against calls_per_run=2
