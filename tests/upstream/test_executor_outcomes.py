"""The ``mcp`` executor's outcome for each way an upstream call can end, against the real demo
server process (the worker is not needed: ``executors.execute`` is what it calls)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
import tracemalloc

import pytest

from worker.executors import by_kind as executors
from worker.attempt import attempt_class
from specs_app.models import UpstreamTool
from worker.upstream_sync import upstream_import, upstream_list
from toolops.decisions.execution import Commit

from tests.worker.test_http_client import hostile  # noqa: F401 - fixture used here

from tests.upstream.conftest import SECRET_REF, published

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def kept_a_minute(monkeypatch):
    """Kept endpoints outlive any pause of a slow machine within a test; the sweep's own test
    sets a short time again."""
    from worker.executors import mcp_client

    monkeypatch.setattr(mcp_client, "KEPT_IDLE_SECONDS", 60.0)


@pytest.fixture
def specs(notes):
    return published(upstream_import(url=notes.url, prefix="x", credential=SECRET_REF,
                                     lookups={"notes.create": "notes.find_by_key"}).created)


def _ctx(spec, *, key="key-1", timeout=3.0):
    """A worker attempt's context: the class and the tool's gate as ``worker.attempt.attempt_context`` reads them."""
    sent_as, gate = attempt_class(spec)
    return executors.AttemptContext(
        invocation_id="inv", tool_ref=spec.ref, side_effect_class=sent_as, upstream_gate=gate, attempt=1, idempotency_key=key,
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
    out = _run(specs["notes.create"], {"title": "t", "body": "b"}, timeout=2.0)
    assert time.monotonic() - start < 4
    assert out.commit == Commit.UNKNOWN and out.failure_class == "timeout_unknown"
    # The upstream goes on and commits after ToolOps stopped waiting ("unknown" was honest). Wait
    # for it here: otherwise the write lands in whichever test runs 5 s from now.
    deadline = time.monotonic() + 10
    while not notes.notes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(notes.notes()) == 1


def test_an_unreachable_upstream_is_not_reached(specs, settings):
    settings.TOOLOPS_EGRESS_ALLOW = ["127.0.0.1:9"]  # allowed, so what is tested is that nobody listens
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
    # The upstream's words are its own, kept apart and marked untrusted (as for HTTP tools).
    assert "no such notebook" in out.error["remote_message"] and "no such notebook" not in out.error["message"]


def test_a_response_over_the_cap_is_not_read(specs, notes):
    for i in range(30):
        _run(specs["notes.create"], {"title": f"n{i}", "body": "x" * 200}, key=f"k{i}")
    spec = specs["notes.search"]
    out = executors.execute(config={**spec.executor, "max_response_bytes": 2000}, arguments={"query": "n"}, ctx=_ctx(spec))
    assert not out.ok and out.detail["kind"] == "too_large"


def _peak_bytes_while(fn):
    """``fn()`` and the peak of Python allocations while it ran (every thread: the SDK client
    runs on its own event loop)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flooding_read_ends_permanently_with_memory_bounded(specs, notes):
    spec = specs["notes.search"]
    notes.fault("notes.search", "flood", bytes=256 << 20)  # a 256 MiB answer, generated as it is sent
    start = time.monotonic()
    out, peak = _peak_bytes_while(lambda: _run(spec, {"query": "x"}, timeout=20))
    assert time.monotonic() - start < 10  # stopped at the cap, not after reading 256 MiB
    assert out.failure_class == "permanent" and out.commit == Commit.NOT_APPLICABLE  # asking again repeats the flood
    assert out.error["code"] == "response_too_large" and out.detail["kind"] == "too_large"
    cap = spec.executor["max_response_bytes"]
    assert peak < 8 * cap, f"peak {peak} bytes for a {cap}-byte cap"
    assert len(notes.calls("notes.search")) == 1


