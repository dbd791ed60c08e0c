"""The support console in a real browser: resolve an unknown transfer, scoping, four-eyes, screenshots."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from invocations_app.models import Event, ToolMessage
from invocations_app.runs import model_call_create, run_finish
from invocations_app.transitions import event_append
from tests.builders import allow_approving, allow_resolving, CALENDAR_ARGS, PASSWORD, make_demo_spec, make_staff
from tests.conftest import REPO_ROOT
from tests.control.test_support_console import (
    PAYMENT_ARGS, make_finance_agent, make_planner, make_unknown, open_but_nobody_listens,
)

pytestmark = pytest.mark.browser

QUEUE = "/console/unknown-outcomes/"
QUEUE_SHOT = REPO_ROOT / "docs" / "unknown-outcome-queue.png"
RECORD_SHOT = REPO_ROOT / "docs" / "call-record.png"


@pytest.fixture
def payments():
    return make_demo_spec(name="payments.transfer")


@pytest.fixture
def finance():
    return make_finance_agent()


def login_as(browser, live_server, user):
    """A second signed-in page in its own browser context (another person at another desk)."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    return page


def actions_of(page, invocation):
    return page.locator(f'[data-testid="action-row"][data-invocation-id="{invocation.pk}"]')


def forged_post(page, url: str, form: dict) -> tuple[int, str]:
    """POST a form with the page's session and CSRF token, as a hand-crafted request would."""
    return page.evaluate(
        """async ([url, form]) => {
            const token = document.cookie.split("; ").find(c => c.startsWith("csrftoken=")).split("=")[1];
            const body = new URLSearchParams({csrfmiddlewaretoken: token, ...form});
            const r = await fetch(url, {method: "POST", body, credentials: "same-origin"});
            return [r.status, await r.text()];
        }""",
        [url, form],
    )


def test_it_lets_support_look_up_then_mark_an_unknown_transfer_not_committed(login, live_server, payments, finance,
                                                                             settings):
    open_but_nobody_listens(settings)
    unknown = make_unknown(finance, payments, PAYMENT_ARGS)
    support = make_staff(username="support")
    allow_resolving(user=support, spec=payments)
    page = login(support)
    page.goto(live_server.url + QUEUE)

    row = page.locator(f"#unknown-{unknown.pk}")
    expect(row.get_by_test_id("tool")).to_have_text("payments.transfer@1")
    expect(row.get_by_test_id("tenant")).to_have_text("acme")
    expect(row.get_by_test_id("arguments")).to_contain_text("to_account: acme-supplier-42")
    expect(row.get_by_test_id("attempts")).to_contain_text("1")
    expect(row.get_by_test_id("last-error")).to_contain_text("ReadTimeout talking to the tool")
    expect(row.get_by_test_id("history-item")).to_have_count(1)
    expect(page.get_by_test_id("unknown-count")).to_have_text("1")

    # 1. Look up now: the answer is shown, nothing changes.
    actions = actions_of(page, unknown)
    actions.get_by_test_id("reason").fill("customer asks whether the money left")
    actions.get_by_test_id("lookup").click()
    expect(page.locator(".messagelist .info")).to_contain_text("answered: unknown — the tool could not be reached")
    expect(page.locator(".messagelist .info")).to_contain_text("Nothing was changed")
    expect(row.get_by_test_id("lookup-answer")).to_contain_text("unknown — the tool could not be reached")
    expect(row.locator('[data-kind="support_lookup"]')).to_contain_text("support")
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"
    assert Event.objects.get(invocation=unknown, kind="support_lookup").actor == "user:support"

    # 2. Mark not committed, with evidence.
    actions.get_by_test_id("evidence").fill("Bank statement 2026-07-19: no debit to acme-supplier-42 (ticket SUP-881)")
    actions.get_by_test_id("reason").fill("the bank confirms the transfer never left")
    actions.get_by_test_id("mark-not-committed").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is FAILED_BEFORE_COMMIT")
    expect(page.locator(".messagelist .success")).to_contain_text("a tool message was given back to the run")
    expect(page.locator(f"#unknown-{unknown.pk}")).to_have_count(0)
    expect(page.get_by_test_id("queue-empty")).to_be_visible()

    unknown.refresh_from_db()
    assert (unknown.state, unknown.commit_status) == ("FAILED_BEFORE_COMMIT", "not_committed")
    applied = Event.objects.get(invocation=unknown, kind="resolution_applied")
    assert applied.actor == "user:support" and "SUP-881" in applied.data["evidence"]
    assert ToolMessage.objects.filter(invocation=unknown).count() == 3

    # The record of the call, after the agent's next model call carried the message back.
    later = model_call_create(run=unknown.run, tool_refs=[payments.ref], fmt="openai", context=[str(unknown.pk)])
    page.goto(f"{live_server.url}/console/calls/{unknown.pk}/")
    for n in range(1, 9):
        expect(page.get_by_test_id(f"record-q{n}")).to_be_visible()
    expect(page.get_by_test_id("state")).to_have_text("FAILED_BEFORE_COMMIT")
    expect(page.get_by_test_id("rendered-definition")).to_contain_text("payments-transfer_v1")
    expect(page.get_by_test_id("raw-text")).to_contain_text('"to_account": "acme-supplier-42"')
    expect(page.get_by_test_id("raw-hex")).to_contain_text(bytes(unknown.proposal.arguments_bytes)[:8].hex(" "))
    expect(page.get_by_test_id("validation")).to_contain_text("jsonschema")
    expect(page.get_by_test_id("confirmation-state")).to_have_text("approved")
    expect(page.get_by_test_id("attempt")).to_have_count(1)
    expect(page.get_by_test_id("commit-status")).to_have_text("not_committed")
    expect(page.get_by_test_id("resolution-history")).to_contain_text("look up now: unknown — the tool could not be reached")
    expect(page.get_by_test_id("tool-message")).to_have_count(3)
    stored = bytes(ToolMessage.objects.get(invocation=unknown, format="openai").message_bytes).decode()
    expect(page.locator('[data-testid="tool-message"][data-format="openai"] [data-testid="message-text"]')).to_have_text(stored)
    expect(page.get_by_test_id("later-model-call")).to_have_attribute("data-model-call-id", str(later.pk))
    RECORD_SHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(RECORD_SHOT), full_page=True)
    assert RECORD_SHOT.stat().st_size > 10_000


