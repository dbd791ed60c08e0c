"""An upstream MCP server that trickles its answer to ``tools/call`` (one byte a second, however
the body is framed) holds the attempt no longer than its deadline, and the attempt ends as a
timeout: a read is read again, a write that was received is never sent again (its commit is
unknown and the lookup tool settles it).

What is real: ToolOps' executor and the official SDK client over TCP against
``hostile_mcp.HostileMCP`` (a threaded legacy upstream in this process); for the end-to-end
tests the API and a real Celery worker. Nothing is mocked."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from worker.executors import by_kind as executors
from invocations_app.models import Attempt
from tests.hostile_server import TRICKLE_SHAPES
from toolops.decisions.execution import Commit

from tests.upstream.test_execution import govern
from tests.upstream.test_executor_outcomes import _ctx
from tests.upstream.test_executor_review_fixes import _run, hostile_mcp, legacy, legacy_specs  # noqa: F401 - fixtures used here

pytestmark = pytest.mark.django_db

DEADLINE = 2.0
# The attempt ends within its deadline plus this; a trickle of the whole answer takes minutes.
MARGIN = 1.0
ARGUMENTS = {"notes.search": {"query": "t"}, "notes.create": {"title": "t", "body": "b"}}


@pytest.mark.parametrize("shape", TRICKLE_SHAPES)
@pytest.mark.parametrize("tool", ["notes.search", "notes.create"])
def test_a_trickling_answer_ends_at_the_attempt_deadline_as_a_timeout(legacy_specs, legacy, tool, shape):
    legacy.faults[tool] = f"trickle_{shape}"
    started = time.monotonic()
    out = _run(legacy_specs[tool], ARGUMENTS[tool], timeout=DEADLINE)
    took = time.monotonic() - started
    assert took < DEADLINE + MARGIN, took
    assert out.failure_class == "timeout_unknown" and out.error["code"] == "deadline_exceeded", out
    assert out.detail["phase"] == "send"
    assert out.commit == (Commit.NOT_APPLICABLE if tool == "notes.search" else Commit.UNKNOWN)
    assert len(legacy.calls()) == 1  # the call was received


def test_the_exchange_gets_what_is_left_of_the_attempts_deadline(legacy_specs, legacy):
    """The attempt's deadline is set when it begins, and what came before the exchange (resolving
    the upstream's name) spent part of it: the SDK exchange gets the rest, not the attempt
    timeout afresh. Before, this attempt ran for its whole 4 s timeout past a 1 s deadline."""
    spec = legacy_specs["notes.search"]
    legacy.faults["notes.search"] = "trickle_close"
    ctx = replace(_ctx(spec, timeout=4.0), deadline=time.monotonic() + 1.0)  # 3 s of it already spent
    started = time.monotonic()
    out = executors.execute(config=spec.executor, arguments={"query": "t"}, ctx=ctx)
    took = time.monotonic() - started
    assert took < 1.0 + MARGIN, took
    assert out.failure_class == "timeout_unknown", out


@pytest.fixture
def short_governed(legacy, monkeypatch, transactional_db, request):
    """The hostile upstream's tools with a short attempt timeout and one retry, through a worker."""
    monkeypatch.setenv("TOOLOPS_UPSTREAM_REFRESH_SECONDS", "3600")
    return govern(legacy, request.getfixturevalue("worker"), prefix="tr",
                  timeout_policy={"attempt_timeout_seconds": DEADLINE, "deadline_seconds": 30},
                  retry_policy={"initial_interval": 0.2, "backoff_coefficient": 1, "maximum_interval": 0.2,
                                "maximum_attempts": 2})


def _durations(invocation_id: str) -> list[float]:
    return [(a.ended_at - a.started_at).total_seconds()
            for a in Attempt.objects.filter(invocation_id=invocation_id).order_by("number")]


def test_a_trickled_read_is_recorded_as_a_timeout_and_read_again(short_governed):
    short_governed.notes.faults["notes.search"] = "trickle_http10"
    inv = short_governed.settled(short_governed.propose("notes.search", {"query": "x"})["id"], timeout=30)
    attempts = list(Attempt.objects.filter(invocation_id=inv["id"]).order_by("number"))
    assert inv["state"] == "FAILED_BEFORE_COMMIT" and inv["error"]["code"] == "deadline_exceeded", inv
    assert [a.failure_class for a in attempts] == ["timeout_unknown", "timeout_unknown"]
    assert [a.decision["reason"] for a in attempts] == ["timeout_reread", "max_attempts"]
    assert all(d < DEADLINE + MARGIN for d in _durations(inv["id"])), _durations(inv["id"])
    assert len(short_governed.notes.calls()) == 2


def test_a_trickled_write_is_never_sent_again_and_is_reconciled(short_governed):
    short_governed.notes.faults["notes.create"] = "trickle_close"
    inv_id = short_governed.propose("notes.create", {"title": "Pay rent", "body": "Dec"})["id"]
    done = short_governed.settled(inv_id, states=("OBSERVED", "FAILED_BEFORE_COMMIT"), timeout=30)
    assert done["state"] == "OBSERVED" and done["result"]["commit_status"] == "committed", done
    [attempt] = Attempt.objects.filter(invocation_id=inv_id)
    assert attempt.failure_class == "timeout_unknown" and attempt.decision["reason"] == "unknown_outcome_lookup_by_key"
    assert _durations(inv_id)[0] < DEADLINE + MARGIN, _durations(inv_id)
    creates = [c for c in short_governed.notes.calls() if c["params"]["name"] == "notes.create"]
    assert len(creates) == 1 and len(short_governed.notes.notes) == 1  # looked up, never re-sent
