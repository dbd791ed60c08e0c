"""Issue 32 in a real browser: from the tenant page a new person becomes an approver of one tool in
two page loads, signs in, lands on their queue and approves a call; a Support person lands on the
unknown outcomes and resolves one. Neither sees "You don't have permission" nor a plumbing list, and
every page they use passes axe-core with no serious or critical violation."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from invocations_app.models import Confirmation
from specs_app.people import assign_role
from tests.browser.accessibility import assert_accessible
from tests.conftest import REPO_ROOT
from tests.builders import (
    CALENDAR_ARGS, PASSWORD, make_demo_spec, make_grant, make_planner, make_staff, make_subject, pending_confirmation,
)
from tests.control.test_support_console import PAYMENT_ARGS, make_unknown, open_but_nobody_listens

pytestmark = pytest.mark.browser

PEOPLE_SHOT = REPO_ROOT / "docs" / "people-page.png"  # docs/how-to/people-and-grants.md

NO_PERMISSION = "have permission to view or edit anything"
PLUMBING_LISTS = ("/invocations_app/webhookdelivery/", "/invocations_app/modelcall/", "/specs_app/apitoken/",
                  "/specs_app/upstreamtool/", "/specs_app/personaltoken/")


def new_desk(browser):
    """Another person at another desk: a fresh browser context."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(10_000)
    return context.new_page()


def sign_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def assert_no_refusal_nor_plumbing(page) -> None:
    html = page.content()
    assert NO_PERMISSION not in html
    assert not [href for href in PLUMBING_LISTS if f'href="{href}"' in html]


def add_person(page, *, email: str, role: str, tool_ref: str) -> str:
    """From the tenant page: "Add a person", fill the one form, submit. The set-password link."""
    page.get_by_test_id("add-person").click()
    page.get_by_label("…or their e-mail").fill(email)
    page.locator(f"input[name=role][value={role}]").check()
    page.get_by_label(tool_ref, exact=False).check()
    page.get_by_label("Why (kept in the audit log)").fill("joins the desk")
    page.get_by_test_id("person-add-submit").click()
    expect(page.get_by_test_id("person-added")).to_contain_text(email)
    return page.get_by_test_id("set-password-link").get_attribute("href")


def choose_password(browser, link: str):
    page = new_desk(browser)
    page.goto(link)
    page.fill("#id_new_password1", PASSWORD)
    page.fill("#id_new_password2", PASSWORD)
    page.get_by_role("button").filter(has_text="password").click()
    return page


