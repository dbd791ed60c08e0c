"""The MCP front door end to end: the official SDK's Client over streamable HTTP against the real
MCP process (uvicorn), a real Celery worker and the demo services, on PostgreSQL."""
from __future__ import annotations

import json
import re

import anyio
import httpx2
import pytest
from django.contrib.auth.models import User
from django.test import Client
from mcp.shared.exceptions import MCPError

from invocations_app.confirmations import confirmation_approve, confirmation_deny
from invocations_app.models import Confirmation, Invocation, ModelCall, Proposal, ToolMessage
from specs_app.models import Subject
from tests.builders import allow_approving, make_demo_spec, make_grant, make_token, person_client

from tests.mcp_server.conftest import DEMO_TOKEN, http_client, mcp_client, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WEATHER = "weather-get_forecast_v1"
CALENDAR = "calendar-create_event_v1"
STATUS = "toolops_invocation_status"
LEGACY_STATUS = "toolops.invocation_status"
CALENDAR_ARGS = {"calendar_id": "primary", "title": "带护照", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}
BOTH_MODES = pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])


def _recorded_mcp_message(invocation_id: str) -> dict:
    return json.loads(bytes(ToolMessage.objects.get(invocation_id=invocation_id, format="mcp").message_bytes))


def _as_wire(result) -> dict:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True, include={"content", "structured_content", "is_error"})


def _approver() -> User:
    return User.objects.get_or_create(username="approver", defaults={"is_staff": True})[0]


def test_it_refuses_a_request_without_a_valid_token_with_401_and_serves_the_resource_metadata(mcp_server, demo_agent):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28"}
    for token in (None, "tko_not_a_token"):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        resp = httpx2.post(mcp_server.url, json=body, headers={**headers, **auth}, timeout=10)
        assert resp.status_code == 401
        assert f'resource_metadata="{mcp_server.metadata_url}"' in resp.headers["www-authenticate"]
    metadata = httpx2.get(mcp_server.metadata_url, timeout=10).json()
    assert metadata["resource"] == mcp_server.url
    assert metadata["bearer_methods_supported"] == ["header"]


def test_it_refuses_a_foreign_host_header(mcp_server, demo_agent):
    resp = httpx2.post(mcp_server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                       headers={"Host": "evil.example", "Authorization": f"Bearer {DEMO_TOKEN}",
                                "Accept": "application/json, text/event-stream"}, timeout=10)
    assert resp.status_code in (400, 421)


def test_it_lists_a_tenant_owned_tool_to_its_tenant_only(mcp_server, demo_agent):
    other_subject, other_token = make_token()
    make_grant(capability="weather.read", subject=other_subject)
    make_demo_spec(name="weather.get_forecast", copy_as="other.forecast", tenant=other_subject.tenant)

    async def listings():
        async with mcp_client(mcp_server, DEMO_TOKEN) as demo, mcp_client(mcp_server, other_token) as other:
            return [t.name for t in (await demo.list_tools()).tools], [t.name for t in (await other.list_tools()).tools]

    demo_names, other_names = anyio.run(listings)
    assert "other-forecast_v1" not in demo_names and WEATHER in demo_names
    assert other_names == ["other-forecast_v1", WEATHER, STATUS]


@BOTH_MODES
def test_it_lists_only_the_subjects_granted_tools_and_records_the_listing(mcp_server, demo_agent, mode):
    other_subject, other_token = make_token()
    make_grant(capability="weather.read", subject=other_subject)  # the second tenant may only read weather

    async def listings():
        async with mcp_client(mcp_server, DEMO_TOKEN, mode=mode) as demo, mcp_client(mcp_server, other_token, mode=mode) as other:
            return [t.name for t in (await demo.list_tools()).tools], [t.name for t in (await other.list_tools()).tools]

    demo_names, other_names = anyio.run(listings)
    assert demo_names == ["calendar-create_event_v1", "payments-transfer_v1", WEATHER, "web-fetch_v1", STATUS]
    assert other_names == [WEATHER, STATUS]
    listing = ModelCall.objects.filter(run__subject=other_subject).get()
    assert listing.format == "mcp"
    assert [t.tool_ref for t in listing.visible_tools.all()] == ["weather.get_forecast@1"]


