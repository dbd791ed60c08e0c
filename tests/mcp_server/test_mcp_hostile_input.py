"""Hostile input at the MCP front door: values PostgreSQL cannot store or compare (a NUL, a lone
surrogate, 100,000 characters) and ids that name nothing. Each is a JSON-RPC error with a
sensible code (-32602 invalid params) in ToolOps' words — never code 0, never the database's own
error text — and nothing is recorded for it; what the front door records of the client's own
labels (its request id, its tracestate) is kept in a form the database can hold. Real MCP server
process; the official SDK client where it can send the value, raw JSON-RPC where it cannot.
(A lone surrogate in a tool name never reaches ToolOps: the SDK refuses it, as a parse error on
a session and as an Mcp-Name mismatch on 2026-07-28.)"""
from __future__ import annotations

import uuid

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from invocations_app.models import ModelCall, Proposal

from tests.mcp_server.conftest import mcp_client, modern_request

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

WEATHER = "weather-get_forecast_v1"
WEATHER_ARGS = {"city": "Paris", "date": "2026-07-20"}
BOTH_MODES = pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
# What PostgreSQL's or the driver's errors say; none of it may reach a client.
DATABASE_WORDS = ("NUL (0x00)", "psycopg", "value too long", "character varying", "surrogates not allowed", "DataError")


@pytest.fixture
def refusal(mcp_server, demo_agent):
    """``refusal(mode, call)``: the MCPError ``call(client)`` raises on an SDK client of that protocol."""
    def refused_by(mode: str, call) -> MCPError:
        async def use():
            async with mcp_client(mcp_server, mode=mode) as client:
                with pytest.raises(MCPError) as refused:
                    await call(client)
                return refused.value

        return anyio.run(use)

    return refused_by


def _assert_invalid_params(error: dict, code: str) -> None:
    assert error["code"] == -32602, error
    assert (error.get("data") or {}).get("code") == code, error
    assert not any(word in error["message"] for word in DATABASE_WORDS), error


def _as_wire(error: MCPError) -> dict:
    return {"code": error.code, "message": error.message, "data": error.data}


# ------------------------------------------------------------------------- tools/call names

@BOTH_MODES
def test_a_tool_name_with_a_nul_is_invalid_params_and_records_nothing(refusal, mode):
    error = refusal(mode, lambda client: client.call_tool("weather\x00get_forecast_v1", WEATHER_ARGS))
    _assert_invalid_params(_as_wire(error), "malformed_request")
    assert not Proposal.objects.exists()


def test_a_tool_name_of_100000_characters_is_invalid_params_and_records_nothing(refusal):
    # Legacy: a 2026-07-28 client mirrors the name into the Mcp-Name header, which the HTTP server refuses.
    error = refusal("legacy", lambda client: client.call_tool("x" * 100_000, WEATHER_ARGS))
    _assert_invalid_params(_as_wire(error), "malformed_request")
    assert "500 characters" in error.message  # the longest name a call may give, as on REST
    assert not Proposal.objects.exists()


# ------------------------------------------------------------------------- _meta["dev.toolops/run"]

@BOTH_MODES
def test_a_run_in_meta_that_names_none_of_the_agents_runs_is_invalid_params(refusal, mode):
    for run in (str(uuid.UUID(int=7)), "not-a-run", "\x00", "r" * 100_000):
        meta = {"dev.toolops/run": run}
        for call in (lambda client: client.list_tools(meta=meta), lambda client: client.call_tool(WEATHER, WEATHER_ARGS, meta=meta)):
            error = refusal(mode, call)
            _assert_invalid_params(_as_wire(error), "unknown_run")
            assert len(error.message) < 200  # the id is not echoed whole
    assert not Proposal.objects.exists() and not ModelCall.objects.exists()


# ------------------------------------------------------------------------- what the record keeps of the client's labels

def test_a_json_rpc_id_no_record_can_hold_still_gets_its_call_answered_under_it(mcp_server, demo_agent):
    """The JSON-RPC id is the client's to choose: the call is admitted and answered under it, and
    the record keeps it in a form the database can hold (NUL and lone surrogates replaced, cut)."""
    for request_id in ("call\x00one", "call\udc80two", "c" * 100_000):
        answer = httpx2.post(mcp_server.url, timeout=30, **modern_request(
            "tools/call", {"name": WEATHER, "arguments": WEATHER_ARGS}, request_id=request_id)).json()
        assert answer.get("id") == request_id and "result" in answer, str(answer)[:500]
    recorded = sorted(p.origin["request_id"] for p in Proposal.objects.all())
    assert recorded == ["call\ufffdone", "call\ufffdtwo", "c" * 200]


def test_a_trace_context_no_record_can_hold_is_kept_storable_or_ignored(mcp_server, demo_agent):
    for meta in ({"tracestate": "vendor=\x00"}, {"tracestate": "vendor=\udc80"}, {"traceparent": 7, "tracestate": ["x"]}):
        answer = httpx2.post(mcp_server.url, timeout=30, **modern_request(
            "tools/call", {"name": WEATHER, "arguments": WEATHER_ARGS, "_meta": meta})).json()
        assert "result" in answer, answer
    assert sorted(p.origin.get("tracestate", "") for p in Proposal.objects.all()) == ["", "vendor=\ufffd", "vendor=\ufffd"]
