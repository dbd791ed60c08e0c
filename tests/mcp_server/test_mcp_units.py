"""The MCP front door's domain glue, called directly (database, no servers)."""
from __future__ import annotations

import json
from worker.claim import claim_with_admission
from datetime import timedelta

import pytest
from django.core import signing
from django.utils import timezone
from mcp.shared.exceptions import MCPError
from mcp_types import HEADER_MISMATCH

from mcp_server.calls import McpRequest, _idempotency_key, mcp_status, mcp_tool_call
from mcp_server.elicitation import SALT, confirmation_state_redeem, confirmation_state_seal
from mcp_server.runs import RunRule, mcp_run_get_or_open
from invocations_app.models import Invocation, ModelCall, Proposal, Run
from invocations_app.admission import proposal_admit
from invocations_app.runs import model_call_create
from devtools.demo import load_demo
from specs_app.models import Grant, Subject
from specs_app.selectors import toolspecs_granted_to_subject
from tests.builders import make_subject
from toolops.errors import ApplicationError

pytestmark = pytest.mark.django_db

CALENDAR_ARGS = b'{"calendar_id": "primary", "title": "x", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}'


@pytest.fixture
def agent() -> Subject:
    load_demo(token="tko_units_token")
    return Subject.objects.get(name="demo-agent")


def _request(subject, request_id=1, **meta) -> McpRequest:
    return McpRequest(subject=subject, session_id="s-1", request_id=request_id, protocol_version="2025-11-25", meta=meta)


def test_it_lists_only_tools_with_a_live_grant_for_every_required_capability(agent):
    names = lambda: [s.name for s in toolspecs_granted_to_subject(subject=agent)]  # noqa: E731
    assert names() == ["calendar.create_event", "payments.transfer", "weather.get_forecast", "web.fetch"]
    Grant.objects.filter(subject=agent, capability__name="payments.transfer").update(revoked_at=timezone.now())
    Grant.objects.filter(subject=agent, capability__name="web.read").update(expires_at=timezone.now() - timedelta(seconds=1))
    Grant.objects.filter(subject=agent, capability__name="weather.read").update(tool_refs=["weather.get_forecast@9"])
    assert names() == ["calendar.create_event"]
    assert toolspecs_granted_to_subject(subject=make_subject()) == []


def test_it_opens_one_run_per_key_and_refuses_another_subjects_run(agent):
    rule = RunRule("day", "day:2026-07-20")
    first = mcp_run_get_or_open(subject=agent, rule=rule, trace=None)
    assert mcp_run_get_or_open(subject=agent, rule=rule, trace=None).pk == first.pk
    assert Run.objects.filter(mcp_key="day:2026-07-20").count() == 1
    with pytest.raises(ApplicationError) as refused:
        mcp_run_get_or_open(subject=make_subject(), rule=RunRule("meta", str(first.pk)), trace=None)
    assert refused.value.code == "unknown_run"


def test_the_derived_key_is_run_request_and_digest_and_reads_have_none(agent):
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-1"), trace=None)

    def key_of(request, name, raw):
        outcome = mcp_tool_call(request=request, name=name, arguments_bytes=raw, arguments=json.loads(raw))
        return Invocation.objects.get(pk=outcome.invocation_id).idempotency_key

    meta = {"dev.toolops/run": str(run.pk)}
    key = key_of(_request(agent, 7, **meta), "calendar-create_event_v1", CALENDAR_ARGS)
    assert key.startswith(f"mcp:{run.pk}:") and len(key) <= 255
    spaced = CALENDAR_ARGS.replace(b", ", b" ,  ")  # same meaning, other bytes: same digest, same key
    assert key_of(_request(agent, 7, **meta), "calendar-create_event_v1", spaced) == key
    assert key_of(_request(agent, 8, **meta), "calendar-create_event_v1", CALENDAR_ARGS) != key
    other = CALENDAR_ARGS.replace(b'"x"', b'"y"')
    assert key_of(_request(agent, 9, **meta), "calendar-create_event_v1", other).split(":")[-1] != key.split(":")[-1]
    read = key_of(_request(agent, 10, **meta), "weather-get_forecast_v1", b'{"city":"a","date":"2026-07-20"}')
    assert not read.startswith("mcp:")  # a read claims no derived key (the row keeps its per-proposal default)
    explicit = _request(agent, 11, **{**meta, "dev.toolops/idempotencyKey": "k-1"})
    assert key_of(explicit, "calendar-create_event_v1", CALENDAR_ARGS.replace(b'"x"', b'"z"')) == "k-1"
    with pytest.raises(ApplicationError):
        _idempotency_key(_request(agent, 7, **{"dev.toolops/idempotencyKey": "has space"}), run)


