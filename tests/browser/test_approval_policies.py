"""Approval policies in Chromium: a quorum of two distinct approvers, separation of duties, and a
standing approval that covers the next in-limit call but not an over-limit one."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from invocations_app.models import Confirmation, Event
from tests.builders import allow_approving, OneRun, fresh, make_finance_subject, make_payments_spec, make_staff, payment_args
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.browser

SCREENSHOT = REPO_ROOT / "docs" / "approval-policies.png"


@pytest.fixture
def payments():
    return make_payments_spec()


def approver(username: str, spec):
    user = make_staff(username=username)
    allow_approving(user=user, spec=spec)
    return user


@pytest.fixture
def alice(payments):
    return approver("alice", payments)  # alice@example.invalid, who may approve every tenant's calls


@pytest.fixture
def run(payments, alice):
    return OneRun(subject=make_finance_subject(), spec=payments, on_behalf_of="alice@example.invalid")


def detail_url(live_server, confirmation: Confirmation) -> str:
    return f"{live_server.url}/console/confirmations/{confirmation.pk}/"


def test_a_quorum_of_two_needs_two_different_approvers(browser, page, login, live_server, payments, run):
    invocation = run.propose(payment_args(75000))  # 750.00 EUR: above 500 EUR, two approvers
    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    first, second = approver("first", payments), approver("second", payments)

    login(first).goto(detail_url(live_server, confirmation))
    expect(page.get_by_test_id("approvals-count")).to_have_text("0 of 2")
    page.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is recorded: 1 of 2")
    page.goto(detail_url(live_server, confirmation))
    expect(page.get_by_test_id("approvals-count")).to_have_text("1 of 2")
    expect(page.get_by_test_id("approver")).to_have_text(["first"])
    page.get_by_test_id("approve").click()  # the same approver again
    expect(page.locator(".messagelist .error")).to_contain_text("you already approved this call")
    assert fresh(invocation).state == "AUTHORIZED"
    assert confirmation.approvals.count() == 1

    page.context.clear_cookies()
    login(second).goto(live_server.url + "/console/confirmations/")
    row = page.locator(f"#confirmation-{confirmation.pk}")
    expect(row.get_by_test_id("quorum")).to_have_text("1 of 2 approvals")
    row.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is PREPARED")
    confirmation.refresh_from_db()
    assert confirmation.state == "approved" and fresh(invocation).state == "PREPARED"
    assert list(confirmation.approvals.order_by("at").values_list("user__username", flat=True)) == ["first", "second"]


def test_the_person_the_run_acts_for_cannot_approve(browser, page, login, live_server, payments, run, alice):
    invocation = run.propose(payment_args(2500))  # the run acts for alice@example.invalid: alice
    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    login(alice).goto(detail_url(live_server, confirmation))
    expect(page.get_by_test_id("on-behalf-of")).to_have_text("alice")
    expect(page.get_by_test_id("acting-for")).to_contain_text("you cannot approve its calls")
    expect(page.get_by_test_id("standing-form")).to_have_count(0)
    page.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .error")).to_contain_text("is the person this run acts for")
    confirmation.refresh_from_db()
    assert confirmation.state == "pending" and not confirmation.approvals.exists()
    assert fresh(invocation).state == "AUTHORIZED"


def test_a_standing_approval_covers_the_next_in_limit_call_and_not_an_over_limit_one(browser, page, login, live_server,
                                                                                      payments, run):
    bob = approver("bob", payments)
    first = run.propose(payment_args(2000))
    confirmation = Confirmation.objects.get(invocation=first, state="pending")
    login(bob).goto(detail_url(live_server, confirmation))
    form = page.get_by_test_id("standing-form")
    form.get_by_test_id("standing-minutes").fill("20")
    expect(form.get_by_test_id("standing-currency")).to_have_text("EUR")  # typed as the call's amount reads
    form.get_by_test_id("standing-max-amount").fill("50.00")
    form.get_by_test_id("standing-reason").fill("supplier batch of the day")
    form.get_by_test_id("standing-grant").click()
    expect(page.locator(".messagelist .success")).to_contain_text("further calls of payments.transfer@1 in this run")
    expect(page.get_by_test_id("standing-approval")).to_have_count(1)
    expect(page.get_by_test_id("standing-approval")).to_contain_text("amount ≤ 50.00 EUR")
    assert fresh(first).state == "PREPARED"

    covered = run.propose(payment_args(4999))
    over = run.propose(payment_args(5001))
    assert covered.state == "PREPARED" and over.state == "AUTHORIZED"

    page.goto(f"{live_server.url}/console/calls/{covered.pk}/")
    expect(page.get_by_test_id("standing-reason")).to_contain_text("standing approval of bob")
    expect(page.get_by_test_id("standing-reason")).to_contain_text("supplier batch of the day")
    expect(page.locator("[data-kind=standing_approval_applied]")).to_have_count(1)
    expect(page.get_by_test_id("no-confirmation")).to_be_visible()

    page.goto(f"{live_server.url}/console/confirmations/")
    expect(page.locator(f"[data-confirmation-id='{Confirmation.objects.get(invocation=over).pk}']")).to_have_count(1)
    page.goto(detail_url(live_server, confirmation))
    expect(page.get_by_test_id("standing-covered")).to_have_text("1")
    page.get_by_test_id("standing-revoke-reason").fill("the supplier batch is done")
    page.get_by_test_id("standing-revoke").click()
    expect(page.locator(".messagelist .success")).to_contain_text("covers no further call")
    expect(page.get_by_test_id("standing-revoked")).to_contain_text("the supplier batch is done")
    assert run.propose(payment_args(1500)).state == "AUTHORIZED"
    assert Event.objects.filter(kind="standing_approval_revoked", data__standing_approval_id__isnull=False).count() == 1
    page.screenshot(path=str(SCREENSHOT), full_page=True)
