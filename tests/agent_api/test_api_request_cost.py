"""What one API request costs the database: pinned query counts for the two requests an agent
makes most (a proposal POST, an invocation poll), and the per-process token cache's rules.

bench/load.py measures these paths through gunicorn; the counts here make a regression (a
prefetch that comes back, a per-request token read, an ORM read in a loop) fail in the suite.
Counted after one warm-up request: the token is then remembered (TOOLOPS_TOKEN_CACHE_SECONDS) and
the model call's rendered definitions cached, as in a running server.
"""
from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agent_api.auth import api_token_verify
from specs_app import services as spec_services
from specs_app.models import ApiToken
from specs_app.services import api_token_revoke, verified_tokens
from tests.builders import make_calendar_spec, make_grant

pytestmark = pytest.mark.django_db

FORECAST = json.dumps({"city": "Paris", "date": "2026-07-20"})
# Per database vendor: PostgreSQL sends admission's rows in one pipelined statement; SQLite runs
# them one by one (toolops/sql.py), so its counts are higher for the same work.
POST_QUERIES = {"postgresql": 4, "sqlite": 6}
POST_WITH_CONFIRMATION_QUERIES = {"postgresql": 7, "sqlite": 10}
# A poll on PostgreSQL: the invocation, then its attempts and confirmations in one pipeline, then
# the record's three links in another (each pipeline is logged as one statement: one round trip).
GET_QUERIES = {"postgresql": 3, "sqlite": 6}
GET_WITH_CONFIRMATION_QUERIES = {"postgresql": 4, "sqlite": 7}


def _counted(fn):
    """The response and the statements it sent, savepoints aside: the test runs inside a
    transaction, so each atomic block of the request becomes a SAVEPOINT/RELEASE pair that a
    server in autocommit does not send."""
    with CaptureQueriesContext(connection) as captured:
        resp = fn()
    return resp, [q["sql"] for q in captured.captured_queries if "SAVEPOINT" not in q["sql"]]


def _weather_call(agent):
    run = agent.run()
    call = agent.model_call(run["id"])
    first = agent.propose(call["id"], name="weather.get_forecast@1", arguments=FORECAST)  # warm-up
    assert first.status_code == 201, first.content
    return call, first.json()


def test_a_proposal_post_costs_a_fixed_number_of_queries(agent, weather):
    call, _ = _weather_call(agent)
    resp, queries = _counted(lambda: agent.propose(call["id"], name="weather.get_forecast@1", arguments=FORECAST))
    assert resp.status_code == 201, resp.content
    assert resp.json()["state"] == "AUTHORIZED" and resp.json()["attempts"] == []
    assert len(queries) == POST_QUERIES[connection.vendor], "\n".join(queries)
    assert not any("specs_app_apitoken" in q for q in queries)  # the token was remembered


def test_a_proposal_that_opens_a_confirmation_answers_it_without_reading_it_back(agent):
    make_calendar_spec()
    make_grant(subject=agent.subject, capability="calendar.write", operation_class="create")
    run = agent.run()
    call = agent.model_call(run["id"], tools=["calendar.create_event@1"])
    args = json.dumps({"calendar_id": "team", "title": "Standup"})
    assert agent.propose(call["id"], name="calendar.create_event@1", arguments=args).status_code == 201
    resp, queries = _counted(lambda: agent.propose(call["id"], name="calendar.create_event@1", arguments=args))
    assert resp.status_code == 201, resp.content
    body = resp.json()
    assert body["state"] == "AUTHORIZED" and body["confirmation"]["state"] == "pending"
    assert body["confirmation"]["approvals"] == [] and body["confirmation"]["decided_by"] is None
    assert len(queries) == POST_WITH_CONFIRMATION_QUERIES[connection.vendor], "\n".join(queries)
    assert not any("invocations_app_confirmation" in q and q.lstrip().startswith("SELECT") for q in queries)
    # What the POST answered is what a read of the record finds.
    record = agent.get(f"/api/v1/invocations/{body['id']}").json()
    assert record["confirmation"] == body["confirmation"] and record["attempts"] == body["attempts"] == []


def test_an_invocation_poll_costs_a_fixed_number_of_queries(agent, weather):
    _, inv = _weather_call(agent)
    assert agent.get(f"/api/v1/invocations/{inv['id']}").status_code == 200  # warm: the definition seen
    resp, queries = _counted(lambda: agent.get(f"/api/v1/invocations/{inv['id']}"))
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["tool_definition_seen"]["tool"] == "weather.get_forecast@1"
    assert body["tool_messages_available"] == [] and body["messages_carried"] == [] and body["included_in_model_calls"] == []
    assert len(queries) == GET_QUERIES[connection.vendor], "\n".join(queries)


