"""The tutorial "Put an MCP server behind ToolOps" (docs/tutorials/mcp-server.md) in three commands, as written."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from specs_app.models import Grant, GrantChange, ToolSpec
from tests.builders import Agent, make_token

from tests.upstream.conftest import SECRET_REF

pytestmark = pytest.mark.django_db


def test_import_publish_grant_makes_the_tools_callable(notes, capsys):
    User.objects.create_superuser("admin", "admin@example.org", "pw")
    subject, token = make_token()
    call_command("mcp_import", notes.url, "--prefix", "team", "--credential", SECRET_REF,
                 "--lookup", "notes.create=notes.find_by_key")
    call_command("mcp_publish", "--prefix", "team", "--by", "admin", "--confirm-class")
    call_command("grant_tool", "team.notes.search@1", "team.notes.create@1", "--subject",
                 f"{subject.tenant.slug}/{subject.name}", "--by", "admin", "--reason", "notes for the support agent")
    out = capsys.readouterr().out
    assert "readOnlyHint=true" in out and "published (class confirmed)" in out
    assert ToolSpec.objects.filter(name__startswith="team.", status="published").count() == 4
    assert Grant.objects.filter(subject=subject).count() == 2 and GrantChange.objects.filter(action="granted").count() == 2

    agent = Agent(APIClient(), token)
    run = agent.run()
    call = agent.model_call(run["id"])  # the newest published versions, with their pinned descriptions
    shown = {t["function"]["name"]: t["function"]["description"] for t in call["tools"]}
    assert shown["team-notes-search_v1"] == "Search notes by words in their title or body."
    resp = agent.propose(call["id"], name="team-notes-search_v1", arguments=json.dumps({"query": "x"}))
    assert resp.json()["state"] == "AUTHORIZED"
    denied = agent.propose(call["id"], name="team-notes-delete_v1", arguments=json.dumps({"id": "note_1"}))
    assert denied.json()["state"] == "AUTHORIZATION_REJECTED"  # published, but not granted


def test_publishing_without_confirming_leaves_calls_to_a_person(notes, capsys):
    User.objects.create_superuser("admin", "admin@example.org", "pw")
    call_command("mcp_import", notes.url, "--prefix", "unconf", "--credential", SECRET_REF)
    call_command("mcp_publish", "--prefix", "unconf", "--by", "admin", "--tool", "notes.search")
    assert "class NOT confirmed" in capsys.readouterr().out
    assert list(ToolSpec.objects.filter(status="published").values_list("name", flat=True)) == ["unconf.notes.search"]
