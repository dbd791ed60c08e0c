"""The approver's view in Chromium: the payment read as money with why and how it was read,
edit-then-approve executed once by a real worker with both digests on the record, and published
ToolSpecs read-only in the admin. Screenshots of the pages land in docs/."""
from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from invocations_app.models import Attempt, Confirmation, Invocation
from specs_app.models import ToolSpec
from tests.builders import allow_approving, admit_proposal, make_demo_spec, make_grant, make_staff, make_subject, make_tenant
from tests.conftest import REPO_ROOT
from tests.integration.conftest import demo_agent, demo_services, module_worker, wait_for, worker, worker_env  # noqa: F401

pytestmark = pytest.mark.browser

PAYMENT = {"to_account": "acme-supplier-42", "amount": {"amount": "12.50", "currency": "EUR"}}
DOCS = REPO_ROOT / "docs"


def _approver_of(spec: ToolSpec):
    approver = make_staff(username="approver")
    allow_approving(user=approver, spec=spec)
    return approver


@pytest.fixture
def payment() -> Confirmation:
    spec = make_demo_spec(name="payments.transfer")
    payer = make_subject(tenant=make_tenant(slug="acme"), name="payer")
    make_grant(subject=payer, capability="payments.transfer", operation_class="create", effect="confirm",
               limits={"max_amount_per_call": 50_000})
    invocation = admit_proposal(subject=payer, spec=spec, arguments=PAYMENT, timezone_name="Asia/Shanghai")
    assert invocation.state == "AUTHORIZED", invocation.error_message
    return Confirmation.objects.select_related("invocation", "tool_spec").get(invocation=invocation, state="pending")


def test_it_shows_the_payment_as_money_with_why_risk_and_the_interpretation_trail(login, live_server, payment):
    approver = _approver_of(payment.tool_spec)
    calendar = make_demo_spec(name="calendar.create_event")
    make_grant(subject=payment.subject, capability="calendar.write", operation_class="create",
               scope_kind="exact", scope_values=["primary"])
    allow_approving(user=approver, spec=calendar)
    meeting = admit_proposal(subject=payment.subject, spec=calendar, timezone_name="Asia/Shanghai", arguments={
        "calendar_id": "primary", "title": "Sign the contract", "start": "tomorrow 09:00", "duration_minutes": 30})
    page = login(approver)
    page.goto(live_server.url + "/console/confirmations/")

    # A time with its zone, and what the model wrote for it (the run's zone, not the server's).
    start = meeting.normalized_arguments["start"]
    assert start.endswith("T09:00:00+08:00")
    meeting_row = page.locator(f"#confirmation-{meeting.confirmations.get().pk}")
    expect(meeting_row.get_by_test_id("arguments")).to_contain_text(f"start: {start[:10]} 09:00 +08:00 (Asia/Shanghai)")
    expect(meeting_row.get_by_test_id("interpretation-step").filter(has_text="tomorrow")).to_contain_text(
        f'model wrote "tomorrow 09:00" → {start[:10]} 09:00 +08:00 (Asia/Shanghai)')
    page.screenshot(path=str(DOCS / "approver-queue.png"))

    row = page.locator(f"#confirmation-{payment.pk}")
    expect(row.get_by_test_id("arguments")).to_contain_text("amount: 12.50 EUR")
    expect(row.get_by_test_id("arguments")).not_to_contain_text("amount_minor")
    expect(row.get_by_test_id("why")).to_contain_text("max 500.00 EUR per call")
    expect(row.get_by_test_id("why")).not_to_contain_text("50000")
    expect(row.get_by_test_id("interpretation-step")).to_contain_text('"amount": "12.50"')
    expect(row.get_by_test_id("interpretation-step")).to_contain_text("→ 12.50 EUR")
    expect(row.get_by_test_id("interpretation-context")).to_contain_text("zone Asia/Shanghai")
    expect(row.get_by_test_id("risk")).to_contain_text("NOT idempotent")
    expect(row.get_by_test_id("reason")).to_have_attribute("placeholder", "reason (required to deny — the model reads it)")

    row.get_by_test_id("tool").click()
    detail = page.get_by_test_id("confirmation-detail")
    expect(detail.locator('[data-testid=argument][data-field=amount] [data-testid=argument-value]')).to_contain_text("12.50 EUR")
    why = page.get_by_test_id("why")
    expect(why).to_be_visible()
    expect(why).to_contain_text("requires a person's confirmation; max 500.00 EUR per call")
    expect(why).to_contain_text("the tool's ToolSpec requires a person to confirm every call")
    risk = page.get_by_test_id("risk")
    expect(risk).to_contain_text("write_unsafe")
    expect(risk).to_contain_text("never re-sent")
    expect(risk).to_contain_text("cannot be undone by ToolOps")
    trail = page.get_by_test_id("interpretation")
    expect(trail).to_be_visible()
    expect(page.get_by_test_id("raw-arguments")).to_have_text(json.dumps(PAYMENT))
    expect(trail.get_by_test_id("interpretation-output").last).to_have_text("12.50 EUR")
    expect(page.get_by_test_id("interpretation-context")).to_contain_text("zone Asia/Shanghai · locale en-US")
    expect(page.get_by_test_id("interpretation-context")).to_contain_text("+08:00 (Asia/Shanghai)")
    expect(page.get_by_test_id("reason-note")).to_contain_text("the model reads it word for word")
    expect(page.get_by_test_id("record-link")).to_have_attribute("href", f"/console/calls/{payment.invocation_id}/")
    page.screenshot(path=str(DOCS / "approver-view.png"), full_page=True)

    page.get_by_test_id("record-link").click()
    expect(page.get_by_test_id("call-record")).to_have_attribute("data-invocation-id", str(payment.invocation_id))


