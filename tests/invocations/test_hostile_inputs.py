"""Limits on input (issue 11 item 7): context ids of another tenant, non-IANA timezones, and
sign tricks in the demo payment amount — each refused as problem+json, nothing created."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from invocations_app.models import ModelCall, Run
from devtools.demo import load_demo
from specs_app.models import Subject
from tests.builders import Agent, make_grant, make_token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("zone", ["localtime", "UTC+8", "GMT+08:00", "+08:00", "Factory", "asia/shanghai",
                                  "../../../etc/localtime", "posixrules"])
def test_it_refuses_a_timezone_that_is_not_an_iana_name(agent, zone):
    resp = agent.post("/api/v1/runs", {"timezone": zone})
    assert resp.status_code == 400, resp.content
    assert resp["Content-Type"].startswith("application/problem+json")
    assert resp.json()["code"] == "invalid_timezone"
    assert not Run.objects.exists()


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "UTC", "Etc/GMT-8", "America/Argentina/Buenos_Aires"])
def test_it_accepts_iana_timezones(agent, zone):
    assert agent.post("/api/v1/runs", {"timezone": zone}).status_code == 201


def _invocation_of(agent) -> str:
    run = agent.run()
    call = agent.model_call(run["id"])
    resp = agent.propose(call["id"], name="weather-get_forecast_v1", arguments='{"city": "Paris", "date": "2026-07-20"}')
    assert resp.status_code == 201, resp.content
    return resp.json()["id"]


def test_it_refuses_context_ids_of_another_tenant_like_unknown_ones(agent, weather):
    other_subject, other_token = make_token()
    make_grant(subject=other_subject)
    other = Agent(APIClient(), other_token)
    theirs = _invocation_of(other)
    mine = _invocation_of(agent)
    run = agent.run()
    before = ModelCall.objects.count()
    foreign = agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"context": [mine, theirs]})
    missing = agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"context": ["6f1d8c2e-0000-4000-8000-000000000000"]})
    assert foreign.status_code == missing.status_code == 400
    assert foreign.json()["code"] == missing.json()["code"] == "unknown_context"
    assert ModelCall.objects.count() == before
    assert agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"context": [mine]}).status_code == 201


@pytest.mark.parametrize("amount", ["-0", "-0.00", "+5", "0", "0.00", " 5", "5 ", "1e3", "-5", "05", "0x10", -0, 0, -0.0, -5])
def test_it_refuses_sign_tricks_in_the_demo_payment_amount(amount, settings):
    load_demo(token="tko_hostile_inputs")
    agent = Agent(APIClient(), "tko_hostile_inputs")
    run = agent.run()
    call = agent.model_call(run["id"], tools=["payments.transfer@1"])
    args = json.dumps({"to_account": "acct-42", "amount": {"amount": amount, "currency": "USD"}})
    resp = agent.propose(call["id"], name="payments-transfer_v1", arguments=args.replace("-0.0", "-0") if amount == -0 else args)
    assert resp.status_code == 201, resp.content
    assert resp.json()["state"] == "VALIDATION_REJECTED", (amount, resp.json()["state"])


def test_it_still_accepts_plain_positive_amounts(settings):
    load_demo(token="tko_hostile_inputs")
    agent = Agent(APIClient(), "tko_hostile_inputs")
    call = agent.model_call(agent.run()["id"], tools=["payments.transfer@1"])
    for amount in ("12.50", "0.5", 7, 12.5):
        args = json.dumps({"to_account": "acct-42", "amount": {"amount": amount, "currency": "USD"}})
        resp = agent.propose(call["id"], name="payments-transfer_v1", arguments=args)
        assert resp.json()["state"] == "AUTHORIZED", (amount, resp.json())
    assert Subject.objects.filter(name="demo-agent").exists()