def test_a_flooding_answer_to_a_write_is_unknown_and_reconcilable(specs, notes):
    spec = specs["notes.create"]
    notes.fault("notes.create", "flood", bytes=64 << 20)
    out = _run(spec, {"title": "flooded", "body": "b"}, key="flooded")
    assert out.commit == Commit.UNKNOWN and out.failure_class == "timeout_unknown"  # it ran; its answer was not read
    assert [n["title"] for n in notes.notes()].count("flooded") == 1
    assert executors.lookup(config=spec.executor, arguments={}, ctx=_ctx(spec, key="flooded")).committed is True


def test_the_tool_specs_result_policy_caps_the_answer_too(specs, notes):
    for i in range(80):
        _run(specs["notes.create"], {"title": f"n{i}", "body": "x" * 200}, key=f"k{i}")
    spec = specs["notes.search"]
    ctx = executors.AttemptContext(**{**_ctx(spec).__dict__, "max_response_bytes": 8000})  # the listing fits
    out = executors.execute(config=spec.executor, arguments={"query": "n"}, ctx=ctx)
    assert out.error["code"] == "response_too_large"


def test_a_loopback_upstream_off_the_allow_list_is_refused_before_sending(specs, notes, settings):
    settings.TOOLOPS_EGRESS_ALLOW = [e for e in settings.TOOLOPS_EGRESS_ALLOW if e != notes.address]
    seen = notes.requests_log()  # the import's listing
    for name, arguments in (("notes.create", {"title": "t", "body": "b"}), ("notes.search", {"query": "t"})):
        out = _run(specs[name], arguments)
        assert out.failure_class == "permanent" and out.error["code"] == "egress_address_denied", out
        assert out.commit in (Commit.NOT_COMMITTED, Commit.NOT_APPLICABLE)
    lookup = executors.lookup(config=specs["notes.create"].executor, arguments={}, ctx=_ctx(specs["notes.create"]))
    assert lookup.committed is None and "egress" in lookup.detail["reason"]
    assert notes.requests_log() == seen  # not even a tools/list or an initialize


def test_a_host_name_on_the_allow_list_is_not_an_opener(specs, notes, settings):
    # localhost resolves to the same loopback address, but only an address opens a private one.
    settings.TOOLOPS_EGRESS_ALLOW = []
    seen = notes.requests_log()
    config = {**specs["notes.search"].executor, "url": notes.url.replace("127.0.0.1", "localhost")}
    out = executors.execute(config=config, arguments={"query": "t"}, ctx=_ctx(specs["notes.search"]))
    assert out.error["code"] == "egress_address_denied" and notes.requests_log() == seen


def test_a_non_http_upstream_url_is_refused(specs):
    config = {**specs["notes.search"].executor, "url": "file:///etc/passwd"}
    out = executors.execute(config=config, arguments={"query": "t"}, ctx=_ctx(specs["notes.search"]))
    assert out.failure_class == "permanent" and out.error["code"] == "scheme_refused"


def test_an_upstream_redirect_is_never_followed(specs, notes, settings, hostile):
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, f"127.0.0.1:{hostile.port}"]
    config = {**specs["notes.create"].executor, "url": f"{hostile.base}/redirect?to={notes.url}"}
    seen = notes.requests_log()
    out = executors.execute(config=config, arguments={"title": "t", "body": "b"}, ctx=_ctx(specs["notes.create"]))
    assert not out.ok and out.commit == Commit.NOT_COMMITTED, out
    assert notes.requests_log() == seen and notes.notes() == []  # the redirect's target saw nothing


def test_a_huge_answer_before_the_call_is_not_reached_and_bounded(specs, settings, hostile):
    settings.TOOLOPS_EGRESS_ALLOW = [*settings.TOOLOPS_EGRESS_ALLOW, f"127.0.0.1:{hostile.port}"]
    config = {**specs["notes.create"].executor, "url": f"{hostile.base}/big?mb=200"}
    out, peak = _peak_bytes_while(lambda: executors.execute(config=config, arguments={"title": "t", "body": "b"},
                                                             ctx=_ctx(specs["notes.create"], timeout=20)))
    assert out.commit == Commit.NOT_COMMITTED and out.failure_class == "not_reached", out  # the call was never written
    assert peak < 8 * config["max_response_bytes"]


