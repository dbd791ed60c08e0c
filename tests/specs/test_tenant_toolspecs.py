"""ToolSpecs owned by a tenant: listed, granted, admitted and edited inside that tenant only.

A global ToolSpec (no tenant) is listed to every tenant; one owned by ``acme`` is invisible to
``globex`` everywhere a tool is named — the REST listing, a model call's visible set (default and
explicit), MCP ``tools/list``, admission by name, grants — and only acme's tool admins edit it.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test import Client
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from mcp_server.calls import McpRequest, mcp_tools_list
from invocations_app.models import Invocation
from specs_app.models import ToolSpec
from specs_app.selectors import toolspecs_granted_to_subject, toolspecs_visible_to_subject
from specs_app.services import grant_create, toolspec_new_version, toolspec_publish
from tests.builders import Agent, make_capability, make_grant, make_staff, make_subject, make_tenant, make_token, make_toolspec
from toolops import db_guards

pytestmark = pytest.mark.django_db

ARGS = '{"city": "Paris", "date": "2026-07-20"}'


@pytest.fixture
def acme():
    return make_tenant(slug="acme")


@pytest.fixture
def globex():
    return make_tenant(slug="globex")


@pytest.fixture
def shared():
    return make_toolspec(name="weather.get_forecast")


@pytest.fixture
def owned(acme):
    """acme's own forecast tool, needing the same (global) capability as the shared one."""
    return make_toolspec(name="acme.forecast", tenant=acme)


def agent_of(tenant) -> Agent:
    subject = make_subject(tenant=tenant, name="planner")
    subject, token = make_token(subject=subject)
    make_grant(subject=subject)  # weather.read, any city, every version
    agent = Agent(APIClient(), token)
    agent.subject = subject
    return agent


@pytest.fixture
def acme_agent(acme):
    return agent_of(acme)


@pytest.fixture
def globex_agent(globex):
    return agent_of(globex)


# --- listing --------------------------------------------------------------------------------------

def test_the_rest_listing_shows_a_tenants_own_tools_to_it_only(shared, owned, acme_agent, globex_agent):
    assert acme_agent.get("/api/v1/tools").json()["name_map"] == {
        "acme-forecast_v1": "acme.forecast@1", "weather-get_forecast_v1": "weather.get_forecast@1"}
    assert globex_agent.get("/api/v1/tools").json()["name_map"] == {"weather-get_forecast_v1": "weather.get_forecast@1"}


def test_a_model_calls_visible_set_never_holds_another_tenants_tool(shared, owned, globex_agent):
    run = globex_agent.run()
    default = globex_agent.model_call(run["id"])
    assert default["name_map"] == {"weather-get_forecast_v1": "weather.get_forecast@1"}
    resp = globex_agent.post(f"/api/v1/runs/{run['id']}/model-calls", {"tools": ["acme.forecast@1"]})
    assert resp.status_code == 400 and resp.json()["code"] == "unknown_tool"


def test_mcp_tools_list_and_the_granted_set_leave_out_another_tenants_tool(shared, owned, acme_agent, globex_agent):
    assert [s.ref for s in toolspecs_granted_to_subject(subject=acme_agent.subject)] == ["acme.forecast@1", "weather.get_forecast@1"]
    assert [s.ref for s in toolspecs_granted_to_subject(subject=globex_agent.subject)] == ["weather.get_forecast@1"]
    request = McpRequest(subject=globex_agent.subject, session_id="s-1", request_id=1, protocol_version="2025-11-25", meta={})
    assert [t["name"] for t in mcp_tools_list(request=request)] == ["weather-get_forecast_v1", "toolops_invocation_status"]


# --- admission ---------------------------------------------------------------------------------------

def test_admission_refuses_another_tenants_tool_by_name(shared, owned, globex_agent):
    run = globex_agent.run()
    call = globex_agent.model_call(run["id"])
    for name in ("acme.forecast@1", "acme-forecast_v1"):
        inv = globex_agent.propose(call["id"], name=name, arguments=ARGS).json()
        assert inv["state"] == "VALIDATION_REJECTED" and inv["error"]["code"] == "unknown_tool", name


