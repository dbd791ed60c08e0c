"""One rate limit per token across the front doors: the REST API (its own gunicorn processes) and
the MCP server (its own uvicorn process) spend one counter in the shared Redis; over the limit
REST answers 429 and MCP a JSON-RPC error with the seconds to wait, and nothing is admitted."""
from __future__ import annotations

import json

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from mcp_server.rate_limit import RATE_LIMITED
from invocations_app.models import Attempt, ModelCall, Proposal
from tests.builders import forget_rate_counts
from tests.servers import gunicorn_server

from tests.mcp_server.conftest import DEMO_TOKEN, McpServer, mcp_client, modern_request

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WEATHER = "weather-get_forecast_v1"
WEATHER_ARGS = {"city": "Paris", "date": "2026-07-20"}
DAY = 86400


@pytest.fixture
def limited_mcp(worker_env, demo_agent, tmp_path, settings):
    """The MCP server and this process's REST API, both at ``3/day`` (a window the test cannot
    straddle in practice)."""
    settings.TOOLOPS_API_RATE = "3/day"
    forget_rate_counts(rate="3/day")
    server = McpServer(worker_env, tmp_path / "mcp.log", TOOLOPS_API_RATE="3/day").start()
    yield server
    server.stop()
    print("---- MCP server log ----\n" + server.output()[-6000:])


def _rate_limited(answer: dict) -> bool:
    error = answer.get("error") or {}
    return error.get("code") == RATE_LIMITED and (error.get("data") or {}).get("code") == "rate_limited"


def test_a_token_refused_on_rest_is_refused_on_mcp_with_the_seconds_to_wait(limited_mcp, demo_agent):
    assert [demo_agent.get("/api/v1/tools").status_code for _ in range(4)] == [200, 200, 200, 429]
    answer = httpx2.post(limited_mcp.url, timeout=30, **modern_request("tools/call", {"name": WEATHER, "arguments": WEATHER_ARGS})).json()
    assert _rate_limited(answer), answer
    assert 0 < answer["error"]["data"]["retry_after"] <= DAY
    assert not Proposal.objects.exists() and not ModelCall.objects.exists()  # nothing listed, nothing admitted


def test_mcp_requests_spend_the_same_limit_as_rest_ones(limited_mcp, demo_agent):
    """Every MCP request counts (here a listing and two calls), and the SDK's client sees the
    refusal as an MCPError carrying the wait."""
    async def use():
        async with mcp_client(limited_mcp, mode="2026-07-28") as client:
            await client.list_tools()
            await client.call_tool(WEATHER, WEATHER_ARGS)
            await client.call_tool(WEATHER, WEATHER_ARGS)
            with pytest.raises(MCPError) as refused:
                await client.call_tool(WEATHER, WEATHER_ARGS)
            return refused.value

    refused = anyio.run(use)
    assert refused.code == RATE_LIMITED and refused.data["code"] == "rate_limited" and refused.data["retry_after"] > 0
    assert Proposal.objects.count() == 2
    resp = demo_agent.get("/api/v1/tools")
    assert resp.status_code == 429 and resp.json()["code"] == "rate_limited"


# --------------------------------------------------------------------------- 8 concurrent clients

LIMIT = 20
CLIENTS_PER_DOOR = 4
REQUESTS_PER_CLIENT = 12  # 96 requests in all against a limit of 20


class Tally:
    def __init__(self):
        self.passed = {"rest": 0, "mcp": 0}
        self.refused = {"rest": 0, "mcp": 0}
        self.admitted = 0  # proposals the front doors said they admitted
        self.unexpected: list = []


async def _rest_client(url: str, n: int, tally: Tally) -> None:
    """Opens a run, records a model call, then proposes until its requests are used up."""
    run_id = call_id = None
    async with httpx2.AsyncClient(base_url=url, timeout=60, headers={"Authorization": f"Bearer {DEMO_TOKEN}"}) as http:
        for i in range(REQUESTS_PER_CLIENT):
            if run_id is None:
                resp = await http.post("/api/v1/runs", json={})
            elif call_id is None:
                resp = await http.post(f"/api/v1/runs/{run_id}/model-calls", json={})
            else:
                resp = await http.post(f"/api/v1/model-calls/{call_id}/proposals", json={
                    "proposal_id": f"rest-{n}-{i}", "name": WEATHER, "arguments": json.dumps(WEATHER_ARGS)})
            if resp.status_code == 429:
                tally.refused["rest"] += 1
                assert resp.json()["code"] == "rate_limited" and int(resp.headers["Retry-After"]) > 0
                continue
            if resp.status_code != 201:
                tally.unexpected.append(("rest", resp.status_code, resp.text[:300]))
                continue
            tally.passed["rest"] += 1
            if run_id is None:
                run_id = resp.json()["id"]
            elif call_id is None:
                call_id = resp.json()["id"]
            else:
                tally.admitted += 1


async def _mcp_client(url: str, n: int, tally: Tally) -> None:
    """Lists the tools, then calls the weather tool (a read: the MCP process runs it itself)."""
    listed = False
    async with httpx2.AsyncClient(timeout=60) as http:
        for i in range(REQUESTS_PER_CLIENT):
            method, params = ("tools/call", {"name": WEATHER, "arguments": WEATHER_ARGS}) if listed else ("tools/list", {})
            answer = (await http.post(url, **modern_request(method, params, request_id=f"{n}-{i}"))).json()
            if _rate_limited(answer):
                tally.refused["mcp"] += 1
                assert answer["error"]["data"]["retry_after"] > 0
                continue
            if "result" not in answer or answer["result"].get("isError"):
                tally.unexpected.append(("mcp", answer))
                continue
            tally.passed["mcp"] += 1
            tally.admitted += listed
            listed = True


def test_the_limit_holds_across_rest_and_mcp_under_eight_concurrent_clients(worker_env, demo_agent, tmp_path):
    """Three processes spend one token's limit at once: two gunicorn workers (REST) and the MCP
    server. Together they let exactly the limit through (below 64 permits every claim is a
    single permit, so none is stranded in a process), everything past it is refused on both
    doors, and the database holds exactly what was let through — nothing over the limit ran."""
    env = {**worker_env, "TOOLOPS_API_RATE": f"{LIMIT}/day"}
    forget_rate_counts(rate=env["TOOLOPS_API_RATE"])
    mcp = McpServer(env, tmp_path / "mcp.log").start()
    tally = Tally()
    try:
        with gunicorn_server(env, workers=2) as rest:
            async def clients():
                async with anyio.create_task_group() as tasks:
                    for n in range(CLIENTS_PER_DOOR):
                        tasks.start_soon(_rest_client, rest.url, n, tally)
                        tasks.start_soon(_mcp_client, mcp.url, n, tally)

            anyio.run(clients)
    finally:
        mcp.stop()
    assert tally.unexpected == []
    assert sum(tally.passed.values()) == LIMIT, tally.passed
    assert tally.refused["rest"] > 0 and tally.refused["mcp"] > 0, tally.refused
    assert sum(tally.refused.values()) == 2 * CLIENTS_PER_DOOR * REQUESTS_PER_CLIENT - LIMIT
    # What the database holds: one row per request let through (a run, a listing or model
    # call, a proposal); the MCP server's own day run is opened for its first request.
    rest_runs = demo_agent.subject.runs.filter(mcp_key="").count()
    assert rest_runs + ModelCall.objects.count() + Proposal.objects.count() == LIMIT
    assert Proposal.objects.count() == tally.admitted
    assert Attempt.objects.count() <= Proposal.objects.filter(origin__transport="mcp").count()
