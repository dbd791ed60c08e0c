"""Tenancy in a real browser: a tenant's approver sees, counts and opens only that tenant's calls."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from invocations_app.models import Confirmation
from tests.builders import CALENDAR_ARGS, admit_proposal, allow_approving, make_demo_spec, make_grant, make_staff, make_subject, make_tenant

pytestmark = pytest.mark.browser

QUEUE = "/console/confirmations/"


def _planner(slug: str):
    subject = make_subject(tenant=make_tenant(slug=slug), name="planner")
    make_grant(subject=subject, capability="calendar.write", operation_class="create")
    return subject


def _pending(subject, spec, title: str) -> Confirmation:
    invocation = admit_proposal(subject=subject, spec=spec, arguments={**CALENDAR_ARGS, "title": title})
    return Confirmation.objects.get(invocation=invocation, state="pending")


def test_a_tenant_approver_sees_and_counts_only_its_tenants_calls(login, live_server):
    calendar = make_demo_spec(name="calendar.create_event")
    acme, globex = _planner("acme"), _planner("globex")
    mine, theirs = _pending(acme, calendar, "acme offsite"), _pending(globex, calendar, "globex offsite")
    approver = make_staff(username="acme-approver")
    allow_approving(user=approver, spec=calendar, tenant=acme.tenant)
    page = login(approver)
    page.goto(live_server.url + QUEUE)

    expect(page.locator(f"#confirmation-{mine.pk}")).to_be_visible()
    expect(page.locator(f"#confirmation-{theirs.pk}")).to_have_count(0)
    expect(page.get_by_test_id("pending-count")).to_have_text("1")
    # The live count: another tenant's new call never shows up; this tenant's does, within one poll.
    _pending(globex, calendar, "globex board")
    _pending(acme, calendar, "acme board")
    expect(page.get_by_test_id("pending-count")).to_have_text("2", timeout=12_000)
    assert page.get_by_test_id("pending-count").inner_text() == "2"

    resp = page.goto(f"{live_server.url}{QUEUE}{theirs.pk}/")
    assert resp.status == 404
