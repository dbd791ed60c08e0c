"""Confirmation as a URL-mode elicitation (2026-07-28): the official SDK Client declares
``elicitation.url`` by having an elicitation callback; the person's approval is the domain
service the console page calls (the page itself is covered by the console tests)."""
from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection
from mcp.shared.exceptions import MCPError

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Confirmation, Event, Invocation

from tests.mcp_server.conftest import mcp_client

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CALENDAR = "calendar-create_event_v1"
CALENDAR_ARGS = {"calendar_id": "primary", "title": "passport", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}


def _approve_pending(invocation_id=None) -> str:
    approver = User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]
    confirmation = Confirmation.objects.get(state="pending", **({"invocation_id": invocation_id} if invocation_id else {}))
    confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="ok")
    return str(confirmation.invocation_id)


def _approve_in_thread() -> None:
    try:
        _approve_pending()
    finally:
        connection.close()  # this thread's own connection must not outlive the test database


def test_a_url_mode_client_is_sent_to_the_console_page_and_its_retry_returns_the_result(
        mcp_server, demo_agent, demo_services, worker):
    seen = []

    async def on_elicit(ctx, params: types.ElicitRequestURLParams):
        seen.append(params)
        await sync_to_async(_approve_in_thread)()  # the person approves on the page the URL opens
        return types.ElicitResult(action="accept")

    async def call():
        async with mcp_client(mcp_server, mode="2026-07-28", elicitation_callback=on_elicit) as client:
            await client.list_tools()
            return await client.call_tool(CALENDAR, CALENDAR_ARGS)

    result = anyio.run(call)
    assert len(seen) == 1 and seen[0].mode == "url"
    confirmation = Confirmation.objects.get()
    assert seen[0].url.endswith(f"/console/confirmations/{confirmation.pk}/")
    assert result.is_error is False and result.structured_content["ok"] is True
    assert Invocation.objects.get().state == "OBSERVED"
    assert len(demo_services.calendar_events("primary")) == 1


def test_a_retry_with_an_altered_or_replayed_state_is_refused(mcp_server, demo_agent, worker):
    async def never(ctx, params):
        raise AssertionError("driven by hand here")

    async def first_round():
        async with mcp_client(mcp_server, mode="2026-07-28", elicitation_callback=never) as client:
            await client.list_tools()
            return await client.session.call_tool(CALENDAR, CALENDAR_ARGS, allow_input_required=True)

    first = anyio.run(first_round)
    assert isinstance(first, types.InputRequiredResult)
    state = first.request_state
    altered = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")

    async def retry(with_state):
        async with mcp_client(mcp_server, mode="2026-07-28", elicitation_callback=never) as client:
            try:
                return await client.session.call_tool(CALENDAR, CALENDAR_ARGS, request_state=with_state,
                                                      allow_input_required=True)
            except MCPError as exc:
                return exc

    refused = anyio.run(retry, altered)
    assert isinstance(refused, MCPError) and refused.data["code"] == "invalid_request_state"
    assert not Event.objects.filter(kind="mcp_state_redeemed").exists()

    _approve_pending()
    answered = anyio.run(retry, state)
    assert isinstance(answered, types.CallToolResult) and answered.structured_content["ok"] is True
    replayed = anyio.run(retry, state)
    assert isinstance(replayed, MCPError) and replayed.data["code"] == "request_state_replayed"