def test_it_hides_the_call_from_a_user_without_resolve_and_refuses_their_posts(login, live_server, payments, finance):
    unknown = make_unknown(finance, payments, PAYMENT_ARGS)
    stranger = make_staff(username="stranger")
    # An approver of another tool in the call's tenant: refused (403), not hidden (404).
    allow_approving(user=stranger, spec=make_demo_spec(name="calendar.create_event"), tenant=unknown.tenant)
    page = login(stranger)
    page.goto(live_server.url + QUEUE)
    expect(page.get_by_test_id("queue-empty")).to_be_visible()
    expect(page.get_by_test_id("unknown-row")).to_have_count(0)
    assert "acme-supplier-42" not in page.content()

    for verb, form in [("mark-not-committed", {"evidence": "forged", "reason": "forged"}), ("lookup", {"reason": "forged"}),
                       ("mark-committed", {"external_resource_id": "trf_X", "evidence": "forged", "reason": "forged"})]:
        status, body = forged_post(page, f"{live_server.url}{QUEUE}{unknown.pk}/{verb}", form)
        assert status == 403, verb
        assert "CSRF" not in body, "refused by the guardian check, not by CSRF"
    response = page.goto(f"{live_server.url}/console/calls/{unknown.pk}/")
    assert response.status == 403
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"
    assert not Event.objects.filter(invocation=unknown, actor="user:stranger").exists()