def test_a_poll_of_a_call_awaiting_confirmation_reads_one_more_table(agent):
    make_calendar_spec()
    make_grant(subject=agent.subject, capability="calendar.write", operation_class="create")
    run = agent.run()
    call = agent.model_call(run["id"], tools=["calendar.create_event@1"])
    inv = agent.propose(call["id"], name="calendar.create_event@1",
                        arguments=json.dumps({"calendar_id": "team", "title": "Standup"})).json()
    agent.get(f"/api/v1/invocations/{inv['id']}")
    resp, queries = _counted(lambda: agent.get(f"/api/v1/invocations/{inv['id']}"))
    assert resp.json()["confirmation"]["state"] == "pending"
    assert len(queries) == GET_WITH_CONFIRMATION_QUERIES[connection.vendor], "\n".join(queries)


def test_an_unknown_or_foreign_invocation_is_still_404(agent, weather):
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        resp = agent.get(f"/api/v1/invocations/{bad}")
        assert resp.status_code == 404 and resp["Content-Type"].startswith("application/problem+json")
    resp = agent.propose("00000000-0000-0000-0000-000000000000", name="weather.get_forecast@1", arguments=FORECAST)
    assert resp.status_code == 404 and resp.json()["code"] == "not_found"


# --- the token cache ------------------------------------------------------------------------

def test_the_token_cache_holds_hashes_never_secrets(agent, weather):
    assert agent.get("/api/v1/runs/00000000-0000-0000-0000-000000000000").status_code == 404
    assert verified_tokens._entries, "a verified token is remembered"
    assert all(agent.token not in key and len(key) == 64 for key in verified_tokens._entries)
    assert agent.token not in repr(verified_tokens._entries)


def test_a_token_revoked_through_the_service_is_refused_at_once(agent, weather):
    run = agent.run()
    api_token_revoke(token=ApiToken.objects.get(subject=agent.subject))
    resp = agent.get(f"/api/v1/runs/{run['id']}")
    assert resp.status_code == 401 and resp["Content-Type"].startswith("application/problem+json")


def test_a_revocation_by_another_process_is_honoured_within_the_cache_time(agent, weather, settings, monkeypatch):
    settings.TOOLOPS_TOKEN_CACHE_SECONDS = 5
    clock = [1000.0]
    monkeypatch.setattr(spec_services.time, "monotonic", lambda: clock[0])
    run = agent.run()
    # Another process revokes: a plain UPDATE, this process's cache is not told.
    ApiToken.objects.filter(subject=agent.subject).update(revoked_at="2026-01-01T00:00:00Z")
    clock[0] += 4.9
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 200  # within the bound
    clock[0] += 0.2
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 401  # past it: read again, refused
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 401  # a refused token is never remembered


def test_a_deactivated_subject_is_refused_within_the_cache_time(agent, weather, settings, monkeypatch):
    settings.TOOLOPS_TOKEN_CACHE_SECONDS = 5
    clock = [1000.0]
    monkeypatch.setattr(spec_services.time, "monotonic", lambda: clock[0])
    run = agent.run()
    type(agent.subject).objects.filter(pk=agent.subject.pk).update(is_active=False)
    clock[0] += 5.0
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 401


def test_with_the_cache_off_every_request_reads_the_token(agent, weather, settings):
    settings.TOOLOPS_TOKEN_CACHE_SECONDS = 0
    run = agent.run()
    resp, queries = _counted(lambda: agent.get(f"/api/v1/runs/{run['id']}"))
    assert resp.status_code == 200 and any("specs_app_apitoken" in q for q in queries)
    ApiToken.objects.filter(subject=agent.subject).update(revoked_at="2026-01-01T00:00:00Z")
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 401


def test_each_request_gets_its_own_subject_instance(agent, weather):
    agent.run()
    first, second = api_token_verify(secret=agent.token), api_token_verify(secret=agent.token)
    assert first.pk == second.pk and first.subject.pk == second.subject.pk == agent.subject.pk
    assert first.subject is not second.subject and first.subject.tenant is not second.subject.tenant
    assert first.subject.tenant.slug == agent.subject.tenant.slug