def test_a_write_through_the_mcp_door_is_admitted_once(agent, monkeypatch):
    """The bytes are parsed, validated, normalized and digested once per call: the derived key is
    made from admission's own plan (before, the door ran a second admit() only to compute it).
    Counted at the source — the pure admit() looks up parse_strict in its own module, whoever
    imported admit() under whatever name."""
    import toolops.runtime.admission as pure
    parsed = []
    real = pure.parse_strict
    monkeypatch.setattr(pure, "parse_strict", lambda raw, limits: parsed.append(raw) or real(raw, limits))
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-once"), trace=None)
    outcome = mcp_tool_call(request=_request(agent, 1, **{"dev.toolops/run": str(run.pk)}), name="calendar-create_event_v1",
                            arguments_bytes=CALENDAR_ARGS, arguments=json.loads(CALENDAR_ARGS))
    assert parsed == [CALENDAR_ARGS]
    assert Invocation.objects.get(pk=outcome.invocation_id).idempotency_key.startswith(f"mcp:{run.pk}:")


def test_a_sealed_state_is_refused_when_altered_foreign_or_expired(agent):
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-2"), trace=None)
    call = model_call_create(run=run, tool_refs=["calendar.create_event@1"], fmt="mcp", context=[])
    invocation, _ = proposal_admit(model_call=call, subject=agent, proposal_id="p1", name="calendar-create_event_v1",
                                   arguments_bytes=CALENDAR_ARGS)
    state = confirmation_state_seal(invocation=invocation, subject=agent)
    with pytest.raises(MCPError) as altered:
        confirmation_state_redeem(state=state[:-2] + ("xx" if not state.endswith("xx") else "yy"), subject=agent)
    assert altered.value.data["code"] == "invalid_request_state"
    with pytest.raises(MCPError) as foreign:
        confirmation_state_redeem(state=state, subject=make_subject())
    assert foreign.value.data["code"] == "invalid_request_state"
    claims = signing.loads(state, salt=SALT)
    expired = signing.dumps({**claims, "exp": int(timezone.now().timestamp()) - 1}, salt=SALT)
    with pytest.raises(MCPError) as late:
        confirmation_state_redeem(state=expired, subject=agent)
    assert late.value.data["code"] == "request_state_expired"
    assert confirmation_state_redeem(state=state, subject=agent).pk == invocation.pk
    with pytest.raises(MCPError) as replayed:
        confirmation_state_redeem(state=state, subject=agent)
    assert replayed.value.data["code"] == "request_state_replayed"


def test_the_status_tool_answers_a_malformed_or_foreign_id_with_is_error(agent):
    for arguments in ({}, {"invocation_id": "nope"}, {"invocation_id": 7}, {"invocation_id": "00000000-0000-0000-0000-000000000001"}):
        answer = mcp_status(subject=agent, arguments=arguments)
        assert answer["isError"] is True, arguments


def test_mcp_param_headers_are_checked_against_the_listing_the_call_is_resolved_against(agent):
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-3"), trace=None)
    listing = model_call_create(run=run, tool_refs=["weather.get_forecast@1"], fmt="mcp", context=[])
    row = listing.visible_tools.get()
    row.rendered["inputSchema"]["properties"]["city"]["x-mcp-header"] = "City"  # as a tool declaring it lists it
    row.save(update_fields=["rendered"])
    arguments = {"city": "Paris", "date": "2026-07-20"}
    raw = json.dumps(arguments).encode()
    modern = McpRequest(subject=agent, session_id=None, request_id=1, protocol_version="2026-07-28",
                        meta={"dev.toolops/run": str(run.pk)})
    for headers in ({"Mcp-Param-City": "Rome"}, {}):  # another value, or the header missing
        with pytest.raises(MCPError) as mismatch:
            mcp_tool_call(request=modern, name="weather-get_forecast_v1", arguments_bytes=raw, arguments=arguments, headers=headers)
        assert mismatch.value.error.code == HEADER_MISMATCH
    assert not Proposal.objects.filter(model_call__run=run).exists()  # refused before anything is recorded
    admitted = mcp_tool_call(request=modern, name="weather-get_forecast_v1", arguments_bytes=raw, arguments=arguments,
                             headers={"mcp-param-city": "Paris"})
    legacy = McpRequest(subject=agent, session_id=None, request_id=2, protocol_version="2025-11-25",
                        meta={"dev.toolops/run": str(run.pk)})  # no Mcp-Param-* headers before 2026-07-28
    unchecked = mcp_tool_call(request=legacy, name="weather-get_forecast_v1", arguments_bytes=raw, arguments=arguments, headers={})
    invocations = Invocation.objects.filter(pk__in=[admitted.invocation_id, unchecked.invocation_id])
    assert {inv.model_call_id for inv in invocations} == {listing.pk}
    assert ModelCall.objects.filter(run=run).count() == 1  # the calls recorded no listing of their own


