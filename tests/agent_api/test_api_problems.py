"""Every /api/ answer is JSON: unknown paths 404, oversized bodies 413, outages 503 with
Retry-After, crashes 500 with the trace id — never an HTML page or a login redirect.

Outages are real: a private redis-server that the test stops (the Celery broker and the shared
cache pointed at it), and a gunicorn process whose database server is a closed port.
"""
from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import sys
import time
from datetime import timedelta
from unittest import mock

import pytest
import redis
import requests
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from invocations_app import selectors
from invocations_app.dispatch import ready_invocations_sweep
from mcp_server.calls import McpRequest, mcp_tool_call
from invocations_app.models import Invocation
from devtools.demo import load_demo
from specs_app.models import Subject
from tests.conftest import REPO_ROOT, require_postgres
from tests.servers import broker_on_private_redis, free_port, gunicorn_server, private_postgres, private_redis  # noqa: F401 - a fixture

GOOD_ARGS = '{"city": "Paris", "date": "2026-07-20"}'


def assert_problem(resp, status: int, code: str) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.content[:400])
    assert resp["Content-Type"] == "application/problem+json"
    body = json.loads(resp.content)
    assert (body["status"], body["code"]) == (status, code)
    assert body["type"].endswith("/" + code) and body["title"] and body["detail"]
    return body


# --------------------------------------------------------------------------- paths and bodies


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
@pytest.mark.parametrize("path", ["/api/v1/nope", "/api/v1/runs/x/y/z", "/api/v2/runs", "/api/", "/api/v1/runs/"])
def test_an_unknown_api_path_is_a_404_problem_not_a_login_redirect(client, method, path):
    assert_problem(getattr(client, method)(path), 404, "not_found")


@pytest.mark.django_db
def test_an_unknown_api_path_is_a_404_problem_for_an_authenticated_agent_too(agent):
    assert_problem(agent.get("/api/v1/tool"), 404, "not_found")


@pytest.mark.django_db
def test_a_wrong_method_is_a_405_problem(agent):
    assert_problem(agent.client.delete("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {agent.token}"), 405, "method_not_allowed")


