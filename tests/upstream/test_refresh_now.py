"""The console's "Refresh these servers' definitions now": queued for a worker, never run inside the
admin's request (listing one server may take up to 10 s).

Real parts: the demo notes MCP server in its own process; a private redis-server as the broker
(so one test can stop it); for the end-to-end case, a real Celery worker on the test database.
"""
from __future__ import annotations

import base64
import json

import pytest
import redis
from django.contrib.messages import get_messages
from django.urls import reverse

from specs_app.models import UpstreamTool
from worker.tasks import upstream_refresh_task
from worker.upstream_sync import REFRESH_TASK, upstream_import
from tests.integration.conftest import demo_services, module_worker, wait_for, worker, worker_env  # noqa: F401 - fixtures
from tests.servers import broker_on_private_redis  # noqa: F401 - a fixture

from tests.upstream.conftest import SECRET_REF, published

CHANGELIST = "admin:specs_app_upstreamtool_changelist"


def _refresh_now(admin_client, rows) -> list[str]:
    resp = admin_client.post(reverse(CHANGELIST), {"action": "refresh_now", "_selected_action": [r.pk for r in rows]})
    assert resp.status_code == 302, resp.content[:500]
    return [str(m) for m in get_messages(resp.wsgi_request)]


def _queued(server, queue: str) -> list[dict]:
    """The messages waiting in the broker's queue, as (task name, kwargs)."""
    out = []
    for raw in redis.Redis.from_url(server.url).lrange(queue, 0, -1):
        message = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        out.append({"task": message["headers"]["task"], "args": args, "kwargs": kwargs})
    return out


@pytest.mark.django_db
def test_the_action_queues_a_refresh_of_the_chosen_servers_and_lists_nothing_itself(
        notes, admin_client, broker_on_private_redis, settings):
    rows = [s.upstream for s in upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created]
    notes.redefine("notes.search", description="changed under our feet")
    before = len(notes.requests_log())
    said = _refresh_now(admin_client, rows)
    assert any("queued" in m and notes.url in m for m in said), said
    assert len(notes.requests_log()) == before  # the request itself never listed the server
    assert set(UpstreamTool.objects.values_list("state", flat=True)) == {"pinned"}
    assert _queued(broker_on_private_redis, settings.CELERY_TASK_DEFAULT_QUEUE) == [
        {"task": REFRESH_TASK, "args": [], "kwargs": {"server_urls": [notes.url]}}]  # one message, one server once
    # What a worker then runs: only the named servers, quarantining the change.
    assert upstream_refresh_task(server_urls=[notes.url]) == {"pinned": 3, "changed": 1, "missing": 0, "unreachable": 0}
    assert UpstreamTool.objects.get(upstream_name="notes.search").state == "changed"


@pytest.mark.django_db
def test_a_broker_outage_says_nothing_was_queued(notes, admin_client, broker_on_private_redis):
    rows = [s.upstream for s in upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created]
    broker_on_private_redis.stop()
    said = _refresh_now(admin_client, rows)
    assert any("task queue is unreachable" in m and "nothing was queued" in m for m in said), said


def test_a_worker_runs_the_queued_refresh(transactional_db, notes, admin_client, monkeypatch, request):
    monkeypatch.setenv("TOOLOPS_UPSTREAM_REFRESH_SECONDS", "3600")  # the worker's beat stays out of it
    request.getfixturevalue("worker")  # started after that: only the action refreshes here
    specs = published(upstream_import(url=notes.url, prefix="team", credential=SECRET_REF).created)
    notes.redefine("notes.delete", remove=True)
    said = _refresh_now(admin_client, [UpstreamTool.objects.get(tool_spec=specs["notes.delete"])])
    assert any("queued" in m for m in said), said
    wait_for(lambda: UpstreamTool.objects.get(tool_spec=specs["notes.delete"]).state == "missing", timeout=30)