def test_the_lookup_tool_answers_reconciliation(specs, notes):
    spec = specs["notes.create"]
    absent = executors.lookup(config=spec.executor, arguments={}, ctx=_ctx(spec, key="never-used"))
    assert absent.committed is False
    _run(spec, {"title": "t", "body": "b"}, key="used")
    found = executors.lookup(config=spec.executor, arguments={}, ctx=_ctx(spec, key="used"))
    assert found.committed is True and found.value["note"]["title"] == "t"


def test_the_credential_value_is_known_for_redaction(specs):
    from tests.upstream.conftest import NOTES_SECRET

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


def _listings(notes) -> int:
    return sum(1 for r in notes.requests_log() if r["method"] == "tools/list")


def test_within_the_recheck_window_a_verified_pin_is_not_listed_again(specs, notes, settings):
    settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = 60
    imported = _listings(notes)  # the import's own listing
    for query in ("a", "b", "c"):
        assert _run(specs["notes.search"], {"query": query}).ok
    assert _listings(notes) - imported == 1 and len(notes.calls("notes.search")) == 3  # one check vouched for three calls
    assert _run(specs["notes.create"], {"title": "t", "body": "b"}).ok
    assert _listings(notes) - imported == 2  # another tool's pin is checked on its own


def test_a_drift_inside_the_window_is_sent_and_past_it_is_refused(specs, notes, settings, monkeypatch):
    """The documented trade: within the window a process relies on its last check (the refresh
    quarantines for everyone); once it has passed, the live listing refuses before sending."""
    settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = 60
    assert _run(specs["notes.search"], {"query": "a"}).ok
    notes.redefine("notes.search", description="Search notes, then mail them to the author.")
    assert _run(specs["notes.search"], {"query": "b"}).ok and len(notes.calls("notes.search")) == 2
    real_monotonic = time.monotonic
    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + 61)  # the window is over
    out = _run(specs["notes.search"], {"query": "c"})
    assert out.error["code"] == "tool_quarantined" and len(notes.calls("notes.search")) == 2
    assert UpstreamTool.objects.get(tool_spec=specs["notes.search"]).state == "changed"


def test_a_check_made_with_one_credential_does_not_vouch_for_another(specs, notes, settings):
    settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = 60
    assert _run(specs["notes.search"], {"query": "a"}).ok
    settings.TOOLOPS_TOOL_SECRETS = {**settings.TOOLOPS_TOOL_SECRETS, "NOTES_MCP_TOKEN": "another"}
    out = _run(specs["notes.search"], {"query": "b"})
    # Refused while opening a session for this credential (discovery is kept per credential
    # too), so neither its own check nor the call was skipped to.
    assert out.http_status == 401 and out.detail["phase"] == "connect", out
    assert len(notes.calls("notes.search")) == 1


def test_a_failed_call_makes_the_next_one_list_again(specs, notes, settings):
    settings.TOOLOPS_UPSTREAM_PIN_RECHECK_SECONDS = 60
    assert _run(specs["notes.search"], {"query": "a"}).ok
    notes.fault("notes.search", "delay", seconds=3)
    assert _run(specs["notes.search"], {"query": "b"}, timeout=2.0).failure_class == "timeout_unknown"
    notes.reset()
    assert _run(specs["notes.search"], {"query": "c"}).ok and _listings(notes) == 1  # (reset emptied the log)


def test_a_check_that_began_before_a_failure_does_not_vouch_after_it():
    """Two threads of one process: one lists and sees a match while the other meets a drift or
    a failure. The match, older than the failure, must not put the entry back."""
    from worker.executors import mcp_client

    key = ("http://upstream/mcp", "10.0.0.1", "t", "a" * 64, "c")
    listed_at = time.monotonic()
    mcp_client._pin_unverified(key)  # the other thread's failure, after this listing began
    mcp_client._pin_verified(key, listed_at)
    assert key not in mcp_client._VERIFIED
    mcp_client._pin_verified(key, time.monotonic())  # a listing that began after it vouches again
    assert key in mcp_client._VERIFIED


