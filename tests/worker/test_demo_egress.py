"""Nothing is open by default: the demo services' address is reached only when the operator's
allow-list (``TOOLOPS_EGRESS_ALLOW``) names it — as ``make run`` does for its own processes.

A ToolSpec-fixed endpoint (the demo calendar's ``{base}/…``) on loopback is refused by the egress
check before anything is sent; "nothing reached the demo services" is read from their own
request log. Opened the way an operator would, the same call goes through.
"""
from __future__ import annotations

import threading

import pytest
import requests

from worker.executors.by_kind import execute
from worker.executors.context import AttemptContext
from devtools.management.commands.run_console import demo_egress_allow
from tests.builders import CALENDAR_ARGS, demo_toolspec_data
from tests.conftest import open_demo_services
from worker.egress_net import allow_with, operator_openers
from toolops.decisions.execution import Commit


@pytest.fixture
def demo_server(tmp_path):
    from demo_services.server import make_server

    server = make_server("127.0.0.1", 0, tmp_path / "demo-services")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _ctx() -> AttemptContext:
    return AttemptContext(invocation_id="inv-egress", tool_ref="calendar.create_event@1", side_effect_class="write_idempotent",
                          attempt=1, idempotency_key="k-egress", traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                          timeout_seconds=5, remote_key="tk1-egress")


def test_the_demo_services_address_is_not_open_by_default(settings):
    settings.TOOLOPS_EGRESS_ALLOW = []  # the default: TOOLOPS_EGRESS_ALLOW unset
    settings.TOOLOPS_DEMO_SERVICES_URL = "http://127.0.0.1:8765"
    assert operator_openers() == frozenset()
    settings.TOOLOPS_EGRESS_ALLOW = ["10.0.0.7:443"]
    assert ("127.0.0.1", 8765) not in operator_openers()


def test_make_run_opens_both_demo_addresses_and_keeps_the_operators_entries(settings):
    settings.TOOLOPS_DEMO_NOTES_MCP_URL = "http://127.0.0.1:8766/mcp"
    settings.TOOLOPS_DEMO_SERVICES_URL = "http://127.0.0.1:8765"
    settings.TOOLOPS_EGRESS_ALLOW = []
    assert demo_egress_allow() == "127.0.0.1:8766,127.0.0.1:8765"
    settings.TOOLOPS_EGRESS_ALLOW = ["10.0.0.7:443", "127.0.0.1:8765"]
    assert demo_egress_allow() == "10.0.0.7:443,127.0.0.1:8765,127.0.0.1:8766"  # each once


def test_allow_with_adds_each_address_once_and_skips_a_url_without_a_port():
    assert allow_with(["10.0.0.7:443"], "http://127.0.0.1:8765", "http://[::1]:9000/mcp", "http://127.0.0.1:8765/x",
                      "https://example.com/") == ["10.0.0.7:443", "127.0.0.1:8765", "[::1]:9000"]


def test_a_toolspec_fixed_endpoint_on_the_demo_address_is_refused_unless_allow_listed(settings, demo_server):
    settings.TOOLOPS_EGRESS_ALLOW = []
    settings.TOOLOPS_DEMO_SERVICES_URL = demo_server
    config = demo_toolspec_data(name="calendar.create_event")["executor"]
    assert config["url"].startswith("{base}/")  # fixed by the ToolSpec: only the operator can open it

    refused = execute(config=config, arguments=CALENDAR_ARGS, ctx=_ctx())
    assert refused.commit == Commit.NOT_COMMITTED and refused.failure_class == "permanent"
    assert refused.error["code"] == "egress_address_denied" and refused.error["reached"] is False
    log = requests.get(f"{demo_server}/_control/requests", params={"service": "calendar"}, timeout=5).json()["requests"]
    assert log == []  # nothing was sent

    open_demo_services(settings, demo_server)  # as an operator (or `make run`) opens it
    done = execute(config=config, arguments=CALENDAR_ARGS, ctx=_ctx())
    assert done.commit == Commit.COMMITTED, done.error
    events = requests.get(f"{demo_server}/calendar/calendars/primary/events", timeout=5).json()["events"]
    assert len(events) == 1
