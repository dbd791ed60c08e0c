"""Every tool name ToolOps lists is one each model API accepts as a function name: the REST
listing in every format, and MCP ``tools/list`` with its built-in status tool (issue 33: the
status tool was ``toolops.invocation_status``, whose dot OpenAI refuses)."""
from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from devtools.demo import DEMO_TOOLSPECS
from mcp_server.calls import LEGACY_STATUS_TOOL, STATUS_TOOL, McpRequest, mcp_tools_list
from tests.builders import Agent, make_demo_spec, make_grant, make_token, make_toolspec
from toolops.model_io.rendering import FORMATS, MODEL_FACING_MAX_LEN

pytestmark = pytest.mark.django_db

# Each ecosystem's documented rule for a function (tool) name.
NAME_RULES = {
    # OpenAI function calling: "a-z, A-Z, 0-9, or contain underscores and dashes, max length 64".
    "openai": re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z"),
    # Anthropic tool use: name must match ^[a-zA-Z0-9_-]{1,64}$.
    "anthropic": re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z"),
    # Gemini FunctionDeclaration: starts with a letter or underscore; letters, digits, "_", ".",
    # ":" and "-"; at most 64.
    "gemini": re.compile(r"\A[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}\Z"),
}
# What ToolOps promises: the intersection, as the issue states it.
LISTED_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")


def refused_by(name: str) -> list[str]:
    return [ecosystem for ecosystem, rule in NAME_RULES.items() if not rule.match(name)]


@pytest.fixture
def agent():
    """An agent granted every demo tool, plus one whose name is as long as a ToolSpec's may be."""
    subject, token = make_token()
    for data in DEMO_TOOLSPECS:
        make_demo_spec(name=data["name"])
    for capability, operation in (("weather.read", "read"), ("calendar.write", "create"), ("payments.transfer", "create"),
                                  ("web.read", "read")):
        make_grant(capability=capability, operation_class=operation, subject=subject)
    longest = "a" * (MODEL_FACING_MAX_LEN - len("_v1"))
    make_toolspec(name=longest)
    agent = Agent(APIClient(), token)
    agent.subject = subject
    return agent


def test_the_rules_refuse_what_each_ecosystem_refuses():
    assert refused_by("toolops.invocation_status") == ["openai", "anthropic"]
    assert refused_by("9lives") == ["gemini"]
    assert refused_by("a" * 65) == ["openai", "anthropic", "gemini"]
    assert refused_by("calendar-create_event_v1") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_name_the_rest_listing_gives_is_accepted_by_every_model(agent, fmt):
    body = agent.get("/api/v1/tools", format=fmt).json()
    names = list(body["name_map"])
    assert len(names) == len(DEMO_TOOLSPECS) + 1
    assert max(len(n) for n in names) == MODEL_FACING_MAX_LEN
    for tool in body["tools"]:
        name = tool["function"]["name"] if fmt == "openai" else tool["name"]
        assert name in names
        assert LISTED_NAME.match(name) and refused_by(name) == [], name


def test_every_name_mcp_tools_list_gives_is_accepted_by_every_model(agent):
    request = McpRequest(subject=agent.subject, session_id="s-1", request_id=1, protocol_version="2025-11-25", meta={})
    names = [tool["name"] for tool in mcp_tools_list(request=request)]
    assert STATUS_TOOL in names and LEGACY_STATUS_TOOL not in names
    assert len(names) == len(DEMO_TOOLSPECS) + 2
    for name in names:
        assert LISTED_NAME.match(name) and refused_by(name) == [], name