def test_it_needs_a_second_person_to_finish_a_four_eyes_resolution(browser, login, live_server, finance):
    spec = make_demo_spec(name="payments.transfer", four_eyes=True)
    unknown = make_unknown(finance, spec, PAYMENT_ARGS)
    alice, bob = make_staff(username="alice"), make_staff(username="bob")
    for user in (alice, bob):
        allow_resolving(user=user, spec=spec)

    page = login(alice)
    page.goto(live_server.url + QUEUE)
    expect(page.locator(f"#unknown-{unknown.pk}").get_by_test_id("four-eyes")).to_be_visible()
    actions = actions_of(page, unknown)
    actions.get_by_test_id("evidence").fill("Bank statement: no debit")
    actions.get_by_test_id("reason").fill("the bank confirms nothing left")
    actions.get_by_test_id("mark-not-committed").click()
    expect(page.locator(".messagelist .success")).to_contain_text("a second person must confirm it")
    pending = actions.get_by_test_id("pending-resolution")
    expect(pending).to_contain_text("alice proposed mark not committed")
    expect(actions.get_by_test_id("confirm")).to_be_disabled()
    expect(actions.get_by_test_id("proposer-note")).to_be_visible()
    seq = pending.get_attribute("data-proposal-seq")

    # Alice confirms her own proposal by posting the form directly: refused, nothing changes.
    status, body = forged_post(page, f"{live_server.url}{QUEUE}{unknown.pk}/confirm", {"proposal_seq": seq, "reason": "me"})
    assert status == 200 and "a different person must confirm it" in body
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"
    assert not ToolMessage.objects.filter(invocation=unknown).exists()

    # Bob, at his own desk, confirms it.
    bob_page = login_as(browser, live_server, bob)
    try:
        bob_page.goto(live_server.url + QUEUE)
        bob_actions = actions_of(bob_page, unknown)
        expect(bob_actions.get_by_test_id("pending-resolution")).to_contain_text("alice proposed")
        bob_actions.get_by_test_id("second-reason").fill("statement checked, agree")
        bob_actions.get_by_test_id("confirm").click()
        expect(bob_page.locator(".messagelist .success")).to_contain_text("is FAILED_BEFORE_COMMIT")
    finally:
        bob_page.context.close()
    unknown.refresh_from_db()
    assert unknown.state == "FAILED_BEFORE_COMMIT"
    assert Event.objects.get(invocation=unknown, kind="resolution_confirmed").actor == "user:bob"


@contextmanager
def minutes_ago(minutes: float):
    """Write the scene as if it happened ``minutes`` ago (events are append-only: no back-dating later)."""
    real_now = timezone.now
    shift = timedelta(minutes=minutes)
    with mock.patch("django.utils.timezone.now", side_effect=lambda: real_now() - shift):
        yield


def test_it_saves_a_screenshot_of_the_queue_for_the_readme(login, live_server, payments, finance, settings):
    from worker.support import resolution_lookup, resolution_mark_not_committed

    open_but_nobody_listens(settings)  # the look-up below is "not reached", as in production with the tool down

    calendar = make_demo_spec(name="calendar.create_event")
    careful = make_demo_spec(name="payments.transfer", four_eyes=True, version=2)
    planner = make_planner()
    payroll = make_finance_agent(tenant_slug="initech", name="payroll-bot", currency="USD")
    alice = make_staff(username="alice")
    for spec in (payments, careful):
        allow_resolving(user=alice, spec=spec)

    with minutes_ago(95):
        make_unknown(finance, payments, PAYMENT_ARGS)
    with minutes_ago(41):
        event = make_unknown(planner, calendar, {**CALENDAR_ARGS, "calendar_id": "work", "title": "Board review"},
                             error={"code": "outcome_unknown", "message": "ConnectionResetError after the request was sent"})
    for minutes in (40, 30):
        with minutes_ago(minutes):
            event_append(invocation=event, kind="reconciliation_lookup",
                         data={"committed": None, "external_resource_id": None, "detail": {"status": 409}})
    with minutes_ago(23):
        looked = make_unknown(payroll, payments, {"to_account": "contractor-7", "amount": {"amount": "480", "currency": "USD"},
                                                  "memo": "July invoice"})
    with minutes_ago(4):
        resolution_lookup(invocation=looked, user=alice, reason="contractor says nothing arrived")
    with minutes_ago(12):
        big = make_unknown(payroll, careful, {"to_account": "landlord-hq", "amount": {"amount": "4200", "currency": "USD"},
                                              "memo": "Q3 rent"})
    with minutes_ago(2):
        resolution_mark_not_committed(invocation=big, user=alice, evidence="Treasury ledger shows no outgoing wire on 07-19",
                                      reason="landlord reports no payment")
    with minutes_ago(6):
        ended = make_unknown(finance, payments, {**PAYMENT_ARGS, "amount": {"amount": "99.90", "currency": "EUR"},
                                                 "memo": "Refund 31"})
        run_finish(run=ended.run, reason="wall-clock budget exhausted")

    ops = make_staff(username="ops", superuser=True)
    page = login(ops)
    page.goto(live_server.url + QUEUE)
    expect(page.get_by_test_id("unknown-row")).to_have_count(5)
    expect(page.get_by_test_id("pending-resolution")).to_have_count(1)
    expect(page.get_by_test_id("resend")).to_have_count(1)
    QUEUE_SHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(QUEUE_SHOT), full_page=True)
    assert QUEUE_SHOT.stat().st_size > 10_000
