"""An MCP client governing an upstream MCP server through ToolOps, every part its own process:
the official SDK ``Client`` over streamable HTTP → ToolOps' MCP front door (uvicorn) → a
person approving in the console in Chromium → the Celery worker → the demo notes MCP server →
the result back to the client; and a write whose answer the upstream drops after committing →
OUTCOME_UNKNOWN → reconciled by the lookup tool → exactly one note. Nothing is mocked.

The MCP client runs in its own thread (Playwright's sync API keeps an event loop in the test
thread), as in ``tests/mcp_server/test_mcp_tasks_browser.py``.
"""
from __future__ import annotations

import json
import re
import threading

import anyio
import pytest
from playwright.sync_api import expect

from invocations_app.models import Attempt, Confirmation, Event, Invocation, ResultBody, ToolMessage
from tests.browser.conftest import browser, login, page  # noqa: F401 - fixtures used here
from tests.builders import allow_approving, make_staff
from tests.integration.conftest import remote_key_of, wait_for
from tests.mcp_server.conftest import mcp_client, mcp_server  # noqa: F401 - fixture used here
from tests.mcp_server.test_mcp_tasks import DetailedTask, TaskHandle, TaskParams, Tasks, TasksGet

from tests.upstream.conftest import NOTES_SECRET, dumps
from tests.upstream.test_execution import governed  # noqa: F401 - fixture used here

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.browser]

STATUS_TOOL = "toolops_invocation_status"


def _in_thread(fn, *args):
    """``anyio.run(fn, *args)`` in a thread of its own; its exception is re-raised here."""
    out: dict = {}

    def run():
        try:
            out["value"] = anyio.run(fn, *args)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    if "error" in out:
        raise out["error"]
    return out["value"]


def _names(governed) -> dict[str, str]:
    """Upstream tool name → the name the MCP client sees."""
    return {upstream: spec.model_facing_name for upstream, spec in governed.specs.items()}


def _dump(result) -> dict:
    """The ``CallToolResult`` as sent, less the envelope the SDK adds (``_meta``, ``resultType``)."""
    wire = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {k: v for k, v in wire.items() if k in ("content", "structuredContent", "isError")}


def test_an_mcp_client_governs_the_upstream_with_a_person_approving_in_chromium(
        governed, mcp_server, login, live_server):
    names = _names(governed)
    answers: list[dict] = []

    async def create_then_delete():
        async with mcp_client(mcp_server, governed.token, mode="2026-07-28", extensions=[Tasks()]) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert set(names.values()) <= listed
            created = await client.call_tool(names["notes.create"], {"title": "Renew passport", "body": "before July"})
            answers.append(_dump(created))
            found = await client.call_tool(names["notes.search"], {"query": "passport"})
            answers.append(_dump(found))
            note_id = created.structured_content["result"]["note"]["id"]
            return await client.session.call_tool(names["notes.delete"], {"id": note_id}, allow_claimed=True)

    handle = _in_thread(create_then_delete)
    created, found = answers
    # The upstream's text reaches the client marked as untrusted data (issue 13 item 5) once per
    # message (issue 34 item 4), in the tool's own shape; the note's id is not marked.
    title = created["structuredContent"]["result"]["note"]["title"]
    assert created["isError"] is False and title == "Renew passport"
    assert "/note/title" in created["structuredContent"]["untrusted_fields"]
    assert created["structuredContent"]["untrusted_note"]
    assert [n["title"] for n in found["structuredContent"]["result"]["notes"]] == ["Renew passport"]
    # The destructive call waits for a person as a durable task; nothing was sent upstream yet.
    assert isinstance(handle, TaskHandle) and handle.status == "working"
    assert governed.notes.calls("notes.delete") == []

    confirmation = Confirmation.objects.get(invocation_id=handle.task_id, state="pending")
    approver = make_staff(username="notes-approver")
    allow_approving(user=approver, spec=governed.specs["notes.delete"])
    page = login(approver)
    page.goto(live_server.url + "/console/confirmations/")
    row = page.locator(f"#confirmation-{confirmation.pk}")
    expect(row.get_by_test_id("arguments")).to_contain_text(created["structuredContent"]["result"]["note"]["id"])
    row.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is PREPARED")

    async def until_done():
        for _ in range(400):
            async with mcp_client(mcp_server, governed.token, mode="2026-07-28", extensions=[Tasks()]) as client:
                task = await client.session.send_request(TasksGet(params=TaskParams(task_id=handle.task_id)), DetailedTask)
            if task.status != "working":
                return task
            await anyio.sleep(0.1)
        raise AssertionError("the task did not complete")

    done = _in_thread(until_done)
    assert done.status == "completed" and done.result["isError"] is False, done
    assert done.result["structuredContent"]["result"] == {"deleted": True}
    recorded = ToolMessage.objects.get(invocation_id=handle.task_id, format="mcp")
    assert done.result == json.loads(bytes(recorded.message_bytes))  # the recorded message, as sent
    assert Invocation.objects.get(pk=handle.task_id).state == "OBSERVED"
    [deleted] = governed.notes.calls("notes.delete")
    assert deleted["arguments"] == {"id": created["structuredContent"]["result"]["note"]["id"]}
    assert governed.notes.notes() == []
    _assert_no_credential_leaks(governed, mcp_server, answers + [done.result])