@BOTH_MODES
def test_it_answers_a_read_only_call_with_the_recorded_tool_message(mcp_server, demo_agent, worker, mode):
    async def call():
        async with mcp_client(mcp_server, mode=mode) as client:
            await client.list_tools()
            return await client.call_tool(WEATHER, {"city": "Paris", "date": "2026-07-20"})

    result = anyio.run(call)
    assert result.is_error is False
    invocation = Invocation.objects.get(pk=result.structured_content["invocation_id"])
    assert invocation.state == "OBSERVED"
    assert _as_wire(result) == _recorded_mcp_message(str(invocation.pk))
    origin = invocation.proposal.origin
    assert origin["transport"] == "mcp" and origin["request_id"] is not None
    assert (origin["session_id"] is not None) == (mode == "legacy")
    assert invocation.run.mcp_key.startswith("session:" if mode == "legacy" else "day:")
    # The call is resolved against the listing the client got; it records no listing of its own
    # (the SDK's 2026-07-28 header check used to run the tools/list handler for every call).
    assert list(ModelCall.objects.filter(run=invocation.run).values_list("pk", flat=True)) == [invocation.model_call_id]


def test_it_answers_schema_invalid_arguments_with_is_error_naming_the_pointer(mcp_server, demo_agent):
    async def call():
        async with mcp_client(mcp_server) as client:
            await client.list_tools()
            return await client.call_tool(WEATHER, {"city": 75001, "date": "2026-07-20"})

    result = anyio.run(call)
    assert result.is_error is True
    invocation = Invocation.objects.get(proposal__name=WEATHER, state="VALIDATION_REJECTED")
    assert _as_wire(result) == _recorded_mcp_message(str(invocation.pk))
    assert "/city" in result.content[0].text
    assert result.structured_content["error"]["code"] == "validation_rejected"


def test_it_records_duplicate_keys_in_the_raw_arguments_as_parse_rejected(mcp_server, demo_agent):
    raw_args = b'{"city": "Paris", "city": "Rome", "date": "2026-07-20"}'
    body = (b'{"jsonrpc":"2.0","id":"dup-1","method":"tools/call","params":{"name":"' + WEATHER.encode()
            + b'","arguments":' + raw_args + b',"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            + b'"io.modelcontextprotocol/clientCapabilities":{}}}}')
    headers = {"Authorization": f"Bearer {DEMO_TOKEN}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
               "Mcp-Method": "tools/call", "Mcp-Name": WEATHER}
    resp = httpx2.post(mcp_server.url, content=body, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    answer = resp.json()["result"]
    assert answer["isError"] is True
    proposal = Proposal.objects.get(name=WEATHER)
    assert bytes(proposal.arguments_bytes) == raw_args
    assert proposal.invocation.state == "PARSE_REJECTED"
    assert answer["structuredContent"] == _recorded_mcp_message(str(proposal.invocation.pk))["structuredContent"]


def test_it_answers_an_unknown_tool_with_invalid_params_and_records_it(mcp_server, demo_agent):
    async def call():
        async with mcp_client(mcp_server, mode="legacy") as client:
            await client.list_tools()
            with pytest.raises(MCPError) as caught:
                await client.call_tool("weather-get_forecast_v9", {"city": "Paris"})
            return caught.value

    error = anyio.run(call)
    assert error.code == -32602  # JSON-RPC invalid params
    invocation = Invocation.objects.get(proposal__name="weather-get_forecast_v9")
    assert invocation.error_code == "unknown_tool"
    assert error.data["invocation_id"] == str(invocation.pk)


def test_a_plain_client_gets_pending_confirmation_then_polls_the_status_tool_to_completion(
        mcp_server, demo_agent, demo_services, worker):
    async def propose():
        async with mcp_client(mcp_server) as client:
            await client.list_tools()
            return await client.call_tool(CALENDAR, CALENDAR_ARGS)

    pending = anyio.run(propose)
    assert pending.is_error is False
    assert pending.structured_content["status"] == "pending_confirmation"
    invocation_id = pending.structured_content["invocation_id"]
    assert "expires_at" in pending.structured_content and STATUS in pending.content[0].text

    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=_approver(), digest_seen=confirmation.digest, reason="ok")

    async def poll():
        async with mcp_client(mcp_server) as client:
            for _ in range(200):
                answer = await client.call_tool(STATUS, {"invocation_id": invocation_id})
                if (answer.structured_content or {}).get("status") not in ("pending_confirmation", "working"):
                    return answer
                await anyio.sleep(0.1)
        raise AssertionError("the call did not complete")

    final = anyio.run(poll)
    assert final.is_error is False and final.structured_content["ok"] is True
    assert _as_wire(final) == _recorded_mcp_message(invocation_id)
    assert len(demo_services.calendar_events("primary")) == 1