def test_it_refuses_to_preview_an_edit_the_schema_rejects_and_changes_nothing(login, live_server, payment):
    page = login(_approver_of(payment.tool_spec))
    page.goto(f"{live_server.url}/console/confirmations/{payment.pk}/edit")
    page.locator('[data-name="/amount/amount"] input').fill("12.505")  # three decimals for EUR
    page.get_by_test_id("preview").click()
    expect(page.get_by_test_id("edit-errors")).to_contain_text("VALIDATION_REJECTED")
    expect(page.get_by_test_id("approve-edited-form")).to_have_count(0)
    payment.refresh_from_db()
    assert payment.state == "pending" and Invocation.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.redis
def test_it_executes_the_edited_payment_once_and_the_record_shows_both_digests(
        demo_agent, demo_services, worker, login, live_server):
    run = demo_agent.run(timezone="Asia/Shanghai", locale="en-US")
    call = demo_agent.model_call(run["id"], tools=["payments.transfer@1"])
    proposed = demo_agent.propose(call["id"], name="payments.transfer@1", arguments=json.dumps(PAYMENT),
                                  proposal_id="call_pay_1").json()
    assert proposed["state"] == "AUTHORIZED" and proposed["confirmation"]["state"] == "pending"
    confirmation = Confirmation.objects.get(invocation_id=proposed["id"], state="pending")
    page = login(_approver_of(ToolSpec.objects.get(name="payments.transfer")))

    page.goto(f"{live_server.url}/console/confirmations/{confirmation.pk}/")
    page.get_by_test_id("edit").click()
    expect(page.locator('[data-name="/amount/amount"] input')).to_have_value("12.50")
    expect(page.locator('[data-name="/amount/currency"] select')).to_have_value('"EUR"')
    page.locator('[data-name="/amount/amount"] input').fill("25.00")
    page.locator('[data-name="/memo"] input').fill("invoice 7")
    page.get_by_test_id("preview").click()
    preview = page.get_by_test_id("edit-preview")
    expect(preview.get_by_test_id("preview-difference")).to_contain_text("12.50 EUR")
    expect(preview.get_by_test_id("preview-difference")).to_contain_text("25.00 EUR")
    expect(preview.get_by_test_id("preview-decision")).to_have_text("confirm")
    # Maker–checker, said before submitting: a larger amount and a new memo are not a narrowing.
    expect(preview.get_by_test_id("edit-needs")).to_have_text(
        "This edit changes amount, memo: another approver must approve it before it runs (2 approvals in all, yours included).")
    new_digest = preview.get_by_test_id("new-digest").inner_text()
    assert len(new_digest) == 64 and new_digest != confirmation.digest
    page.get_by_test_id("edit-reason").fill("the invoice says 25.00")
    page.screenshot(path=str(DOCS / "approve-with-edit.png"), full_page=True)
    page.get_by_test_id("approve-edited").click()

    expect(page.locator(".messagelist .success")).to_contain_text("recorded with your approval: 1 of 2")
    replacement = Invocation.objects.get(edited_from_id=proposed["id"])
    assert replacement.state == "AUTHORIZED" and demo_services.transfers("acme-supplier-42") == []  # nobody else looked yet
    checker = make_staff(username="checker")
    allow_approving(user=checker, spec=replacement.tool_spec)
    page.context.clear_cookies()
    login(checker).goto(f"{live_server.url}/console/confirmations/{replacement.confirmations.get().pk}/")
    expect(page.get_by_test_id("approvals-count")).to_have_text("1 of 2")
    page.get_by_test_id("approve").click()
    expect(page.locator(".messagelist .success")).to_contain_text("is PREPARED")
    page.goto(f"{live_server.url}/console/calls/{replacement.pk}/")
    edited = page.get_by_test_id("edit-record")
    expect(edited.get_by_test_id("original-digest")).to_have_text(confirmation.digest)
    expect(edited.get_by_test_id("edited-digest")).to_have_text(new_digest)
    expect(edited.get_by_test_id("edit-change").first).to_contain_text("12.50 EUR")
    expect(edited.get_by_test_id("edit-change").first).to_contain_text("25.00 EUR")
    expect(edited.get_by_test_id("edit-reason")).to_have_text("the invoice says 25.00")

    assert replacement.digest == new_digest
    wait_for(lambda: Invocation.objects.get(pk=replacement.pk).state == "OBSERVED", timeout=30)
    transfers = demo_services.transfers("acme-supplier-42")
    assert [(t["amount_minor"], t["currency"], t["memo"]) for t in transfers] == [(2500, "EUR", "invoice 7")]
    assert Invocation.objects.get(pk=proposed["id"]).state == "CANCELLED_BEFORE_COMMIT"
    assert not Attempt.objects.filter(invocation_id=proposed["id"]).exists()
    assert Attempt.objects.filter(invocation=replacement).count() == 1

    message = json.loads(demo_agent.get(f"/api/v1/invocations/{proposed['id']}/tool-message", format="openai").content)
    assert message["tool_call_id"] == "call_pay_1"
    payload = json.loads(message["content"])
    assert payload["ok"] is True and payload["invocation_id"] == str(replacement.pk)
    assert payload["edited_by_approver"]["arguments"]["amount"] == {"amount_minor": 2500, "currency": "EUR"}
    assert payload["edited_by_approver"]["reason"] == "the invoice says 25.00"

    page.reload()
    expect(page.get_by_test_id("state")).to_have_text("OBSERVED")
    page.screenshot(path=str(DOCS / "edited-call-record.png"))  # the top: the edit, both digests, the difference


def test_it_shows_a_published_toolspec_read_only_with_its_schema_once(login, live_server):
    published = make_demo_spec(name="payments.transfer")
    draft = ToolSpec.objects.create(name="payments.refund", version=1, side_effect_class="write_unsafe",
                                    input_schema={"type": "object"})
    page = login(make_staff(username="admin", superuser=True))

    page.goto(f"{live_server.url}/specs_app/toolspec/{published.pk}/change/")
    expect(page.locator("#content h1")).to_contain_text("View tool spec")
    expect(page.locator("input[name=_save]")).to_have_count(0)
    expect(page.locator("input[name=_continue]")).to_have_count(0)
    expect(page.locator("a.deletelink")).to_have_count(0)
    expect(page.locator(".field-rendered_schema")).to_have_count(1)
    expect(page.locator(".field-input_schema")).to_have_count(0)
    expect(page.locator(".field-rendered_schema")).to_contain_text('"to_account"')

    page.goto(f"{live_server.url}/specs_app/toolspec/{draft.pk}/change/")
    expect(page.locator("input[name=_save]")).to_have_count(1)  # a draft stays editable