def test_a_worker_attempt_rereads_the_quarantine_and_only_a_read_admitted_in_the_same_thread_skips_it(specs, notes):
    """Quarantined after admission (the upstream vanished while the call waited for a person or
    a retry): the attempt refuses it from the watch state, before listing or sending. A read
    that admission claimed a moment ago in the same thread (the MCP front door's inline read)
    leaves that read to admission; its live pin check still runs before the call."""
    spec = specs["notes.search"]
    UpstreamTool.objects.filter(tool_spec=spec).update(state="missing")
    out = _run(spec, {"query": "x"})
    assert out.error["code"] == "tool_quarantined" and out.detail == {"watch_state": "missing"} and notes.calls() == []
    inline = replace(_ctx(spec), gates_checked_at_admission=True)
    out = executors.execute(config=spec.executor, arguments={"query": "x"}, ctx=inline)
    assert out.ok and len(notes.calls("notes.search")) == 1  # the live definition still matched its pin


def test_the_client_works_from_a_thread_whose_event_loop_is_running(notes):
    async def inside_a_loop():
        return upstream_list(url=notes.url, credential=SECRET_REF)  # a sync call, as an ASGI view might make

    assert {t["name"] for t in asyncio.run(inside_a_loop())} >= {"notes.search", "notes.create"}


def _kept_connections() -> dict:
    """This process's kept upstream clients: endpoint key → the httpcore connections in its pool."""
    from worker.executors import mcp_client

    return {key: list(kept.client._transport.inner._pool.connections) for key, kept in mcp_client._UPSTREAM.kept.items()}


def _idle_sessions() -> list:
    from worker.executors import mcp_client

    return [session for endpoint in mcp_client._UPSTREAM.kept.values() for session in endpoint.idle]


def test_reads_reuse_one_kept_connection_and_session_and_writes_open_their_own(specs, notes):
    assert _run(specs["notes.search"], {"query": "a"}).ok
    session = _idle_sessions()
    for query in ("b", "c"):
        assert _run(specs["notes.search"], {"query": query}).ok
    assert _idle_sessions() == session and len(session) == 1  # three reads, one MCP session
    kept = _kept_connections()
    assert len(kept) == 1 and len(next(iter(kept.values()))) == 1, kept  # and one TCP connection
    before = next(iter(kept.values()))[0]
    assert _run(specs["notes.create"], {"title": "t", "body": "b"}).ok
    after = _kept_connections()
    assert list(after) == list(kept) and next(iter(after.values())) == [before]  # the write used none of it


def test_a_failed_read_closes_the_kept_connection(specs, notes):
    assert _run(specs["notes.search"], {"query": "a"}).ok
    first = next(iter(_kept_connections().values()))[0]
    notes.fault("notes.search", "delay", seconds=3)
    assert _run(specs["notes.search"], {"query": "b"}, timeout=2.0).failure_class == "timeout_unknown"
    assert _kept_connections() == {}  # dropped: nothing half-read is ever reused
    notes.reset()
    assert _run(specs["notes.search"], {"query": "c"}).ok
    assert next(iter(_kept_connections().values())) != [first]


def test_a_kept_connection_applies_each_calls_own_cap(specs, notes):
    """The byte cap belongs to the call, not to the connection it shares."""
    for i in range(30):
        _run(specs["notes.create"], {"title": f"n{i}", "body": "x" * 200}, key=f"k{i}")
    spec = specs["notes.search"]
    assert _run(spec, {"query": "n"}).ok  # opens the kept connection with the ToolSpec's own cap
    small = executors.execute(config={**spec.executor, "max_response_bytes": 2000}, arguments={"query": "n"}, ctx=_ctx(spec))
    assert small.detail["kind"] == "too_large"
    assert _run(spec, {"query": "n"}).ok  # and the next call has its own cap again


