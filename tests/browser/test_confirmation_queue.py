"""The confirmation queue in a real browser: approve a pending call, scoping, forged posts, screenshot."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Case, F, When
from guardian.shortcuts import assign_perm
from playwright.sync_api import expect

from invocations_app.models import Confirmation
from tests.builders import (
    allow_approving, make_planner, pending_confirmation,
    CALENDAR_ARGS, admit_proposal, make_demo_spec, make_grant, make_staff, make_subject, make_tenant,
)
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.browser

QUEUE = "/console/confirmations/"
SCREENSHOT = REPO_ROOT / "docs" / "confirmation-queue.png"


@pytest.fixture
def calendar():
    return make_demo_spec(name="calendar.create_event")


@pytest.fixture
def planner():
    return make_planner()


@pytest.fixture
def pending(calendar, planner) -> Confirmation:
    return pending_confirmation(subject=planner, spec=calendar, arguments=CALENDAR_ARGS)


def test_it_lets_an_approver_approve_the_pending_calendar_call(login, live_server, calendar, planner, pending):
    approver = make_staff(username="approver")
    allow_approving(user=approver, spec=calendar)
    page = login(approver)
    page.goto(live_server.url + QUEUE)

    row = page.locator(f"#confirmation-{pending.pk}")
    expect(row.get_by_test_id("tool")).to_have_text("calendar.create_event@1")
    arguments = row.get_by_test_id("arguments")
    expect(arguments).to_contain_text("title: Quarterly planning")
    expect(arguments).to_contain_text("calendar_id: primary")
    expect(arguments).to_contain_text("duration_minutes: 45")
    digest = row.get_by_test_id("digest")
    expect(digest).to_have_text(pending.digest[:12])
    expect(digest).to_have_attribute("title", pending.digest)
    expect(row.locator("input[name=digest_seen]")).to_have_value(pending.digest)
    expect(row.get_by_test_id("subject")).to_have_text("planner")
    expect(row.get_by_test_id("tenant")).to_have_text("acme")
    expect(row.get_by_test_id("time-left")).to_contain_text("min")
    expect(page.get_by_test_id("pending-count")).to_have_text("1")

    # The live count: a call proposed while the page is open shows up within one poll (5 s).
    admit_proposal(subject=planner, spec=calendar, arguments={**CALENDAR_ARGS, "title": "Board review"})
    expect(page.get_by_test_id("pending-count")).to_have_text("2", timeout=12_000)
    expect(page.get_by_test_id("queue-changed")).to_be_visible()

    row.get_by_test_id("reason").fill("agreed in Monday's stand-up")
    row.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is PREPARED")
    expect(page.locator(f"#confirmation-{pending.pk}")).to_have_count(0)
    expect(page.get_by_test_id("decided-row").first.get_by_test_id("state")).to_have_text("approved")

    pending.refresh_from_db()
    pending.invocation.refresh_from_db()
    assert pending.state == "approved" and pending.decided_by == approver
    assert pending.reason == "agreed in Monday's stand-up"
    assert pending.invocation.state == "PREPARED"


def test_it_shows_an_empty_queue_without_the_permission_and_refuses_a_forged_post(login, live_server, pending):
    stranger = make_staff(username="stranger")
    # An approver in the call's tenant, of no tool: the forged post is refused (403), not hidden (404).
    assign_perm("specs_app.approve_calls", stranger, pending.tenant)
    page = login(stranger)
    page.goto(live_server.url + QUEUE)
    expect(page.get_by_test_id("queue-empty")).to_be_visible()
    expect(page.get_by_test_id("confirmation-row")).to_have_count(0)
    expect(page.get_by_test_id("pending-count")).to_have_text("0")
    assert pending.digest[:12] not in page.content()

    # Post the approve form directly, with a valid session and CSRF token.
    status, body = page.evaluate(
        """async ([url, digest]) => {
            const token = document.cookie.split("; ").find(c => c.startsWith("csrftoken=")).split("=")[1];
            const body = new URLSearchParams({csrfmiddlewaretoken: token, digest_seen: digest, reason: "forged"});
            const r = await fetch(url, {method: "POST", body, credentials: "same-origin"});
            return [r.status, await r.text()];
        }""",
        [f"{live_server.url}{QUEUE}{pending.pk}/approve", pending.digest],
    )
    assert status == 403
    assert "CSRF" not in body, "refused by the guardian check, not by CSRF"
    pending.refresh_from_db()
    pending.invocation.refresh_from_db()
    assert pending.state == "pending" and pending.invocation.state == "AUTHORIZED"


def test_it_saves_a_screenshot_of_the_queue_for_the_readme(login, live_server, calendar, planner, pending):
    globex = make_subject(tenant=make_tenant(slug="globex"), name="assistant")
    make_grant(subject=globex, capability="calendar.write", operation_class="create")
    payments = make_demo_spec(name="payments.transfer")
    finance = make_subject(tenant=planner.tenant, name="finance-bot")
    make_grant(subject=finance, capability="payments.transfer", operation_class="create",
               limits={"max_amount_per_call": 500_000})
    admit_proposal(subject=globex, spec=calendar, timezone_name="America/New_York", arguments={
        "calendar_id": "Team-Offsite", "title": "Offsite logistics call", "start": "tomorrow 14:30", "duration_minutes": 30,
    })
    admit_proposal(subject=finance, spec=payments, arguments={
        "to_account": "acme-supplier-42", "amount": {"amount": "1250.00", "currency": "EUR"}, "memo": "Invoice 2026-117",
    })
    lunch = admit_proposal(subject=planner, spec=calendar, arguments={**CALENDAR_ARGS, "title": "Lunch"})
    denied = Confirmation.objects.get(invocation=lunch)
    ops = make_staff(username="ops", superuser=True)
    from invocations_app.confirmations import confirmation_deny

    confirmation_deny(confirmation=denied, user=ops, reason="duplicate of an existing event")
    # Age the scene so the page shows realistic waiting times rather than "0 minutes".
    for minutes, confirmation in zip((12, 7, 3, 9), Confirmation.objects.order_by("created_at")):
        shift = timedelta(minutes=minutes)
        Confirmation.objects.filter(pk=confirmation.pk).update(
            created_at=F("created_at") - shift, expires_at=F("expires_at") - shift,
            decided_at=Case(When(decided_at__isnull=True, then=None), default=F("decided_at") - timedelta(minutes=2)),
        )

    page = login(ops)
    page.goto(live_server.url + QUEUE)
    expect(page.get_by_test_id("confirmation-row")).to_have_count(3)
    expect(page.get_by_test_id("decided-row")).to_have_count(1)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000
