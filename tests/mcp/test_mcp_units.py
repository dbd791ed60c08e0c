"""The MCP front door's domain glue, called directly (database, no servers)."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core import signing
from django.utils import timezone
from mcp.shared.exceptions import MCPError
from mcp_types import HEADER_MISMATCH

from invocations_app.mcp.calls import McpRequest, _idempotency_key, mcp_status, mcp_tool_call
from invocations_app.mcp.elicitation import SALT, confirmation_state_redeem, confirmation_state_seal
from invocations_app.mcp.runs import RunRule, mcp_run_get_or_open
from invocations_app.models import Invocation, ModelCall, Proposal, Run
from invocations_app.admission import proposal_admit
from invocations_app.runs import model_call_create
from specs_app.demo import load_demo
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
    call = model_call_create(run=run, tool_refs=["calendar.create_event@1", "weather.get_forecast@1"], fmt="mcp", context=[])
    now = timezone.now()
    key = _idempotency_key(_request(agent, 7), run, call, "calendar-create_event_v1", CALENDAR_ARGS, now)
    spaced = CALENDAR_ARGS.replace(b", ", b" ,  ")  # same meaning, other bytes: same digest
    assert _idempotency_key(_request(agent, 7), run, call, "calendar-create_event_v1", spaced, now) == key
    assert key.startswith(f"mcp:{run.pk}:") and len(key) <= 255
    assert _idempotency_key(_request(agent, 8), run, call, "calendar-create_event_v1", CALENDAR_ARGS, now) != key
    other = CALENDAR_ARGS.replace(b'"x"', b'"y"')
    assert _idempotency_key(_request(agent, 7), run, call, "calendar-create_event_v1", other, now) != key
    assert _idempotency_key(_request(agent, 7), run, call, "weather-get_forecast_v1", b'{"city":"a","date":"2026-07-20"}', now) is None
    explicit = _request(agent, 7, **{"dev.toolops/idempotencyKey": "k-1"})
    assert _idempotency_key(explicit, run, call, "calendar-create_event_v1", CALENDAR_ARGS, now) == "k-1"
    with pytest.raises(ApplicationError):
        _idempotency_key(_request(agent, 7, **{"dev.toolops/idempotencyKey": "has space"}), run, call, "x", b"{}", now)


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
    invocations = Invocation.objects.filter(pk__in=[admitted.wait_for, unchecked.wait_for])
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