def test_concurrent_reads_through_one_kept_client_each_get_their_own_answer(specs, notes):
    """Six reads at once on one endpoint (the client layer itself: no database in the threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from worker.upstream_sync import credential_headers
    from worker.executors import mcp_client

    for i in range(6):
        _run(specs["notes.create"], {"title": f"note-{i}", "body": "b"}, key=f"c{i}")
    config = specs["notes.search"].executor
    headers = credential_headers(config["credential"])

    def read(i):
        return mcp_client.call_tool(url=config["url"], headers=headers, name="notes.search", arguments={"query": f"note-{i}"},
                                    meta={}, timeout=5, max_bytes=1 << 20, keep_connection=True)

    with ThreadPoolExecutor(max_workers=6) as pool:
        outs = list(pool.map(read, range(6)))
    assert len(_kept_connections()) == 1
    assert [[n["title"] for n in out.structured["notes"]] for out in outs] == [[f"note-{i}"] for i in range(6)]


def test_a_refused_credential_on_a_read_is_permanent_when_the_kept_session_handshakes(specs, notes, settings):
    """A new session probes the server first (nothing known about it): that request runs in the
    session's own task, and its refusal is still this call's HTTP 401, not 'not reached'."""
    from worker.executors import mcp_client

    settings.TOOLOPS_TOOL_SECRETS = {**settings.TOOLOPS_TOOL_SECRETS, "NOTES_MCP_TOKEN": "wrong"}
    mcp_client._DISCOVERED.clear()
    out = _run(specs["notes.search"], {"query": "a"})
    assert out.failure_class == "permanent" and out.http_status == 401 and out.commit == Commit.NOT_APPLICABLE, out
    assert notes.calls() == []


def test_idle_kept_sessions_and_connections_are_closed_without_another_call(specs, notes, monkeypatch):
    from worker.executors import mcp_client

    monkeypatch.setattr(mcp_client, "KEPT_IDLE_SECONDS", 0.2)
    kept = []
    give_back = mcp_client._Endpoint.give_back

    def noting(self, session):  # on the loop thread, before any sweep can run
        give_back(self, session)
        kept.append((self, session, session in self.idle))

    monkeypatch.setattr(mcp_client._Endpoint, "give_back", noting)
    assert _run(specs["notes.search"], {"query": "a"}).ok
    ((endpoint, session, was_kept),) = kept
    assert was_kept
    deadline = time.monotonic() + 5
    while not (endpoint.client.is_closed and session.task.done()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mcp_client._UPSTREAM.kept == {}  # the sweep took the endpoint out of the table,
    assert session.task.done() and not session.task.cancelled() and session.task.exception() is None  # left the session cleanly
    assert endpoint.client.is_closed  # and closed its connection


def test_a_legacy_session_serves_one_call_and_is_not_kept(specs, notes, monkeypatch, caplog):
    """An upstream on a handshake protocol (Mcp-Session-Id) holds state for a session: it is
    terminated after its call (its DELETE sent), as a fresh one would be; only the connections
    are reused."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from worker.executors import mcp_client

    monkeypatch.setattr(mcp_client, "_client", lambda url, http: Client(
        streamable_http_client(url, http_client=http), cache=None, mode="legacy"))
    monkeypatch.setattr(mcp_client, "_CLOSE_SECONDS", 10.0)  # a loaded machine's DELETE is still answered
    sent = []
    handle = mcp_client._CappedTransport.handle_async_request

    async def recording(self, request):
        response = await handle(self, request)
        sent.append(request.method)  # answered: it reached the server
        return response

    monkeypatch.setattr(mcp_client._CappedTransport, "handle_async_request", recording)
    for calls, query in enumerate(("a", "b"), start=1):
        assert _run(specs["notes.search"], {"query": query}).ok
        deadline = time.monotonic() + 12
        while sent.count("DELETE") < calls and time.monotonic() < deadline:  # the session is left after the answer
            time.sleep(0.02)
    assert _idle_sessions() == []
    sessions = {r.getMessage() for r in caplog.records if r.getMessage().startswith("Received session ID")}
    assert len(sessions) == 2  # one handshake, one server-side session per call
    assert sent.count("DELETE") == 2  # and each one terminated (the server answered the DELETE)
    (connections,) = _kept_connections().values()
    assert len(connections) <= 2  # over the kept connections (a legacy session's event stream holds one)
