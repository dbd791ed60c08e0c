"""Issue 32 in a real browser: a tenant admin grants payments with a two-tier EUR policy and a
per-minute limit without typing JSON, reads it in words before saving and in the list after;
the grant form and the list pass axe-core."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from specs_app.models import Grant
from specs_app.people import assign_role
from tests.browser.accessibility import assert_accessible
from tests.browser.test_people_roles import sign_in
from tests.conftest import REPO_ROOT
from tests.builders import make_demo_spec, make_staff, make_subject, make_tenant

pytestmark = pytest.mark.browser

PREVIEW_SHOT = REPO_ROOT / "docs" / "grant-preview.png"  # docs/how-to/people-and-grants.md


def test_a_tenant_admin_grants_a_two_tier_eur_policy_without_json(page, live_server):
    payments = make_demo_spec(name="payments.transfer")
    acme = make_tenant(slug="acme")
    make_subject(tenant=acme, name="finance-bot")
    Group.objects.create(name="payments-leads")
    ada = make_staff(username="ada")
    assign_role(actor=make_staff(username="root", superuser=True), tenant=acme, person=ada, role="tenant_admin")
    sign_in(page, live_server, "ada")

    page.get_by_test_id("tenant-grant-new").click()
    assert_accessible(page, "grant form")
    page.get_by_label("Capability").select_option(label="payments.transfer (create)")
    page.get_by_label("Agent").select_option(label="acme/finance-bot")
    page.get_by_label("Scope", exact=True).select_option("any")
    page.get_by_label("Calls per minute").fill("5")
    page.get_by_label("Currency of the amounts below").select_option("EUR")
    page.get_by_label("Amount per call, at most").fill("500.00")
    page.get_by_label(payments.ref, exact=False).check()
    page.get_by_label("tier 1 up to").fill("10.00")
    page.get_by_label("tier 1 then").select_option("allow")
    page.get_by_label("tier 2 up to").fill("500.00")
    page.get_by_label("tier 2 then").select_option("one")
    page.get_by_label("tier 3 then").select_option("two")
    page.get_by_label("Why this grant exists (kept in the audit log)").fill("supplier payments")
    page.get_by_test_id("grant-preview-button").click()

    preview = page.get_by_test_id("grant-preview")
    expect(preview).to_contain_text("finance-bot may create with payments.transfer on any resource")
    expect(preview).to_contain_text("at most 5 calls a minute")
    expect(preview).to_contain_text("up to 10.00 EUR: runs without a person")
    expect(preview).to_contain_text("above 500.00 EUR: 2 approver(s)")
    expect(page.get_by_test_id("own-rule")).to_contain_text(payments.ref)
    assert_accessible(page, "grant form with its preview")
    assert not Grant.objects.exists()
    page.screenshot(path=str(PREVIEW_SHOT), full_page=True)
    page.get_by_test_id("grant-save").click()

    expect(page.get_by_test_id("grant-saved")).to_be_visible()
    words = page.get_by_test_id("grant-words")
    expect(words).to_contain_text("max 500.00 EUR per call")
    expect(words).to_contain_text("up to 500.00 EUR: 1 approver(s)")
    assert_accessible(page, "grant list")
    grant = Grant.objects.get()
    assert grant.limits == {"calls_per_minute": 5, "currency": "EUR", "max_amount_per_call": 50000}
    assert grant.approval_policy == {"currency": "EUR", "thresholds": [
        {"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm", "approvals": 1},
        {"effect": "confirm", "approvals": 2}]}