@pytest.mark.django_db
def test_a_10_mb_body_is_a_413_problem(agent):
    run = agent.run()
    call = agent.model_call(run["id"])["id"]
    body = json.dumps({"proposal_id": "big", "name": "weather.get_forecast@1", "arguments": "x" * (10 * 1024 * 1024)})
    resp = agent.client.post(f"/api/v1/model-calls/{call}/proposals", body, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {agent.token}")
    assert_problem(resp, 413, "payload_too_large")


@pytest.mark.django_db
def test_a_form_encoded_body_over_the_limit_is_a_413_problem_too(client):
    """Django itself raises RequestDataTooBig (request.POST of a form body): still JSON, 413."""
    resp = client.post("/api/v1/runs", {"a": "x" * (django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert resp.status_code in (401, 413), resp.status_code  # authentication may answer first
    assert resp["Content-Type"] == "application/problem+json"


@pytest.mark.django_db
def test_an_unexpected_error_is_a_500_problem_with_the_trace_id(agent, caplog):
    # A genuine crash cannot be produced on purpose without a bug: the selector is patched to raise.
    agent.client.raise_request_exception = False
    trace = "0af7651916cd43dd8448eb211c80319c"
    with mock.patch.object(selectors, "run_get", side_effect=RuntimeError("boom")):
        resp = agent.get("/api/v1/runs/00000000-0000-0000-0000-000000000000",
                         headers={"HTTP_TRACEPARENT": f"00-{trace}-b7ad6b7169203331-01"})
    body = assert_problem(resp, 500, "internal_error")
    assert body["trace_id"] == trace and trace in resp["traceparent"]
    assert "boom" not in body["detail"]  # the message stays in the log
    assert any("unhandled error" in r.getMessage() and r.exc_info for r in caplog.records)


@pytest.mark.django_db
def test_a_crash_without_a_traceparent_still_names_the_trace_it_answers_with(agent):
    agent.client.raise_request_exception = False
    with mock.patch.object(selectors, "run_get", side_effect=RuntimeError("boom")):
        resp = agent.get("/api/v1/runs/00000000-0000-0000-0000-000000000000")
    body = assert_problem(resp, 500, "internal_error")
    assert len(body["trace_id"]) == 32 and body["trace_id"] in resp["traceparent"]


@pytest.mark.django_db
def test_the_schema_and_the_docs_keep_their_own_content_types(client):
    assert client.get("/api/schema/").status_code == 200
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and docs["Content-Type"].startswith("text/html")


# --------------------------------------------------------------------------- broker outage


@pytest.mark.django_db(transaction=True)
def test_a_broker_outage_still_admits_201_queued_and_the_sweep_sends_the_call_once_it_is_back(
        agent, weather, broker_on_private_redis, settings):
    """Admission never depends on the broker: the call is committed and answered 201 (queued);
    its message, which could not be published, is sent by the outbox sweep after the outage."""
    run = agent.run()
    call = agent.model_call(run["id"])["id"]

    broker_on_private_redis.stop()
    agent.client.raise_request_exception = False
    during = agent.propose(call, name="weather.get_forecast@1", arguments=GOOD_ARGS, proposal_id="during")
    assert during.status_code == 201, during.content[:300]
    assert during.json()["state"] == "AUTHORIZED"  # recorded, waiting for a worker
    # Reads need no broker; the rate-limit cache (also down) fails open.
    assert agent.get(f"/api/v1/invocations/{during.json()['id']}").status_code == 200
    assert agent.get(f"/api/v1/runs/{run['id']}").status_code == 200
    period = timedelta(seconds=settings.TOOLOPS_SWEEP_SECONDS)
    later = timezone.now() + period
    assert ready_invocations_sweep(now=later) == 0  # still down: nothing sent, the call keeps waiting

    broker_on_private_redis.start()
    queue = redis.Redis.from_url(broker_on_private_redis.url)
    assert queue.llen(settings.CELERY_TASK_DEFAULT_QUEUE) == 0  # the broker came back empty
    assert ready_invocations_sweep(now=later + period) == 1
    assert queue.llen(settings.CELERY_TASK_DEFAULT_QUEUE) == 1
    assert ready_invocations_sweep(now=later + period) == 0  # sent once per period, not every beat
    after = agent.propose(call, name="weather.get_forecast@1", arguments=GOOD_ARGS, proposal_id="after")
    assert after.status_code == 201 and queue.llen(settings.CELERY_TASK_DEFAULT_QUEUE) == 2


@pytest.mark.django_db(transaction=True)
def test_an_mcp_tools_call_during_a_broker_outage_is_admitted_and_waits_for_the_sweep(broker_on_private_redis, settings):
    """The MCP front door admits through the same service: with the broker down the call is
    recorded and the client told to wait, not answered with an error. A read the MCP process
    runs itself (inline reads, the default) needs no broker at all: it is answered."""
    load_demo(token="tko_mcp_outage_token")
    agent = Subject.objects.get(name="demo-agent")
    broker_on_private_redis.stop()
    settings.TOOLOPS_MCP_INLINE_READS = False
    request = McpRequest(subject=agent, session_id="s-outage", request_id=1, protocol_version="2025-11-25", meta={})
    outcome = mcp_tool_call(request=request, name="weather-get_forecast_v1", arguments_bytes=GOOD_ARGS.encode())
    assert outcome.result is None and outcome.wait_for is not None
    assert Invocation.objects.get(pk=outcome.wait_for).state == "AUTHORIZED"
    settings.TOOLOPS_MCP_INLINE_READS = True
    request = McpRequest(subject=agent, session_id="s-outage", request_id=2, protocol_version="2025-11-25", meta={})
    inline = mcp_tool_call(request=request, name="weather-get_forecast_v1", arguments_bytes=GOOD_ARGS.encode())
    assert inline.result is not None and inline.result["isError"] is False
    assert Invocation.objects.get(pk=inline.invocation_id).state == "OBSERVED"


# --------------------------------------------------------------------------- database outage


def test_a_database_outage_answers_503_through_gunicorn():
    """The production web process with its database server gone (a closed port): the pool
    times out and the API answers 503 problem+json with Retry-After, unknown paths still 404."""
    dead = f"postgres://postgres@127.0.0.1:{free_port()}/toolops_gone"
    env = {"DATABASE_URL": dead, "DB_POOL_TIMEOUT": "2", "DB_POOL_MIN_SIZE": "1", "DEBUG": "0"}
    with gunicorn_server(env) as server:
        headers = {"Authorization": "Bearer tko_whatever", "Content-Type": "application/json"}
        for method, path in [("post", "/api/v1/runs"), ("get", "/api/v1/tools"), ("get", "/api/v1/invocations/x")]:
            resp = getattr(requests, method)(server.url + path, headers=headers, data="{}", timeout=30)
            assert resp.status_code == 503, (path, resp.status_code, resp.text[:300], server.output()[-2000:])
            assert resp.headers["Content-Type"] == "application/problem+json"
            assert resp.json()["code"] == "service_unavailable" and int(resp.headers["Retry-After"]) > 0
        nope = requests.get(server.url + "/api/v1/nope", timeout=10)
        assert nope.status_code == 404 and nope.json()["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_the_web_pool_replaces_a_connection_the_database_killed(agent):
    """A restarted database leaves dead connections in the pool; the pool's check drops them."""
    require_postgres()
    assert connection.pool is not None
    agent.run()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
    connection.close()  # back to the pool, as after a request
    with connection.pool.connection() as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])  # returns once it has ended
    for _ in range(3):  # every pooled connection may be the dead one
        assert agent.get("/api/v1/tools").status_code == 200


def test_a_database_restart_answers_503_during_and_201_after_through_gunicorn():
    """A private PostgreSQL behind gunicorn is stopped and started again: while it is down
    proposals answer 503 problem+json (never a 500, never HTML); once it is back the pool
    reconnects (after its backoff: a 503 meanwhile) and replaces the dead connections by its
    health check, and proposals answer 201 again — no restart of the web process."""
    with private_postgres() as pg:
        pg.createdb("toolops_restart")
        env = {**os.environ, "DATABASE_URL": pg.url("toolops_restart"), "DB_POOL_TIMEOUT": "3"}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO_ROOT, env=env, check=True)
        token = "tko_restart_" + secrets.token_urlsafe(12)
        subprocess.run([sys.executable, "manage.py", "load_demo", "--token", token], cwd=REPO_ROOT, env=env,
                       check=True, capture_output=True)
        with gunicorn_server({"DATABASE_URL": pg.url("toolops_restart"), "DB_POOL_TIMEOUT": "3"}, threads=4) as server:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {token}"
            run = session.post(server.url + "/api/v1/runs", json={}, timeout=30).json()
            call = session.post(f"{server.url}/api/v1/runs/{run['id']}/model-calls", json={}, timeout=30).json()
            proposals = f"{server.url}/api/v1/model-calls/{call['id']}/proposals"
            ids = itertools.count()

            def propose() -> requests.Response:
                return session.post(proposals, json={"proposal_id": f"p{next(ids)}", "name": "weather.get_forecast@1",
                                                     "arguments": GOOD_ARGS}, timeout=30)

            assert propose().status_code == 201
            pg.stop()
            for _ in range(3):
                down = propose()
                assert down.status_code == 503, (down.status_code, down.text[:300])
                assert down.headers["Content-Type"] == "application/problem+json" and "Retry-After" in down.headers
            pg.start()
            statuses, deadline = [], time.monotonic() + 30
            while statuses[-3:] != [201] * 3 and time.monotonic() < deadline:
                statuses.append(propose().status_code)
            assert statuses[-3:] == [201] * 3 and set(statuses) <= {201, 503}, (statuses, server.output()[-2000:])