def test_a_dropped_write_through_the_front_door_is_reconciled_to_exactly_one_note(governed, mcp_server):
    names = _names(governed)
    governed.notes.fault("notes.create", "commit_then_drop")
    key = {"dev.toolops/idempotencyKey": "groceries-2026-12-01"}

    async def call():
        async with mcp_client(mcp_server, governed.token, mode="2026-07-28") as client:
            await client.list_tools()
            return _dump(await client.call_tool(names["notes.create"], {"title": "Groceries", "body": "milk"}, meta=key))

    first = _in_thread(call)
    # The lost answer reaches the client as OUTCOME_UNKNOWN, never as "not executed" or an error.
    assert first["isError"] is False and first["structuredContent"]["status"] == "outcome_unknown", first
    invocation_id = first["structuredContent"]["invocation_id"]

    def reconciled():
        inv = Invocation.objects.filter(tool_spec=governed.specs["notes.create"]).first()
        return inv if inv is not None and inv.state == "OBSERVED" else None

    invocation = wait_for(reconciled, timeout=60)
    assert str(invocation.pk) == invocation_id
    kinds = list(Event.objects.filter(invocation=invocation).values_list("kind", flat=True))
    assert "outcome_unknown" in kinds and "reconciliation_lookup" in kinds, kinds
    # The upstream got the tenant-derived key, never the client's raw one, and the lookup asked for it.
    [sent] = governed.notes.calls("notes.create")
    derived = remote_key_of(invocation.pk)
    assert sent["meta"]["dev.toolops/idempotencyKey"] == derived and "groceries-2026-12-01" not in dumps(sent)
    lookups = governed.notes.calls("notes.find_by_key")
    assert lookups and all(c["arguments"] == {"idempotency_key": derived} for c in lookups)

    async def status_and_reissue():
        async with mcp_client(mcp_server, governed.token, mode="2026-07-28") as client:
            await client.list_tools()
            status = await client.call_tool(STATUS_TOOL, {"invocation_id": str(invocation.pk)})
            again = await client.call_tool(names["notes.create"], {"title": "Groceries", "body": "milk"}, meta=key)
            return _dump(status), _dump(again)

    status, again = _in_thread(status_and_reissue)
    assert status["isError"] is False and str(invocation.pk) in dumps(status)
    recorded = json.loads(bytes(ToolMessage.objects.get(invocation=invocation, format="mcp").message_bytes))
    assert again == recorded and again["isError"] is False  # the re-issue attaches: the same answer
    assert [n["title"] for n in governed.notes.notes()] == ["Groceries"]  # exactly one note
    assert len(governed.notes.calls("notes.create")) == 1  # sent once; reconciled, never re-sent
    assert Invocation.objects.filter(tool_spec=governed.specs["notes.create"]).count() == 1
    _assert_no_credential_leaks(governed, mcp_server, [first, status, again])


def _assert_no_credential_leaks(governed, mcp_server, client_answers: list[dict]) -> None:
    """The upstream saw only ToolOps' credential (never the agent's token); nothing the client
    received, ToolOps recorded or any process logged holds the upstream credential."""
    # Every HTTP request that reached it (before its credential check: initialize, DELETE, refused
    # ones included) carried ToolOps' credential and nothing of the agent's.
    wire = governed.notes.wire()
    assert wire and all(w["headers"].get("authorization") == f"Bearer {NOTES_SECRET}" and not w["refused"] for w in wire)
    assert governed.token not in dumps(wire) and governed.token not in dumps(governed.notes.requests_log())
    assert NOTES_SECRET not in dumps(client_answers)
    recorded = dumps([
        list(Event.objects.values()), list(ToolMessage.objects.values()), list(Attempt.objects.values()),
        list(ResultBody.objects.values()), list(Invocation.objects.values()),
    ])
    assert NOTES_SECRET not in recorded
    assert NOTES_SECRET not in governed.worker.output()
    assert NOTES_SECRET not in mcp_server.output()
    assert governed.token not in mcp_server.output() and governed.token not in governed.worker.output()