@BOTH_MODES
def test_the_runs_an_agent_bound_to_a_person_opens_act_for_them_and_they_cannot_approve(mcp_server, demo_agent, mode):
    bob = person_client(username="bob")
    allow_approving(user=bob)  # may approve every tool in every tenant: a person of the agent's tenant
    Subject.objects.filter(pk=demo_agent.subject.pk).update(acts_for=bob)  # an admin's binding (admin: tests/approvals)

    async def propose():
        async with mcp_client(mcp_server, mode=mode) as client:
            await client.list_tools()
            return await client.call_tool(CALENDAR, CALENDAR_ARGS)

    invocation_id = anyio.run(propose).structured_content["invocation_id"]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    answer = bob.client.post(f"/api/v1/confirmations/{confirmation.pk}/approve", {"digest": confirmation.digest})
    assert answer.status_code == 403 and answer.json()["code"] == "separation_of_duties", answer.content
    assert Invocation.objects.get(pk=invocation_id).run.on_behalf_of_user == bob


def test_a_denied_call_reads_as_is_error_with_the_reason(mcp_server, demo_agent, worker):
    async def propose():
        async with mcp_client(mcp_server) as client:
            await client.list_tools()
            return await client.call_tool(CALENDAR, CALENDAR_ARGS)

    invocation_id = anyio.run(propose).structured_content["invocation_id"]
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_deny(confirmation=confirmation, user=_approver(), reason="not on a Sunday")

    async def status():
        async with mcp_client(mcp_server) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            return names, [await client.call_tool(name, {"invocation_id": invocation_id}) for name in (STATUS, LEGACY_STATUS)]

    names, (answer, legacy) = anyio.run(status)
    assert answer.is_error is True
    assert answer.structured_content["error"]["code"] == "confirmation_denied"
    assert "not on a Sunday" in answer.content[0].text
    # The status tool's pre-issue-33 name still answers, the same, for a release; it is not listed.
    assert _as_wire(legacy) == _as_wire(answer)
    assert STATUS in names and LEGACY_STATUS not in names


def test_a_hundred_concurrent_reissues_with_one_key_make_one_invocation_and_one_event(
        mcp_server, demo_agent, demo_services, worker):
    meta = {"dev.toolops/idempotencyKey": "mcp-test-key-1"}

    async def reissue_many():
        answers = []
        async with mcp_client(mcp_server) as client:
            await client.list_tools()

            async def one():
                answers.append(await client.call_tool(CALENDAR, CALENDAR_ARGS, meta=meta))

            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(one)
        return answers

    answers = anyio.run(reissue_many)
    ids = {a.structured_content["invocation_id"] for a in answers}
    assert len(ids) == 1, [a.content[0].text for a in answers if not a.structured_content.get("invocation_id")]
    assert {a.structured_content["status"] for a in answers} == {"pending_confirmation"}
    assert Invocation.objects.filter(tool_name="calendar.create_event").count() == 1
    assert Proposal.objects.filter(name=CALENDAR).count() == 100  # 99 recorded as replays of it
    invocation_id = ids.pop()
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=_approver(), digest_seen=confirmation.digest, reason="ok")
    wait_for(lambda: Invocation.objects.get(pk=invocation_id).state == "OBSERVED", timeout=40)

    async def reissue_after():
        async with mcp_client(mcp_server) as client:
            await client.list_tools()
            same = await client.call_tool(CALENDAR, CALENDAR_ARGS, meta=meta)
            other = await client.call_tool(CALENDAR, {**CALENDAR_ARGS, "title": "other"}, meta=meta)
            return same, other

    same, other = anyio.run(reissue_after)
    assert _as_wire(same) == _recorded_mcp_message(invocation_id)
    assert other.is_error is True and other.structured_content["error"]["code"] == "idempotency_key_reused"
    assert len(demo_services.calendar_events("primary")) == 1
    assert Invocation.objects.get(pk=invocation_id).attempts.count() == 1


