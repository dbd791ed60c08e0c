"""The ``mcp`` executor's outcome for each way an upstream call can end, against the real demo
server process (the worker is not needed: ``executors.execute`` is what it calls)."""
from __future__ import annotations

import asyncio
import time

import pytest

from invocations_app import executors
from specs_app.models import UpstreamTool
from specs_app.upstream import upstream_import, upstream_list
from toolops.runtime.execution import Commit

from .conftest import SECRET_REF, published

pytestmark = pytest.mark.django_db


@pytest.fixture
def specs(notes):
    return published(upstream_import(url=notes.url, prefix="x", credential=SECRET_REF,
                                     lookups={"notes.create": "notes.find_by_key"}).created)


def _ctx(spec, *, key="key-1", timeout=3.0):
    return executors.AttemptContext(
        invocation_id="inv", tool_ref=spec.ref, side_effect_class=spec.side_effect_class, attempt=1, idempotency_key=key,
        remote_key=f"tk1-{key}",  # what execution derives per tenant; only its presence matters here
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", timeout_seconds=timeout)


def _run(spec, arguments, **ctx):
    return executors.execute(config=spec.executor, arguments=arguments, ctx=_ctx(spec, **ctx))


def test_a_write_commits_with_the_value(specs, notes):
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.ok and out.commit == Commit.COMMITTED and out.value["note"]["title"] == "t"


def test_a_dropped_answer_after_sending_a_write_is_unknown(specs, notes):
    notes.fault("notes.create", "commit_then_drop")
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.commit == Commit.UNKNOWN and out.failure_class == "timeout_unknown"
    assert len(notes.notes()) == 1  # it did commit: "unknown" was the honest answer


def test_a_write_past_its_deadline_is_unknown_and_the_deadline_holds(specs, notes):
    notes.fault("notes.create", "delay", seconds=5)
    start = time.monotonic()
    out = _run(specs["notes.create"], {"title": "t", "body": "b"}, timeout=1.0)
    assert time.monotonic() - start < 3
    assert out.commit == Commit.UNKNOWN and out.failure_class == "timeout_unknown"


def test_an_unreachable_upstream_is_not_reached(specs):
    config = {**specs["notes.create"].executor, "url": "http://127.0.0.1:9/mcp"}
    out = executors.execute(config=config, arguments={"title": "t", "body": "b"}, ctx=_ctx(specs["notes.create"]))
    assert out.commit == Commit.NOT_COMMITTED and out.failure_class == "not_reached"


def test_a_refused_credential_is_permanent_and_not_committed(specs, notes, settings):
    settings.TOOLOPS_TOOL_SECRETS = {**settings.TOOLOPS_TOOL_SECRETS, "NOTES_MCP_TOKEN": "wrong"}
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.commit == Commit.NOT_COMMITTED and out.failure_class == "permanent" and out.http_status == 401
    assert notes.calls() == []


def test_is_error_is_a_business_rejection(specs, notes):
    notes.fault("notes.create", "error", message="no such notebook")
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.failure_class == "business_rejected" and out.commit == Commit.NOT_COMMITTED
    assert "no such notebook" in out.error["message"]


def test_a_response_over_the_cap_is_not_read(specs, notes):
    for i in range(30):
        _run(specs["notes.create"], {"title": f"n{i}", "body": "x" * 200}, key=f"k{i}")
    spec = specs["notes.search"]
    out = executors.execute(config={**spec.executor, "max_response_bytes": 2000}, arguments={"query": "n"}, ctx=_ctx(spec))
    assert not out.ok and out.detail["kind"] == "too_large"


def test_the_lookup_tool_answers_reconciliation(specs, notes):
    spec = specs["notes.create"]
    absent = executors.lookup(config=spec.executor, arguments={}, ctx=_ctx(spec, key="never-used"))
    assert absent.committed is False
    _run(spec, {"title": "t", "body": "b"}, key="used")
    found = executors.lookup(config=spec.executor, arguments={}, ctx=_ctx(spec, key="used"))
    assert found.committed is True and found.value["note"]["title"] == "t"


def test_the_credential_value_is_known_for_redaction(specs):
    from .conftest import NOTES_SECRET

    # Every configured credential is redacted (a hostile remote may echo any it saw), this one too.
    assert NOTES_SECRET in executors.secret_values()


def test_a_missing_credential_refuses_before_sending(specs, notes, settings):
    settings.TOOLOPS_TOOL_SECRETS = {k: v for k, v in settings.TOOLOPS_TOOL_SECRETS.items() if k != "NOTES_MCP_TOKEN"}
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.commit == Commit.NOT_COMMITTED and out.failure_class == "permanent"
    assert out.error["code"] == "executor_misconfigured" and notes.calls() == []


def test_a_live_drift_is_refused_and_quarantined_at_once(specs, notes):
    notes.redefine("notes.create", description="Create a note and share it publicly.")
    out = _run(specs["notes.create"], {"title": "t", "body": "b"})
    assert out.error["code"] == "tool_quarantined" and out.commit == Commit.NOT_COMMITTED and notes.calls() == []
    assert UpstreamTool.objects.get(tool_spec=specs["notes.create"]).state == "changed"


def test_the_client_works_from_a_thread_whose_event_loop_is_running(notes):
    async def inside_a_loop():
        return upstream_list(url=notes.url, credential=SECRET_REF)  # a sync call, as an ASGI view might make

    assert {t["name"] for t in asyncio.run(inside_a_loop())} >= {"notes.search", "notes.create"}
