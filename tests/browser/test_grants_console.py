"""Granting in the browser: an admin adds a grant, the next proposal is allowed; revoking takes it back."""
from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm
from playwright.sync_api import expect

from specs_app.models import Grant, GrantChange
from tests.builders import admit_proposal, make_demo_spec, make_grant, make_staff, make_subject, make_tenant

pytestmark = pytest.mark.browser

FORECAST = {"city": "Paris", "date": "2026-07-20"}


@pytest.fixture
def weather():
    return make_demo_spec(name="weather.get_forecast")  # read-only, needs weather.read


@pytest.fixture
def planner():
    return make_subject(tenant=make_tenant(slug="acme"), name="planner")


def test_it_lets_an_admin_grant_a_capability_and_the_next_proposal_is_allowed(login, live_server, weather, planner):
    before = admit_proposal(subject=planner, spec=weather, arguments=FORECAST)
    assert before.state == "AUTHORIZATION_REJECTED" and before.error_code == "authorization_denied"

    admin = make_staff(username="root", superuser=True)
    page = login(admin)
    page.goto(f"{live_server.url}/specs_app/grant/add/")
    page.select_option("#id_capability", label="weather.read (read)")
    page.select_option("#id_tenant", label="acme")
    page.select_option("#id_subject", label="acme/planner")
    page.select_option("#id_effect", "allow")
    page.select_option("#id_scope_kind", "any")
    page.fill("#id_scope_values", "[]")
    page.fill("#id_limits", '{"calls_per_minute": 10}')
    page.fill("#id_tool_refs", "[]")
    page.fill("#id_reason", "the planner checks forecasts before booking trips")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist .success")).to_contain_text("was added successfully")

    grant = Grant.objects.get(capability__name="weather.read")
    assert (grant.subject, grant.granted_by, grant.tool_refs) == (planner, admin, ["weather.get_forecast@1"])
    assert grant.limits == {"calls_per_minute": 10}
    assert list(GrantChange.objects.filter(grant=grant).values_list("action", "actor__username")) == [("granted", "root")]

    after = admit_proposal(subject=planner, spec=weather, arguments=FORECAST)
    assert after.state == "AUTHORIZED", after.error_message
    assert after.authorization["decision"] == "allow"


def test_it_lets_a_tenant_admin_revoke_with_a_reason_in_the_browser(login, live_server, weather, planner):
    grant = make_grant(subject=planner)  # weather.read, any city
    other = make_grant(subject=make_subject(tenant=make_tenant(slug="globex")))
    assert admit_proposal(subject=planner, spec=weather, arguments=FORECAST).state == "AUTHORIZED"
    tenant_admin = make_staff(username="acme-admin")
    assign_perm("specs_app.manage_grants_tenant", tenant_admin, planner.tenant)

    page = login(tenant_admin)
    page.goto(f"{live_server.url}/specs_app/grant/")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)  # globex's grant is not listed
    page.check(f"input[name=_selected_action][value='{grant.pk}']")
    page.select_option("select[name=action]", "revoke")
    page.fill("input[name=reason]", "planner retired")
    page.click("button[name=index]")
    expect(page.locator(".messagelist li")).to_contain_text("Revoked 1 grant(s).")

    grant.refresh_from_db()
    assert grant.revoked_by == tenant_admin and grant.revoke_reason == "planner retired"
    assert Grant.objects.get(pk=other.pk).revoked_at is None
    assert admit_proposal(subject=planner, spec=weather, arguments=FORECAST).state == "AUTHORIZATION_REJECTED"