def test_the_status_tool_answers_from_one_read_of_the_call(agent, django_assert_num_queries):
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-4"), trace=None)
    call = model_call_create(run=run, tool_refs=["calendar.create_event@1"], fmt="mcp", context=[])
    invocation, _ = proposal_admit(model_call=call, subject=agent, proposal_id="p1", name="calendar-create_event_v1",
                                   arguments_bytes=CALENDAR_ARGS)
    pending = invocation.confirmations.get()
    with django_assert_num_queries(1):
        answer = mcp_status(subject=agent, arguments={"invocation_id": str(invocation.pk)})
    assert answer["structuredContent"] == {"status": "pending_confirmation", "invocation_id": str(invocation.pk),
                                           "expires_at": pending.expires_at.isoformat()}
    with django_assert_num_queries(1):
        unknown = mcp_status(subject=agent, arguments={"invocation_id": "00000000-0000-0000-0000-000000000001"})
    assert unknown["isError"] is True


# --- inline reads (TOOLOPS_MCP_INLINE_READS, on by default) ---------------------------------

WEATHER_ARGS = b'{"city": "Paris", "date": "2026-07-20"}'


@pytest.fixture
def worker_messages(monkeypatch) -> list:
    """Invocation ids admission hands to the workers (the message itself would be sent on commit)."""
    import invocations_app.admission as admission

    sent = []
    real = admission.enqueue_when_committed
    monkeypatch.setattr(admission, "enqueue_when_committed", lambda invocation: (sent.append(invocation.pk), real(invocation)))
    return sent


def _trail(invocation_id) -> tuple:
    """What the record says happened to a call, without ids and times."""
    from invocations_app.models import Attempt, Event, ToolMessage

    events = list(Event.objects.filter(invocation_id=invocation_id).order_by("seq").values_list("kind", "from_state", "to_state"))
    attempts = list(Attempt.objects.filter(invocation_id=invocation_id).values_list("number", "commit", "failure_class"))
    formats = sorted(ToolMessage.objects.filter(invocation_id=invocation_id).values_list("format", flat=True))
    return Invocation.objects.get(pk=invocation_id).state, events, attempts, formats


def test_an_inline_read_is_recorded_as_a_worker_records_it_and_sends_no_worker_message(agent, settings, worker_messages):
    from invocations_app.models import ToolMessage
    from worker.tasks import _execute

    settings.TOOLOPS_MCP_INLINE_READS = True
    inline = mcp_tool_call(request=_request(agent, 1), name="weather-get_forecast_v1", arguments_bytes=WEATHER_ARGS)
    assert inline.result is not None and inline.wait_for is None  # answered at once, executed here
    assert worker_messages == []
    stored = ToolMessage.objects.get(invocation_id=inline.invocation_id, format="mcp").message_bytes
    assert inline.result == json.loads(bytes(stored))  # the recorded MCP tool message, not a rendering of it
    assert inline.result["isError"] is False

    settings.TOOLOPS_MCP_INLINE_READS = False
    queued = mcp_tool_call(request=_request(agent, 2), name="weather-get_forecast_v1", arguments_bytes=WEATHER_ARGS)
    assert queued.result is None and worker_messages == [queued.wait_for]
    assert _execute(str(queued.wait_for)) == "ran"  # what the worker does with its message
    assert _trail(inline.invocation_id) == _trail(queued.wait_for)
    assert _trail(inline.invocation_id)[0] == "OBSERVED"