def test_a_new_approver_and_a_support_person_are_named_from_the_tenant_page_and_do_their_work(
        browser, page, live_server, settings):
    calendar = make_demo_spec(name="calendar.create_event")
    payments = make_demo_spec(name="payments.transfer")
    planner = make_planner()  # tenant acme
    acme = planner.tenant
    pending = pending_confirmation(subject=planner, spec=calendar, arguments=CALENDAR_ARGS)
    finance = make_subject(tenant=acme, name="finance-bot")
    make_grant(subject=finance, capability="payments.transfer", operation_class="create",
               limits={"currency": "EUR", "max_amount_per_call": 500_000})
    open_but_nobody_listens(settings)
    unknown = make_unknown(finance, payments, PAYMENT_ARGS)
    ada = make_staff(username="ada")
    assign_role(actor=make_staff(username="root", superuser=True), tenant=acme, person=ada, role="tenant_admin")

    # The tenant admin signs in and lands on the tenant's page.
    sign_in(page, live_server, "ada")
    assert page.url == f"{live_server.url}/console/tenants/acme/"
    assert_no_refusal_nor_plumbing(page)
    assert_accessible(page, "people")

    # From the tenant page to a working approver: two page loads (the form, its answer).
    loads = []
    page.on("framenavigated", lambda frame: loads.append(frame.url) if frame == page.main_frame else None)
    page.get_by_test_id("add-person").click()
    assert_accessible(page, "add a person")
    page.go_back()
    loads.clear()
    link = add_person(page, email="carol@example.invalid", role="approver", tool_ref=calendar.ref)
    assert len(loads) == 2, loads
    expect(page.get_by_test_id("person-added")).to_contain_text(f"Approver of Acme for {calendar.ref}")

    # Carol chooses her password, signs in, lands on her queue and approves the call.
    carol = choose_password(browser, link)
    sign_in(carol, live_server, "carol@example.invalid")
    assert carol.url == f"{live_server.url}/console/confirmations/"
    assert_no_refusal_nor_plumbing(carol)
    assert_accessible(carol, "confirmation queue")
    carol.goto(f"{live_server.url}/console/confirmations/{pending.pk}/")
    assert_accessible(carol, "confirmation")
    carol.goto(f"{live_server.url}/console/confirmations/{pending.pk}/edit")
    expect(carol.locator("h1")).to_be_visible()
    assert_accessible(carol, "approve with edits")
    carol.goto(f"{live_server.url}/console/confirmations/")
    row = carol.locator(f"#confirmation-{pending.pk}")
    row.get_by_test_id("reason").fill("planned with the team")
    row.get_by_test_id("approve").click()
    expect(carol.locator(".messagelist .success")).to_contain_text("is PREPARED")
    pending.refresh_from_db()
    assert pending.state == "approved" and pending.decided_by.username == "carol@example.invalid"
    carol.goto(f"{live_server.url}/console/profile/")
    expect(carol.get_by_test_id("may-decide")).to_contain_text(calendar.ref)
    assert_no_refusal_nor_plumbing(carol)
    carol.goto(f"{live_server.url}/")
    assert_no_refusal_nor_plumbing(carol)

    # A Support person of the payments tool, named the same way, resolves the unknown transfer.
    page.goto(f"{live_server.url}/console/tenants/acme/")
    link = add_person(page, email="sam@example.invalid", role="support", tool_ref=payments.ref)
    sam = choose_password(browser, link)
    sign_in(sam, live_server, "sam@example.invalid")
    assert sam.url == f"{live_server.url}/console/unknown-outcomes/"
    assert_no_refusal_nor_plumbing(sam)
    assert_accessible(sam, "unknown outcomes")
    actions = sam.locator(f'[data-testid="action-row"][data-invocation-id="{unknown.pk}"]')
    actions.get_by_test_id("evidence").fill("Bank statement: no debit to acme-supplier-42 (ticket SUP-881)")
    actions.get_by_test_id("reason").fill("the bank confirms the transfer never left")
    actions.get_by_test_id("mark-not-committed").click()
    expect(sam.locator(".messagelist .success")).to_contain_text("is FAILED_BEFORE_COMMIT")
    unknown.refresh_from_db()
    assert unknown.commit_status == "not_committed"
    sam.goto(f"{live_server.url}/console/calls/{unknown.pk}/")
    assert_accessible(sam, "call record")
    assert_no_refusal_nor_plumbing(sam)

    # The tenant page now lists both, with their tools.
    page.goto(f"{live_server.url}/console/tenants/acme/")
    expect(page.locator('[data-person="carol@example.invalid"][data-role="approver"]')).to_contain_text(calendar.ref)
    expect(page.locator('[data-person="sam@example.invalid"][data-role="support"]')).to_contain_text(payments.ref)
    page.screenshot(path=str(PEOPLE_SHOT), full_page=True)
    assert Confirmation.objects.filter(state="approved").count() == 2  # carol's, and the unknown call's own


def test_adding_a_person_works_with_the_keyboard_alone(page, live_server):
    """Tab reaches every control of "Add a person" in reading order; arrows pick the role, Space
    ticks a tool, Enter submits — no control needs a mouse."""
    calendar = make_demo_spec(name="calendar.create_event")
    acme = make_planner().tenant
    ada = make_staff(username="ada")
    assign_role(actor=make_staff(username="root", superuser=True), tenant=acme, person=ada, role="tenant_admin")
    sign_in(page, live_server, "ada")
    page.get_by_test_id("add-person").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/people/add")

    page.locator("#id_person").focus()
    order = []
    for _ in range(12):
        order.append(page.evaluate("document.activeElement.id || document.activeElement.dataset.testid || ''"))
        page.keyboard.press("Tab")
    assert order[:3] == ["id_person", "id_email", "id_role_0"]  # a radio group is one tab stop
    assert order.index("id_tools_0") < order.index("id_reason") < order.index("person-add-submit")

    page.locator("#id_email").focus()
    page.keyboard.type("kim@example.invalid")
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")  # Approver → Support
    assert page.locator("#id_role_1").is_checked()
    page.keyboard.press("ArrowUp")  # back to Approver
    page.locator("#id_tools_0").focus()
    page.keyboard.press("Space")
    assert page.locator("#id_tools_0").is_checked()
    page.locator("#id_reason").focus()
    page.keyboard.type("keyboard only")
    page.get_by_test_id("person-add-submit").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("person-added")).to_contain_text(f"Approver of {acme.name} for {calendar.ref}")