def test_admission_refuses_a_listed_tool_that_another_tenant_has_taken_over(shared, globex_agent, acme):
    """Ownership is checked at admission too, not only when the visible set was recorded. The
    database refuses moving a published tool (``specs_toolspec_guard_published_owner``); the
    admission check is the second line, tested here with that trigger dropped inside the test's
    transaction (rolled back with it)."""
    run = globex_agent.run()
    call = globex_agent.model_call(run["id"])
    with pytest.raises(IntegrityError), transaction.atomic():
        ToolSpec.objects.filter(pk=shared.pk).update(tenant=acme)
    on = f" ON {ToolSpec._meta.db_table}" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {db_guards.TOOLSPEC_OWNER_TRIGGER}{on}")
    ToolSpec.objects.filter(pk=shared.pk).update(tenant=acme)  # an operator moves the tool to acme
    inv = globex_agent.propose(call["id"], name="weather.get_forecast@1", arguments=ARGS).json()
    assert inv["state"] == "VALIDATION_REJECTED" and inv["error"]["code"] == "unknown_tool"
    assert Invocation.objects.get(pk=inv["id"]).tool_spec_id is None


# --- grants --------------------------------------------------------------------------------------------

def _grant(tenant, *, tool_refs):
    root = make_staff(username=f"root-{tenant.slug}", superuser=True)
    return grant_create(user=root, capability=make_capability(name="weather.read"), tenant=tenant, subject=None,
                        scope_kind="any", scope_values=[], limits={}, effect="allow", tool_refs=tool_refs,
                        expires_at=None, reason="test")


def test_a_grant_naming_another_tenants_tool_is_refused(owned, globex):
    with pytest.raises(ValidationError) as refused:
        _grant(globex, tool_refs=["acme.forecast@1"])
    assert "owned by another tenant" in str(refused.value)
    assert _grant(owned.tenant, tool_refs=["acme.forecast@1"]).tool_refs == ["acme.forecast@1"]


def test_an_unpinned_grant_pins_only_the_tools_its_tenant_may_see(shared, owned, globex):
    assert _grant(globex, tool_refs=[]).tool_refs == ["weather.get_forecast@1"]
    assert _grant(owned.tenant, tool_refs=[]).tool_refs == ["acme.forecast@1", "weather.get_forecast@1"]


# --- versions keep their owner ------------------------------------------------------------------------

def test_every_version_of_a_tool_has_the_same_owner(owned, globex):
    draft = toolspec_new_version(spec=owned)
    assert draft.tenant_id == owned.tenant_id
    stray = make_toolspec(name="acme.forecast", version=5, tenant=globex, publish=False)
    with pytest.raises(ValidationError, match="same owner"):
        toolspec_publish(spec=stray)
    global_copy = make_toolspec(name="acme.forecast", version=6, publish=False)
    with pytest.raises(ValidationError, match="same owner"):
        toolspec_publish(spec=global_copy)


def test_the_visible_set_is_global_plus_own(shared, owned, globex):
    assert list(toolspecs_visible_to_subject(subject=make_subject(tenant=globex))) == [shared]


# --- the admin ----------------------------------------------------------------------------------------

def _tool_admin(tenant):
    user = make_staff(username=f"tools-{tenant.slug}")
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_toolspec", "change_toolspec", "add_toolspec"]))
    assign_perm("specs_app.manage_toolspecs_tenant", user, tenant)
    client = Client()
    client.force_login(user)
    return client


def test_a_tenant_tool_admin_edits_its_own_tools_only(acme, globex):
    shared = make_toolspec(name="weather.get_forecast", publish=False)
    mine = make_toolspec(name="acme.forecast", tenant=acme, publish=False)
    theirs = make_toolspec(name="globex.forecast", tenant=globex, publish=False)
    client = _tool_admin(acme)
    listed = client.get("/specs_app/toolspec/").context["cl"].queryset
    assert set(listed) == {shared, mine}
    assert client.get(f"/specs_app/toolspec/{theirs.pk}/change/").status_code == 302  # not found → admin index
    page = client.get(f"/specs_app/toolspec/{mine.pk}/change/")
    assert page.status_code == 200 and page.context["has_change_permission"]
    assert not client.get(f"/specs_app/toolspec/{shared.pk}/change/").context["has_change_permission"]  # global: read-only
    resp = client.post(f"/specs_app/toolspec/{shared.pk}/change/", {"name": "weather.get_forecast", "title": "hijacked"})
    assert resp.status_code == 403
    shared.refresh_from_db()
    assert shared.title != "hijacked"
    tenants = list(page.context["adminform"].form.fields["tenant"].queryset)
    assert tenants == [acme] and page.context["adminform"].form.fields["tenant"].required