def test_it_continues_the_callers_trace_and_records_the_session_and_request(mcp_server, demo_agent, worker):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"

    async def call():
        async with mcp_client(mcp_server, mode="legacy") as client:
            await client.list_tools()
            return await client.call_tool(WEATHER, {"city": "Paris", "date": "2026-07-20"}, meta={
                "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01", "tracestate": "vendor=1"})

    result = anyio.run(call)
    invocation = Invocation.objects.get(pk=result.structured_content["invocation_id"])
    assert invocation.trace_id == trace_id
    assert invocation.proposal.origin["tracestate"] == "vendor=1"
    assert invocation.proposal.origin["session_id"] == invocation.run.mcp_key.removeprefix("session:")
    # The call's record names them: the API …
    api = demo_agent.get(f"/api/v1/invocations/{invocation.pk}").json()
    assert api["proposal"]["origin"]["session_id"] == invocation.proposal.origin["session_id"]
    assert api["proposal"]["origin"]["request_id"] == invocation.proposal.origin["request_id"]
    # … and the console's record page.
    staff = User.objects.create_superuser("support", "support@example.com", "pw")
    browser = Client()
    browser.force_login(staff)
    page = browser.get(f"/console/calls/{invocation.pk}/").content.decode()
    assert invocation.proposal.origin["session_id"] in page and 'data-testid="mcp-origin"' in page


def test_the_openai_agents_sdk_lists_and_calls_with_no_model(mcp_server, demo_agent, worker):
    from agents.mcp import MCPServerStreamableHttp

    async def use():
        server = MCPServerStreamableHttp(
            {"url": mcp_server.url, "headers": {"Authorization": f"Bearer {DEMO_TOKEN}"}}, name="toolops",
        )
        async with server:
            tools = await server.list_tools()
            result = await server.call_tool(WEATHER, {"city": "Paris", "date": "2026-07-20"})
        return [t.name for t in tools], result

    names, result = anyio.run(use)
    assert WEATHER in names and STATUS in names
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in names), names
    assert result.isError is False if hasattr(result, "isError") else result.is_error is False
    structured = getattr(result, "structuredContent", None) or getattr(result, "structured_content", None)
    assert Invocation.objects.get(pk=structured["invocation_id"]).state == "OBSERVED"


def test_a_client_that_disconnects_mid_execution_cancels_nothing_and_its_reissue_gets_the_result(
        mcp_server, demo_agent, demo_services, worker):
    meta = {"dev.toolops/idempotencyKey": "mcp-disconnect-1"}

    async def call(timeout=None):
        async with mcp_client(mcp_server) as client:
            await client.list_tools()
            with anyio.move_on_after(timeout or 60):
                return await client.call_tool(CALENDAR, CALENDAR_ARGS, meta=meta)
        return None  # gave up waiting: the connection closes here

    invocation_id = anyio.run(call).structured_content["invocation_id"]
    demo_services.fault("calendar", fault="delay", seconds=3, method="POST")
    confirmation = Confirmation.objects.get(invocation_id=invocation_id, state="pending")
    confirmation_approve(confirmation=confirmation, user=_approver(), digest_seen=confirmation.digest, reason="ok")
    wait_for(lambda: Invocation.objects.get(pk=invocation_id).state == "EXECUTING", timeout=20)
    assert anyio.run(call, 0.5) is None  # re-issued while executing, then disconnected
    wait_for(lambda: Invocation.objects.get(pk=invocation_id).state == "OBSERVED", timeout=40)
    again = anyio.run(call)
    assert _as_wire(again) == _recorded_mcp_message(invocation_id)
    assert Invocation.objects.get(pk=invocation_id).cancel_requested_at is None
    assert len(demo_services.calendar_events("primary")) == 1


def test_a_client_drives_a_rest_run_with_its_budgets_through_meta(mcp_server, demo_agent, worker):
    run = demo_agent.run(timezone="Asia/Shanghai", budgets={"tool_calls": 1})
    meta = {"dev.toolops/run": run["id"]}

    async def calls():
        async with mcp_client(mcp_server) as client:
            await client.list_tools(meta=meta)
            first = await client.call_tool(WEATHER, {"city": "Paris", "date": "tomorrow"}, meta=meta)
            second = await client.call_tool(WEATHER, {"city": "Rome", "date": "tomorrow"}, meta=meta)
            return first, second

    first, second = anyio.run(calls)
    invocation = Invocation.objects.get(pk=first.structured_content["invocation_id"])
    assert str(invocation.run_id) == run["id"]
    # The run's timezone normalized "tomorrow" (Asia/Shanghai, not the front door's UTC default).
    assert invocation.normalization_context["timezone"] == "Asia/Shanghai"
    assert second.is_error is True and second.structured_content["error"]["code"] == "budget_exhausted"
    refused = Proposal.objects.get(refusal="budget_exhausted")
    assert b"Rome" in bytes(refused.arguments_bytes)
