"""A task approved by a person in the console, in Chromium: the MCP client's task completes,
with exactly one calendar event. The MCP client runs in its own thread (Playwright's sync API
keeps an event loop in the test thread)."""
from __future__ import annotations

import threading

import anyio
import pytest
from playwright.sync_api import expect

from invocations_app.models import Confirmation, Invocation
from specs_app.models import ToolSpec
from tests.browser.conftest import browser, login, page  # noqa: F401  (fixtures)
from tests.builders import allow_approving, make_staff

from tests.mcp_server.test_mcp_tasks import _get, _start

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.browser]


def _in_thread(fn, *args):
    out = {}

    def run():
        out["value"] = anyio.run(fn, *args)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(120)
    return out["value"]


def test_a_task_approved_in_the_console_completes_with_one_event(
        mcp_server, demo_agent, demo_services, worker, login, live_server):
    handle = _in_thread(_start, mcp_server)
    assert handle.status == "working"
    confirmation = Confirmation.objects.get(invocation_id=handle.task_id, state="pending")
    approver = make_staff(username="approver")
    allow_approving(user=approver, spec=ToolSpec.objects.get(name="calendar.create_event"))

    page = login(approver)
    page.goto(live_server.url + "/console/confirmations/")
    row = page.locator(f"#confirmation-{confirmation.pk}")
    expect(row.get_by_test_id("arguments")).to_contain_text("title: passport")
    row.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is PREPARED")

    async def until_done():
        for _ in range(300):
            task = await _get(mcp_server, handle.task_id)
            if task.status != "working":
                return task
            await anyio.sleep(0.1)
        raise AssertionError("the task did not complete")

    done = _in_thread(until_done)
    assert done.status == "completed" and done.result["isError"] is False
    assert Invocation.objects.get(pk=handle.task_id).state == "OBSERVED"
    assert len(demo_services.calendar_events("primary")) == 1
