"""The authorization service (docs/concepts/admission.md, failure table row 4): VALIDATED → AUTHORIZED /
AUTHORIZATION_REJECTED.

Driven through the agent API (``Agent``) so the response bytes can be checked for leaks; the
decision is taken by ``invocations_app.authorization.invocation_authorize`` right after
admission, from runtime grants only.
"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from control.formatting import render_arguments
from invocations_app.models import Confirmation, Invocation
from tests.builders import (
    Agent, make_calendar_spec, make_demo_spec, make_grant, make_subject, make_tenant, make_token, make_toolspec,
)

pytestmark = pytest.mark.django_db

WEATHER_ARGS = '{"city": "Paris", "date": "2026-07-20"}'


# --- helpers ----------------------------------------------------------------------------------


def new_agent(*, tenant=None) -> Agent:
    subject, token = make_token(subject=make_subject(tenant=tenant) if tenant else None)
    agent = Agent(APIClient(), token)
    agent.subject = subject
    return agent


def propose(agent: Agent, tool: str, arguments: str, *, run_id: str | None = None) -> dict:
    """One proposal in a (new or given) run, in a fresh model call that sees exactly ``tool``."""
    run_id = run_id or agent.run()["id"]
    call = agent.model_call(run_id, tools=[tool])
    resp = agent.propose(call["id"], name=tool, arguments=arguments)
    assert resp.status_code == 201, resp.content
    return resp.json()


def calendar_grant(agent: Agent, **kw):
    return make_grant(subject=agent.subject, capability="calendar.write", operation_class="create", **kw)


def codes(inv: dict) -> list[str]:
    return [r["code"] for r in inv["authorization"]["reasons"]]


def transitions(agent: Agent, inv: dict) -> list[tuple[str, str]]:
    return [(e["from_state"], e["to_state"]) for e in agent.get(f"/api/v1/invocations/{inv['id']}/events").json()]


# --- allow --------------------------------------------------------------------------------


def test_it_authorizes_a_read_only_call_with_an_allow_grant_and_records_the_grant(weather):
    agent = new_agent()
    grant = make_grant(subject=agent.subject, scope_kind="exact", scope_values=["Paris"])
    inv = propose(agent, "weather.get_forecast@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZED"
    assert inv["error"] is None
    auth = inv["authorization"]
    assert auth["decision"] == "allow"
    assert [c["grant_id"] for c in auth["capabilities"]] == [str(grant.pk)]
    used = auth["capabilities"][0]
    assert used["capability"] == "weather.read"
    assert (used["scope_kind"], used["scope_values"], used["effect"]) == ("exact", ["Paris"], "allow")
    assert used["subject_id"] == str(agent.subject.pk)
    assert "grant_matched" in codes(inv)
    assert inv["confirmation"] is None
    assert ("VALIDATED", "AUTHORIZED") in transitions(agent, inv)
    assert transitions(agent, inv)[-1] == ("VALIDATED", "AUTHORIZED")  # read-only: nothing after it yet


def test_it_accepts_a_tenant_wide_grant_for_every_subject_of_the_tenant(weather):
    agent = new_agent()
    make_grant(tenant=agent.subject.tenant, subject=None)
    inv = propose(agent, "weather.get_forecast@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZED"
    assert inv["authorization"]["capabilities"][0]["subject_id"] is None


# --- deny ---------------------------------------------------------------------------------


def test_it_rejects_a_call_without_a_grant_with_no_grant(weather):
    agent = new_agent()
    inv = propose(agent, "weather.get_forecast@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert inv["error"]["code"] == "authorization_denied"
    assert inv["authorization"]["decision"] == "deny"
    assert inv["authorization"]["capabilities"] == []
    assert codes(inv) == ["no_grant"]
    assert inv["authorization"]["reasons"][0]["capability"] == "weather.read"
    assert transitions(agent, inv)[-1] == ("VALIDATED", "AUTHORIZATION_REJECTED")


def test_it_neither_uses_nor_leaks_another_tenants_grant_for_the_same_capability(weather):
    agent = new_agent()
    stranger = make_subject(tenant=make_tenant(slug="zz-foreign-tenant-b"))
    secret_scope = ["Paris", "zz-secret-scope-of-tenant-b"]
    foreign = make_grant(subject=stranger, scope_kind="exact", scope_values=secret_scope, limits={"calls_per_minute": 987654321})
    run_id = agent.run()["id"]
    call = agent.model_call(run_id, tools=["weather.get_forecast@1"])
    resp = agent.propose(call["id"], name="weather.get_forecast@1", arguments=WEATHER_ARGS)
    inv = resp.json()
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert codes(inv) == ["no_grant"]
    events = agent.get(f"/api/v1/invocations/{inv['id']}/events")
    detail = agent.get(f"/api/v1/invocations/{inv['id']}")
    for body in (resp.content, events.content, detail.content):
        assert str(foreign.pk).encode() not in body
        assert foreign.pk.hex.encode() not in body
        assert b"zz-secret-scope-of-tenant-b" not in body
        assert stranger.tenant.slug.encode() not in body
        assert b"987654321" not in body
    # Not even the internal record of the decision mentions it.
    stored = Invocation.objects.get(pk=inv["id"]).authorization
    assert str(foreign.pk) not in json.dumps(stored)


def test_it_does_not_use_a_grant_of_another_subject_of_the_same_tenant(weather):
    agent = new_agent()
    colleague = make_subject(tenant=agent.subject.tenant)
    theirs = make_grant(subject=colleague)
    run_id = agent.run()["id"]
    call = agent.model_call(run_id, tools=["weather.get_forecast@1"])
    resp = agent.propose(call["id"], name="weather.get_forecast@1", arguments=WEATHER_ARGS)
    assert resp.json()["state"] == "AUTHORIZATION_REJECTED"
    assert codes(resp.json()) == ["no_grant"]
    assert str(theirs.pk).encode() not in resp.content


def test_it_denies_an_expired_grant_with_grant_expired(weather):
    agent = new_agent()
    make_grant(subject=agent.subject, expires_at=timezone.now() - timedelta(seconds=1))
    inv = propose(agent, "weather.get_forecast@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert inv["error"]["code"] == "authorization_denied"
    assert codes(inv) == ["grant_expired"]


def test_it_allows_a_grant_that_expires_later(weather):
    agent = new_agent()
    make_grant(subject=agent.subject, expires_at=timezone.now() + timedelta(hours=1))
    assert propose(agent, "weather.get_forecast@1", WEATHER_ARGS)["state"] == "AUTHORIZED"


def test_it_denies_a_revoked_grant_which_the_snapshot_does_not_even_load(weather):
    """The selector keeps only unrevoked grants, so a revoked one reads as ``no_grant``."""
    agent = new_agent()
    revoked = make_grant(subject=agent.subject, revoked_at=timezone.now() - timedelta(minutes=1), revoke_reason="left")
    run_id = agent.run()["id"]
    call = agent.model_call(run_id, tools=["weather.get_forecast@1"])
    resp = agent.propose(call["id"], name="weather.get_forecast@1", arguments=WEATHER_ARGS)
    inv = resp.json()
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert inv["error"]["code"] == "authorization_denied"
    assert codes(inv) == ["no_grant"]
    assert str(revoked.pk).encode() not in resp.content


def test_it_denies_a_tool_version_the_grant_is_not_pinned_to(weather):
    make_toolspec(version=2)
    agent = new_agent()
    make_grant(subject=agent.subject, tool_refs=["weather.get_forecast@1"])
    v2 = propose(agent, "weather.get_forecast@2", WEATHER_ARGS)
    assert v2["state"] == "AUTHORIZATION_REJECTED"
    assert codes(v2) == ["tool_version_not_pinned"]
    assert propose(agent, "weather.get_forecast@1", WEATHER_ARGS)["state"] == "AUTHORIZED"


def test_it_denies_a_resource_outside_the_granted_scope(weather):
    agent = new_agent()
    make_grant(subject=agent.subject, scope_kind="exact", scope_values=["Lyon"])
    inv = propose(agent, "weather.get_forecast@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert codes(inv) == ["scope_mismatch"]
    assert "Lyon" not in json.dumps(inv["authorization"]["reasons"])  # messages never quote scopes


def test_it_denies_when_the_grant_is_for_another_operation_class():
    """calendar.read (read) never stands in for a create capability of the same family."""
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    make_grant(subject=agent.subject, capability="calendar.read", operation_class="read")
    inv = propose(agent, "calendar.create_event@1", '{"calendar_id": "primary"}')
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert codes(inv) == ["no_grant"]


# --- docs/concepts/failures.md row 4: identity claimed in the arguments ------------------------------------------

PLAIN = '{"calendar_id": "primary"}'


def _claiming(subject_id: str) -> str:
    return json.dumps({"calendar_id": "primary", "role": "admin", "as_user": "root", "subject": subject_id})


def _same_decision(a: dict, b: dict) -> None:
    assert a["state"] == b["state"]
    assert a["authorization"]["decision"] == b["authorization"]["decision"]
    assert a["authorization"]["reasons"] == b["authorization"]["reasons"]
    assert a["authorization"]["capabilities"] == b["authorization"]["capabilities"]
    assert a["error"] == b["error"]


def test_it_ignores_an_identity_claimed_in_the_arguments_when_denying():
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    boss = make_subject(tenant=agent.subject.tenant)
    make_grant(subject=boss, capability="calendar.write", operation_class="create", scope_kind="exact", scope_values=["primary"])
    calendar_grant(agent, scope_kind="exact", scope_values=["work"])
    plain = propose(agent, "calendar.create_event@1", PLAIN)
    claiming = propose(agent, "calendar.create_event@1", _claiming(str(boss.pk)))
    assert claiming["normalized_arguments"]["role"] == "admin"  # it is data, and it got through
    assert plain["state"] == "AUTHORIZATION_REJECTED"
    assert codes(plain) == ["scope_mismatch"]
    _same_decision(plain, claiming)


def test_it_ignores_an_identity_claimed_in_the_arguments_when_allowing():
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    grant = calendar_grant(agent, scope_kind="exact", scope_values=["primary"])
    plain = propose(agent, "calendar.create_event@1", PLAIN)
    claiming = propose(agent, "calendar.create_event@1", _claiming(str(make_subject(tenant=agent.subject.tenant).pk)))
    assert plain["state"] == "PREPARED"
    assert [c["grant_id"] for c in plain["authorization"]["capabilities"]] == [str(grant.pk)]
    _same_decision(plain, claiming)
    assert plain["digest"] != claiming["digest"]  # different arguments, same rights


def test_it_ignores_a_claimed_identity_even_when_only_the_claimed_subject_holds_a_grant():
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    boss = make_subject(tenant=agent.subject.tenant)
    make_grant(subject=boss, capability="calendar.write", operation_class="create")
    plain = propose(agent, "calendar.create_event@1", PLAIN)
    claiming = propose(agent, "calendar.create_event@1", _claiming(str(boss.pk)))
    assert claiming["state"] == "AUTHORIZATION_REJECTED"
    assert codes(claiming) == ["no_grant"]
    _same_decision(plain, claiming)


# --- write tools and confirmation ----------------------------------------------------------------


def test_it_prepares_a_write_call_that_needs_no_confirmation():
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    calendar_grant(agent)
    inv = propose(agent, "calendar.create_event@1", PLAIN)
    assert inv["state"] == "PREPARED"
    assert inv["authorization"]["decision"] == "allow"
    assert inv["confirmation"] is None
    assert transitions(agent, inv)[-2:] == [("VALIDATED", "AUTHORIZED"), ("AUTHORIZED", "PREPARED")]
    assert not Confirmation.objects.filter(invocation_id=inv["id"]).exists()


def test_it_holds_a_write_call_for_confirmation_when_the_tool_requires_one():
    make_calendar_spec(open_schema=True, confirm_seconds=60)
    agent = new_agent()
    calendar_grant(agent)
    before = timezone.now()
    inv = propose(agent, "calendar.create_event@1", '{"title": "Bring passport", "calendar_id": "primary"}')
    assert inv["state"] == "AUTHORIZED"
    assert inv["authorization"]["decision"] == "confirm"
    confirmation = Confirmation.objects.get(invocation_id=inv["id"])
    assert confirmation.state == "pending"
    assert confirmation.digest == inv["digest"] == Invocation.objects.get(pk=inv["id"]).digest
    assert confirmation.arguments == inv["normalized_arguments"]
    assert render_arguments(confirmation.arguments).splitlines() == ["calendar_id: primary", "title: Bring passport"]
    assert before + timedelta(seconds=55) <= confirmation.expires_at <= timezone.now() + timedelta(seconds=60)
    assert inv["confirmation"]["state"] == "pending" and inv["confirmation"]["digest"] == inv["digest"]
    events = agent.get(f"/api/v1/invocations/{inv['id']}/events").json()
    assert events[-1]["kind"] == "confirmation_requested"
    assert events[-1]["data"]["digest"] == inv["digest"]
    assert transitions(agent, inv)[-2] == ("VALIDATED", "AUTHORIZED")


def test_it_renders_the_normalized_not_the_raw_arguments_for_the_approver():
    make_demo_spec(name="calendar.create_event")
    agent = new_agent()
    calendar_grant(agent)
    inv = propose(agent, "calendar.create_event@1", json.dumps(
        {"calendar_id": "  Primary ", "title": "Passport", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
    ))
    assert inv["state"] == "AUTHORIZED"
    rendering = render_arguments(Confirmation.objects.get(invocation_id=inv["id"]).arguments)
    assert "calendar_id: primary" in rendering.splitlines()
    assert "Primary" not in rendering
    assert "duration_minutes: 10" in rendering.splitlines()


def test_it_asks_for_confirmation_when_only_a_confirm_grant_covers_the_call():
    make_calendar_spec(open_schema=True, confirm_seconds=None)  # the tool itself requires no confirmation
    agent = new_agent()
    grant = calendar_grant(agent, effect="confirm")
    inv = propose(agent, "calendar.create_event@1", PLAIN)
    assert inv["state"] == "AUTHORIZED"
    assert inv["authorization"]["decision"] == "confirm"
    assert "confirmation_required" in codes(inv)
    assert [c["grant_id"] for c in inv["authorization"]["capabilities"]] == [str(grant.pk)]
    assert Confirmation.objects.get(invocation_id=inv["id"]).digest == inv["digest"]


def test_it_prefers_an_allow_grant_over_a_confirm_grant():
    make_calendar_spec(open_schema=True, confirm_seconds=None)
    agent = new_agent()
    calendar_grant(agent, effect="confirm")
    allow = calendar_grant(agent, effect="allow")
    inv = propose(agent, "calendar.create_event@1", PLAIN)
    assert inv["state"] == "PREPARED"
    assert [c["grant_id"] for c in inv["authorization"]["capabilities"]] == [str(allow.pk)]


# --- amount limits with the demo payments shape ------------------------------------------------


def _payments(agent: Agent, amount: str, run_id=None) -> dict:
    body = json.dumps({"to_account": "acct_42", "amount": {"amount": amount, "currency": "USD"}})
    return propose(agent, "payments.transfer@1", body, run_id=run_id)


@pytest.fixture
def payments(db):
    return make_demo_spec(name="payments.transfer")


@pytest.mark.parametrize(("amount", "state"), [("100.00", "AUTHORIZED"), ("100", "AUTHORIZED"), ("0.01", "AUTHORIZED")])
def test_it_allows_amounts_up_to_the_per_call_limit(payments, amount, state):
    agent = new_agent()
    make_grant(subject=agent.subject, capability="payments.transfer", operation_class="create", limits={"currency": "USD", "max_amount_per_call": 10000})
    inv = _payments(agent, amount)
    assert inv["state"] == state
    assert inv["authorization"]["decision"] == "confirm"  # the demo tool always asks a human


def test_it_denies_one_minor_unit_over_the_per_call_limit(payments):
    agent = new_agent()
    make_grant(subject=agent.subject, capability="payments.transfer", operation_class="create", limits={"currency": "USD", "max_amount_per_call": 10000})
    inv = _payments(agent, "100.01")
    assert inv["normalized_arguments"]["amount"] == {"amount_minor": 10001, "currency": "USD"}
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert codes(inv) == ["amount_over_call_limit"]
    assert not Confirmation.objects.filter(invocation_id=inv["id"]).exists()


# --- tenant isolation ----------------------------------------------------------------------------


def test_it_hides_one_tenants_invocations_and_runs_from_another_tenants_subject(weather):
    a = new_agent()
    make_grant(subject=a.subject)
    inv = propose(a, "weather.get_forecast@1", WEATHER_ARGS)
    b = new_agent()
    make_grant(subject=b.subject)
    for path in (f"/api/v1/invocations/{inv['id']}", f"/api/v1/invocations/{inv['id']}/events", f"/api/v1/runs/{inv['run_id']}"):
        resp = b.get(path)
        assert resp.status_code == 404, path
    assert b.post(f"/api/v1/invocations/{inv['id']}/cancel", {}).status_code == 404
    assert Invocation.objects.get(pk=inv["id"]).state == "AUTHORIZED"


def test_it_does_not_count_another_tenants_calls_against_a_per_run_limit(weather):
    a = new_agent()
    make_grant(subject=a.subject, limits={"calls_per_run": 1})
    b = new_agent()
    make_grant(subject=b.subject, limits={"calls_per_run": 1})
    b_run = b.run()["id"]
    assert [propose(b, "weather.get_forecast@1", WEATHER_ARGS, run_id=b_run)["state"] for _ in range(3)] == [
        "AUTHORIZED", "AUTHORIZATION_REJECTED", "AUTHORIZATION_REJECTED"
    ]
    a_run = a.run()["id"]
    first = propose(a, "weather.get_forecast@1", WEATHER_ARGS, run_id=a_run)
    second = propose(a, "weather.get_forecast@1", WEATHER_ARGS, run_id=a_run)
    assert first["state"] == "AUTHORIZED"
    assert second["state"] == "AUTHORIZATION_REJECTED"
    assert codes(second) == ["run_call_limit"]


def test_it_does_not_count_another_tenants_calls_against_a_per_minute_limit(weather):
    a = new_agent()
    make_grant(subject=a.subject, limits={"calls_per_minute": 2})
    b = new_agent()
    make_grant(subject=b.subject, limits={"calls_per_minute": 2})
    assert [propose(b, "weather.get_forecast@1", WEATHER_ARGS)["state"] for _ in range(3)] == [
        "AUTHORIZED", "AUTHORIZED", "AUTHORIZATION_REJECTED"
    ]
    states = [propose(a, "weather.get_forecast@1", WEATHER_ARGS)["state"] for _ in range(3)]
    assert states == ["AUTHORIZED", "AUTHORIZED", "AUTHORIZATION_REJECTED"]


def test_it_starts_a_new_runs_count_from_zero(weather):
    agent = new_agent()
    make_grant(subject=agent.subject, limits={"calls_per_run": 1})
    assert propose(agent, "weather.get_forecast@1", WEATHER_ARGS)["state"] == "AUTHORIZED"
    assert propose(agent, "weather.get_forecast@1", WEATHER_ARGS)["state"] == "AUTHORIZED"  # another run


def test_it_denies_a_misconfigured_tool_whose_capability_is_not_defined():
    agent = new_agent()
    make_toolspec(name="ghost.read", required_capabilities=[{"capability": "ghost.read", "resource_pointer": "/city"}])
    inv = propose(agent, "ghost.read@1", WEATHER_ARGS)
    assert inv["state"] == "AUTHORIZATION_REJECTED"
    assert codes(inv) == ["misconfigured_tool"]