def test_with_no_free_inline_slot_a_read_goes_to_the_workers(agent, settings, worker_messages):
    settings.TOOLOPS_MCP_INLINE_READS, settings.TOOLOPS_MCP_INLINE_MAX = True, 0
    outcome = mcp_tool_call(request=_request(agent, 1), name="weather-get_forecast_v1", arguments_bytes=WEATHER_ARGS)
    assert outcome.result is None and worker_messages == [outcome.wait_for]
    assert Invocation.objects.get(pk=outcome.wait_for).state == "AUTHORIZED"


def test_writes_and_calls_waiting_for_a_person_are_never_executed_inline(agent, settings, worker_messages):
    settings.TOOLOPS_MCP_INLINE_READS = True
    pending = mcp_tool_call(request=_request(agent, 1), name="calendar-create_event_v1", arguments_bytes=CALENDAR_ARGS)
    assert pending.result["structuredContent"]["status"] == "pending_confirmation"
    assert Invocation.objects.get(pk=pending.invocation_id).attempts.count() == 0
    assert worker_messages == []  # the approval sends it, not admission


def test_a_read_claimed_at_admission_by_a_process_that_then_died_is_recovered_like_a_dead_workers(agent, worker_messages, monkeypatch):
    """Admission claimed the read's first attempt for the MCP process, which died before
    recording it: no worker message was sent, the open attempt's lease lapses, and recovery
    retries the read exactly as it does for a worker that died."""
    from worker.leases import stale_open_attempts
    from invocations_app.models import Attempt
    from worker.tasks import _execute, executions_enqueue_due_task
    import invocations_app.dispatch as dispatch

    sent = []  # what the sweep hands the broker
    monkeypatch.setattr(dispatch, "execution_send_or_defer", lambda pk, **kw: sent.append(pk) or True)
    run = mcp_run_get_or_open(subject=agent, rule=RunRule("session", "session:s-9"), trace=None)
    listing = model_call_create(run=run, tool_refs=["weather.get_forecast@1"], fmt="mcp", context=[])
    invocation, created = proposal_admit(model_call=listing, subject=agent, proposal_id="p-1", name="weather-get_forecast_v1",
                                         arguments_bytes=WEATHER_ARGS, claim_inline=claim_with_admission)
    assert created and invocation.state == "EXECUTING" and worker_messages == []
    stored = Invocation.objects.get(pk=invocation.pk)
    assert (stored.state, stored.attempt_count, stored.event_seq) == ("EXECUTING", 1, invocation.event_seq)
    attempt = Attempt.objects.get(invocation=invocation)
    assert attempt.pk == invocation.attempts.all()[0].pk and attempt.ended_at is None
    assert _trail(invocation.pk)[1][-2:] == [("execution_started", "AUTHORIZED", "EXECUTING"),
                                             ("attempt_started", "EXECUTING", "EXECUTING")]
    assert [a.pk for a in stale_open_attempts()] == []  # its lease is alive: nobody touches it

    Attempt.objects.filter(pk=attempt.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # the process is gone
    assert [a.pk for a in stale_open_attempts()] == [attempt.pk]
    executions_enqueue_due_task()  # the beat: recover, then the sweep (the retry is due now)
    assert sent == [invocation.pk]
    assert _execute(str(invocation.pk)) == "ran"  # the retry's message, as a worker gets it
    state, events, attempts, formats = _trail(invocation.pk)
    assert state == "OBSERVED" and [number for number, _, _ in attempts] == [1, 2] and "mcp" in formats


def test_an_inline_read_that_fails_on_the_way_is_answered_by_waiting_and_left_to_recovery(agent, monkeypatch, caplog):
    """The database fails while the inline read is being recorded: the client is not handed an
    error for a call that is on the record; it waits, and the open attempt's lease lets recovery
    finish the read."""
    from django.db import OperationalError

    import worker.attempt as attempt_step
    from invocations_app.models import Attempt

    def lost(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(attempt_step, "execution_record", lost)
    outcome = mcp_tool_call(request=_request(agent, 1), name="weather-get_forecast_v1", arguments_bytes=WEATHER_ARGS)
    assert outcome.result is None and outcome.wait_for == outcome.invocation_id
    assert Invocation.objects.get(pk=outcome.invocation_id).state == "EXECUTING"
    assert Attempt.objects.get(invocation_id=outcome.invocation_id).ended_at is None  # recovery's to take
    assert "left to recovery" in caplog.text
