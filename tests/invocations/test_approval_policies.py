"""Approval policies through the services on PostgreSQL: thresholds, quorum, separation of duties,
escalation with a controllable clock, run-scoped standing approvals, and where policies are configured."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import connection
from rest_framework.test import APIClient

from invocations_app.confirmations import (
    AlreadyDecided, DuplicateApprover, SeparationOfDuties, confirmation_approve, confirmations_expire_due,
)
from invocations_app.confirmation_edits import confirmation_approve_with_edits
from invocations_app.escalations import confirmations_escalate_due
from invocations_app.models import Confirmation, ConfirmationApproval, Event, Invocation, StandingApproval
from agent_api.serializers import invocation_to_dict
from invocations_app.selectors import invocation_get
from invocations_app.standing_approvals import standing_approval_grant, standing_approval_revoke
from specs_app.models import Grant
from specs_app.services import grant_create, grant_validate
from tests.builders import (
    PAYMENTS_POLICY, Agent, OneRun, fresh, make_capability, make_demo_spec, make_finance_subject, make_grant,
    make_payments_spec, make_person, make_staff, make_subject, make_tenant, make_token, payment_args,
)
from tests.conftest import require_postgres
from toolops.errors import ApplicationError

pytestmark = pytest.mark.django_db


@pytest.fixture
def payments():
    return make_payments_spec()


@pytest.fixture
def finance(payments):
    return make_finance_subject()


@pytest.fixture
def alice(finance):
    return make_person(username="alice", tenant=finance.tenant)  # email alice@example.invalid


@pytest.fixture
def run(finance, payments, alice):
    return OneRun(subject=finance, spec=payments, on_behalf_of="alice@example.invalid")


def pending(invocation) -> Confirmation:
    return Confirmation.objects.select_related("run", "invocation", "tool_spec").get(invocation=invocation, state="pending")


def kinds(invocation) -> list[str]:
    return list(Event.objects.filter(invocation=invocation).order_by("seq").values_list("kind", flat=True))


# --- thresholds ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("minor", "state", "quorum"), [
    (1000, "PREPARED", None),  # 10.00 EUR: runs without a person (up_to is inclusive)
    (1001, "AUTHORIZED", 1),  # 10.01 EUR: one approver
    (50000, "AUTHORIZED", 1),
    (50001, "AUTHORIZED", 2),  # 500.01 EUR: two approvers
])
def test_it_applies_thresholds_on_the_normalized_amount_at_the_boundaries(run, minor, state, quorum):
    invocation = run.propose(payment_args(minor))
    assert invocation.state == state, invocation.error_message
    if quorum is None:
        assert not Confirmation.objects.filter(invocation=invocation).exists()
        assert fresh(invocation).authorization["decision"] == "allow"
        return
    confirmation = pending(invocation)
    assert confirmation.approvals_needed == quorum
    assert fresh(invocation).authorization["approvals_needed"] == quorum
    requested = Event.objects.get(invocation=invocation, kind="confirmation_requested")
    assert requested.data.get("approvals_needed", 1) == quorum


def test_it_denies_an_amount_above_the_highest_closed_tier(finance, payments):
    Grant.objects.filter(subject=finance).update(approval_policy={"thresholds": [{"up_to": 50000, "effect": "confirm"}]})
    invocation = OneRun(subject=finance, spec=payments).propose(payment_args(50001))
    assert invocation.state == "AUTHORIZATION_REJECTED"
    assert "policy_denied" in {r["code"] for r in invocation.authorization["reasons"]}


def test_the_toolspecs_policy_applies_to_grants_without_one():
    spec = make_payments_spec(confirmation_policy={"expires_seconds": 900, "approval": {"currency": "EUR",
        "thresholds": [{"up_to": 100, "effect": "allow"}, {"effect": "confirm", "approvals": 3}]}})
    subject = make_subject()
    make_grant(subject=subject, capability="payments.transfer", operation_class="create")
    one = OneRun(subject=subject, spec=spec)
    assert one.propose(payment_args(100)).state == "PREPARED"
    assert pending(one.propose(payment_args(101))).approvals_needed == 3


# --- quorum ------------------------------------------------------------------------------------

def test_a_quorum_of_two_needs_two_different_approvers_and_the_same_one_twice_does_nothing(run):
    invocation = run.propose(payment_args(60000))
    confirmation = pending(invocation)
    first, second = make_staff(username="first"), make_staff(username="second")

    confirmation_approve(confirmation=confirmation, user=first, digest_seen=confirmation.digest, reason="invoice checked")
    assert fresh(invocation).state == "AUTHORIZED" and pending(invocation).state == "pending"
    partial = Event.objects.get(invocation=invocation, kind="confirmation_partially_approved")
    assert partial.data["approvals"] == 1 and partial.data["approvals_needed"] == 2 and partial.actor == "user:first"

    seq_before = fresh(invocation).event_seq
    with pytest.raises(DuplicateApprover):
        confirmation_approve(confirmation=pending(invocation), user=first, digest_seen=confirmation.digest)
    assert fresh(invocation).event_seq == seq_before
    assert ConfirmationApproval.objects.filter(confirmation=confirmation).count() == 1

    confirmation_approve(confirmation=pending(invocation), user=second, digest_seen=confirmation.digest, reason="ok")
    confirmation.refresh_from_db()
    assert confirmation.state == "approved" and confirmation.decided_by == second
    assert fresh(invocation).state == "PREPARED"
    approved = Event.objects.get(invocation=invocation, kind="confirmation_approved")
    assert approved.data["approved_by"] == ["first", "second"]
    shown = invocation_to_dict(invocation_get(subject=run.subject, invocation_id=invocation.pk))["confirmation"]
    assert shown["approvals_needed"] == 2 and [a["user"] for a in shown["approvals"]] == ["first", "second"]


@pytest.mark.django_db(transaction=True)
def test_the_nth_approval_decides_once_when_two_approvers_race(run):
    require_postgres()
    invocation = run.propose(payment_args(60000))
    confirmation = pending(invocation)
    confirmation_approve(confirmation=confirmation, user=make_staff(username="first"), digest_seen=confirmation.digest)
    racers = [make_staff(username="second"), make_staff(username="third")]
    barrier, outcomes = threading.Barrier(2), []

    def approve(user):
        try:
            barrier.wait()
            confirmation_approve(confirmation=pending(invocation), user=user, digest_seen=confirmation.digest)
            outcomes.append("approved")
        except AlreadyDecided:
            outcomes.append("already_decided")
        finally:
            connection.close()

    threads = [threading.Thread(target=approve, args=(u,)) for u in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["already_decided", "approved"]
    assert kinds(invocation).count("confirmation_approved") == 1
    assert fresh(invocation).state == "PREPARED"
    assert ConfirmationApproval.objects.filter(confirmation=confirmation).count() == 2


# --- separation of duties ----------------------------------------------------------------------

def test_the_person_the_run_acts_for_cannot_approve_by_email_or_username(run, finance, payments, alice):
    invocation = run.propose(payment_args(2000))
    with pytest.raises(SeparationOfDuties, match="cannot approve"):
        confirmation_approve(confirmation=pending(invocation), user=alice, digest_seen=pending(invocation).digest)
    by_name = OneRun(subject=finance, spec=payments, on_behalf_of="ALICE").propose(payment_args(2000))
    with pytest.raises(SeparationOfDuties):
        confirmation_approve(confirmation=pending(by_name), user=alice, digest_seen=pending(by_name).digest)
    with pytest.raises(SeparationOfDuties):
        standing_approval_grant(confirmation=pending(invocation), user=alice, minutes=5, max_amount=None, max_calls=None,
                                reason="mine")
    with pytest.raises(SeparationOfDuties):  # an edit is an approval too
        confirmation_approve_with_edits(confirmation=pending(invocation), user=alice, digest_seen=pending(invocation).digest,
                                        edited_arguments=payment_args(1500), new_digest_seen="", reason="smaller")
    assert not ConfirmationApproval.objects.exists() and not StandingApproval.objects.exists()
    assert fresh(invocation).state == "AUTHORIZED"


def test_post_runs_accepts_and_returns_on_behalf_of(agent):
    make_person(username="alice", tenant=agent.subject.tenant)
    body = agent.run(on_behalf_of="alice@example.invalid")
    assert body["on_behalf_of"] == "alice@example.invalid" and body["on_behalf_of_user"] == "alice"
    assert agent.get(f"/api/v1/runs/{body['id']}").json()["on_behalf_of_user"] == "alice"
    assert agent.run()["on_behalf_of"] is None and agent.run()["on_behalf_of_user"] is None


# --- escalation ---------------------------------------------------------------------------------

def test_it_escalates_after_t_with_a_controllable_clock_and_expiry_still_denies(finance, payments, settings, django_capture_on_commit_callbacks):
    settings.TOOLOPS_NOTIFY_BY_EMAIL = True
    leads = Group.objects.create(name="payments-leads")
    lead = make_staff(username="lead")
    lead.groups.add(leads)
    Grant.objects.filter(subject=finance).update(approval_policy={
        **PAYMENTS_POLICY, "escalate_after_seconds": 300, "escalation_group": "payments-leads"})
    invocation = OneRun(subject=finance, spec=payments).propose(payment_args(2000))
    confirmation = pending(invocation)
    assert confirmation.escalation_group == "payments-leads"
    asked = confirmation.escalate_at - timedelta(seconds=300)

    assert confirmations_escalate_due(now=asked + timedelta(seconds=299)) == 0
    with django_capture_on_commit_callbacks(execute=True):
        assert confirmations_escalate_due(now=asked + timedelta(seconds=301)) == 1
    assert confirmations_escalate_due(now=asked + timedelta(seconds=400)) == 0  # once only
    confirmation.refresh_from_db()
    assert confirmation.state == "pending" and confirmation.escalated_at == asked + timedelta(seconds=301)
    event = Event.objects.get(invocation=invocation, kind="confirmation_escalated")
    assert event.data["group"] == "payments-leads" and event.data["notified"] == ["lead"]
    assert [m.to for m in mail.outbox] == [["lead@example.invalid"]]
    assert payments.ref in mail.outbox[0].subject

    assert confirmations_expire_due(now=confirmation.expires_at + timedelta(seconds=1)) == 1
    assert fresh(invocation).state == "CANCELLED_BEFORE_COMMIT"


def test_a_confirmation_decided_before_t_is_never_escalated(run):
    Group.objects.create(name="payments-leads")
    Grant.objects.update(approval_policy={**PAYMENTS_POLICY, "escalate_after_seconds": 60, "escalation_group": "payments-leads"})
    invocation = run.propose(payment_args(2000))
    confirmation = pending(invocation)
    confirmation_approve(confirmation=confirmation, user=make_staff(username="bob"), digest_seen=confirmation.digest)
    assert confirmations_escalate_due(now=confirmation.escalate_at + timedelta(seconds=1)) == 0
    assert "confirmation_escalated" not in kinds(invocation)


# --- standing approvals --------------------------------------------------------------------------

def test_a_standing_approval_covers_the_next_in_limit_call_and_not_an_over_limit_one(run):
    bob = make_staff(username="bob")
    first = run.propose(payment_args(2000))
    standing = standing_approval_grant(confirmation=pending(first), user=bob, minutes=30, max_amount=5000, max_calls=None,
                                       reason="supplier batch")
    assert fresh(first).state == "PREPARED"
    assert "standing_approval_granted" in kinds(first)

    covered = run.propose(payment_args(5000))
    assert covered.state == "PREPARED"
    record = fresh(covered).authorization
    assert record["decision"] == "allow" and record["standing_approval"]["id"] == str(standing.pk)
    assert record["standing_approval"]["granted_by"] == "bob"
    assert "standing_approval" in {r["code"] for r in record["reasons"]}
    applied = Event.objects.get(invocation=covered, kind="standing_approval_applied")
    assert applied.data["standing_approval"]["id"] == str(standing.pk) and "bob" in applied.data["reason"]
    assert not Confirmation.objects.filter(invocation=covered).exists()

    over = run.propose(payment_args(5001))
    assert over.state == "AUTHORIZED" and pending(over).approvals_needed == 1
    standing.refresh_from_db()
    assert standing.calls_covered == 1


def test_a_standing_approval_caps_amounts_in_the_currency_of_the_call_it_was_granted_on(run, payments):
    """50.00 EUR is not 50.00 of anything else: the cap takes the currency of the call it was
    granted on, is shown with it, and a call in another currency is never compared with it (a
    person decides that one). Here the grant's EUR policy already refuses a USD call, so the
    standing approval's own check is asked directly as authorization asks it."""
    from django.utils import timezone

    from invocations_app.standing_approvals import standing_approval_take

    bob = make_staff(username="bob")
    first = run.propose(payment_args(2000, currency="EUR"))
    standing = standing_approval_grant(confirmation=pending(first), user=bob, minutes=30, max_amount=5000, max_calls=None,
                                       reason="supplier batch")
    assert standing.currency == "EUR" and standing.max_amount_display == "amount ≤ 50.00 EUR"
    granted = Event.objects.get(invocation=first, kind="standing_approval_granted")
    assert granted.data["currency"] == "EUR" and granted.data["max_amount"] == 5000

    take = dict(run_id=standing.run_id, tool_spec_id=payments.pk, amount=1000, approvals_needed=1, now=timezone.now())
    assert standing_approval_take(currency="USD", **take) is None
    assert standing_approval_take(currency=None, **take) is None
    standing.refresh_from_db()
    assert standing.calls_covered == 0

    same = run.propose(payment_args(5000, currency="EUR"))
    assert same.state == "PREPARED" and fresh(same).authorization["standing_approval"]["currency"] == "EUR"


def test_the_console_takes_the_amount_cap_as_the_calls_amount_is_written_in_its_currency(client, run):
    """Approvers misread minor units: the form asks for 50.00 EUR, as the call's own amount reads,
    and stores 5000 minor units; a cap it cannot read exactly approves nothing."""
    boss = make_staff(username="boss", superuser=True)
    client.force_login(boss)
    first = run.propose(payment_args(2000))
    confirmation = pending(first)
    detail = f"/console/confirmations/{confirmation.pk}/"
    page = client.get(detail).content.decode()
    assert 'data-testid="standing-currency">EUR<' in page and "minor units" not in page
    form = {"digest_seen": confirmation.digest, "minutes": "30", "reason": "supplier batch"}

    for typed, why in (("50.505", "more than 2 decimals for EUR"), ("5,000", "plain decimal amount"), ("-5", "must not carry a sign")):
        resp = client.post(f"/console/confirmations/{confirmation.pk}/standing", {**form, "max_amount": typed}, follow=True)
        assert why in resp.content.decode(), typed
        assert not StandingApproval.objects.exists() and fresh(first).state == "AUTHORIZED", typed

    client.post(f"/console/confirmations/{confirmation.pk}/standing", {**form, "max_amount": "50"})
    standing = StandingApproval.objects.get()
    assert (standing.max_amount, standing.currency, standing.max_amount_display) == (5000, "EUR", "amount ≤ 50.00 EUR")
    assert run.propose(payment_args(5000)).state == "PREPARED" and run.propose(payment_args(5001)).state == "AUTHORIZED"


class AlwaysConfirmedPayments:
    """The demo payments tool (a person confirms every call) called over the REST API by an agent
    whose grant allows any currency, in one run; approvers grant standing approvals in the console."""

    def __init__(self, client):
        self.spec = make_demo_spec(name="payments.transfer")
        subject = make_subject(name="payouts-bot")
        make_grant(subject=subject, capability="payments.transfer", operation_class="create")
        self.agent = Agent(APIClient(), make_token(subject=subject)[1])
        self.call = self.agent.model_call(self.agent.run()["id"], tools=[self.spec.ref])["id"]
        self.console = client
        self.console.force_login(make_staff(username="boss", superuser=True))

    def pay(self, minor: int, currency: str) -> dict:
        resp = self.agent.propose(self.call, name=self.spec.ref, arguments=json.dumps(payment_args(minor, currency=currency)))
        assert resp.status_code == 201, resp.content
        return resp.json()

    def grant_standing(self, invocation: dict, **form):
        confirmation = Confirmation.objects.get(invocation_id=invocation["id"])
        return self.console.post(f"/console/confirmations/{confirmation.pk}/standing", {
            "digest_seen": confirmation.digest, "minutes": "30", "reason": "supplier batch", **form}, follow=True)


@pytest.fixture
def always_confirmed(client):
    return AlwaysConfirmedPayments(client)


def test_an_uncapped_standing_approval_covers_only_the_currency_it_was_granted_on(always_confirmed):
    """Approved in advance on a EUR call without a cap: later EUR calls run, a USD call still waits for a person."""
    first = always_confirmed.pay(2000, "EUR")
    assert first["state"] == "AUTHORIZED" and first["confirmation"]["state"] == "pending"
    always_confirmed.grant_standing(first)

    usd = always_confirmed.pay(2000, "USD")
    assert usd["state"] == "AUTHORIZED" and usd["confirmation"]["state"] == "pending", usd
    assert always_confirmed.pay(900000, "EUR")["state"] == "PREPARED"
    standing = StandingApproval.objects.get()
    assert (standing.calls_covered, standing.max_amount_display) == (1, "any amount, EUR only")


def test_an_uncapped_standing_approval_covers_the_other_currencies_its_approver_names(always_confirmed):
    always_confirmed.grant_standing(always_confirmed.pay(2000, "EUR"), other_currencies="usd, JPY")
    standing = StandingApproval.objects.get()
    assert (standing.currency, standing.other_currencies) == ("EUR", ["JPY", "USD"])
    assert standing.max_amount_display == "any amount, EUR or JPY or USD only"
    assert Event.objects.get(kind="standing_approval_granted").data["other_currencies"] == ["JPY", "USD"]
    for currency in ("USD", "EUR", "JPY"):
        assert always_confirmed.pay(2000, currency)["state"] == "PREPARED", currency
    assert always_confirmed.pay(2000, "GBP")["state"] == "AUTHORIZED"


@pytest.mark.parametrize(("form", "why"), [
    ({"max_amount": "50", "other_currencies": "USD"}, "covers only this call&#x27;s currency (EUR)"),
    ({"other_currencies": "USD dollars"}, "&#x27;dollars&#x27; is not a currency code"),
])
def test_other_currencies_are_refused_with_a_cap_or_when_not_a_currency_code(always_confirmed, form, why):
    first = always_confirmed.pay(2000, "EUR")
    page = always_confirmed.grant_standing(first, **form).content.decode()
    assert why in page, page
    assert not StandingApproval.objects.exists() and Invocation.objects.get(pk=first["id"]).state == "AUTHORIZED"


@pytest.mark.parametrize(("typed", "currency", "minor"), [
    ("", "EUR", None), ("  ", "EUR", None), ("50", "EUR", 5000), ("50.5", "EUR", 5050), ("0.01", "EUR", 1),
    ("1500", "JPY", 1500), ("1.234", "KWD", 1234), ("12", "", 12),
])
def test_a_typed_amount_cap_becomes_minor_units_of_the_calls_currency(typed, currency, minor):
    from invocations_app.standing_approvals import typed_cap_minor

    assert typed_cap_minor(typed, currency) == minor


@pytest.mark.parametrize(("typed", "currency"), [
    ("12.5", "JPY"), ("50.505", "EUR"), ("1e3", "EUR"), ("5,000", "EUR"), ("-1", "EUR"), ("-0", "EUR"), ("+5", "EUR"),
    ("12.5", ""), ("１２", ""), ("-0", ""), ("99999999999999999999", ""), ("99999999999999999999", "EUR"),
    ("9" * 5000, ""), ("9" * 5000, "EUR"),
])
def test_a_typed_amount_cap_that_is_not_exact_is_refused_never_guessed(typed, currency):
    from invocations_app.standing_approvals import typed_cap_minor

    with pytest.raises(ApplicationError) as refused:
        typed_cap_minor(typed, currency)
    assert refused.value.code == "invalid_standing_approval"


def test_a_standing_approval_is_scoped_to_its_run_counted_and_revocable(run, finance, payments):
    bob = make_staff(username="bob")
    standing = standing_approval_grant(confirmation=pending(run.propose(payment_args(2000))), user=bob, minutes=30,
                                       max_amount=None, max_calls=1, reason="one more")
    assert OneRun(subject=finance, spec=payments).propose(payment_args(2000)).state == "AUTHORIZED"  # another run
    assert run.propose(payment_args(2000)).state == "PREPARED"
    assert run.propose(payment_args(2000)).state == "AUTHORIZED"  # its one call is used
    assert run.propose(payment_args(60000)).state == "AUTHORIZED"  # two approvers: never one person's standing approval

    second = standing_approval_grant(confirmation=pending(run.propose(payment_args(3000))), user=bob, minutes=30,
                                     max_amount=None, max_calls=None, reason="rest of the batch")
    standing_approval_revoke(standing=second, user=bob, reason="batch done")
    assert run.propose(payment_args(2000)).state == "AUTHORIZED"
    revoked = Event.objects.get(kind="standing_approval_revoked")
    assert revoked.data["standing_approval_id"] == str(second.pk) and revoked.data["reason"] == "batch done"
    standing.refresh_from_db()
    assert standing.calls_covered == 1


def test_revoking_a_standing_approval_needs_a_reason_and_keeps_it(run):
    bob = make_staff(username="bob")
    standing = standing_approval_grant(confirmation=pending(run.propose(payment_args(2000))), user=bob, minutes=30,
                                       max_amount=None, max_calls=None, reason="batch")
    for blank in ("", "   "):
        with pytest.raises(ApplicationError, match="reason is required") as refused:
            standing_approval_revoke(standing=standing, user=bob, reason=blank)
        assert refused.value.code == "reason_required"
    standing.refresh_from_db()
    assert standing.revoked_at is None and not Event.objects.filter(kind="standing_approval_revoked").exists()
    assert run.propose(payment_args(2000)).state == "PREPARED"  # still covering calls

    standing_approval_revoke(standing=standing, user=bob, reason="  supplier disputed the invoice ")
    standing.refresh_from_db()
    assert standing.revoke_reason == "supplier disputed the invoice" and standing.revoked_by == bob
    assert Event.objects.get(kind="standing_approval_revoked").data["reason"] == "supplier disputed the invoice"


def test_the_console_revokes_only_with_a_reason_and_shows_it_on_the_pages(client, run):
    boss = make_staff(username="boss", superuser=True)
    client.force_login(boss)
    granted_from = run.propose(payment_args(2000))
    confirmation = pending(granted_from)
    standing = standing_approval_grant(confirmation=confirmation, user=boss, minutes=30, max_amount=None, max_calls=None,
                                       reason="batch")
    covered = run.propose(payment_args(2500))
    detail = f"/console/confirmations/{confirmation.pk}/"
    assert 'data-testid="standing-revoke-reason"' in client.get(detail).content.decode()

    resp = client.post(f"/console/confirmations/standing/{standing.pk}/revoke", {"next": detail}, follow=True)
    assert "Not revoked: a reason is required" in resp.content.decode()
    standing.refresh_from_db()
    assert standing.revoked_at is None

    client.post(f"/console/confirmations/standing/{standing.pk}/revoke", {"next": detail, "reason": "invoice disputed"})
    standing.refresh_from_db()
    assert standing.revoked_at is not None and standing.revoke_reason == "invoice disputed"
    assert "revoked by boss: “invoice disputed”" in client.get(detail).content.decode()
    for call in (granted_from, covered):  # the record of the call it came from, and of a call it covered
        page = client.get(f"/console/calls/{call.pk}/").content.decode()
        assert 'data-testid="record-standing-revoked"' in page and "“invoice disputed”" in page, call


def test_a_standing_approval_needs_a_reason_and_a_single_approver_call(run):
    bob = make_staff(username="bob")
    with pytest.raises(Exception, match="reason is required"):
        standing_approval_grant(confirmation=pending(run.propose(payment_args(2000))), user=bob, minutes=5, max_amount=None,
                                max_calls=None, reason=" ")
    with pytest.raises(Exception, match="covers only single-approver calls"):
        standing_approval_grant(confirmation=pending(run.propose(payment_args(60000))), user=bob, minutes=5, max_amount=None,
                                max_calls=None, reason="x")
    assert not StandingApproval.objects.exists() and not ConfirmationApproval.objects.exists()


# --- where policies are configured -----------------------------------------------------------------

def _grant_values(**overrides) -> dict:
    tenant = make_tenant()
    values = dict(capability=make_capability(name="payments.transfer", operation_class="create"), tenant=tenant, subject=None,
                  scope_kind="any", scope_values=[], limits={}, effect="allow", tool_refs=["payments.transfer@1"], expires_at=None)
    return {**values, **overrides}


def test_grant_validation_names_a_bad_policy_and_a_missing_escalation_group():
    with pytest.raises(ValidationError) as bad:
        grant_validate(**_grant_values(approval_policy={"thresholds": [{"up_to": 10, "effect": "sometimes"}]}))
    assert "effect must be one of" in str(bad.value.message_dict["approval_policy"])
    with pytest.raises(ValidationError) as missing:
        grant_validate(**_grant_values(approval_policy={"escalate_after_seconds": 60, "escalation_group": "nobody"}))
    assert "is not a group" in str(missing.value.message_dict["approval_policy"])


def test_grant_create_stores_the_normalized_policy_and_audits_it(payments):
    admin = make_staff(username="root", superuser=True)
    grant = grant_create(user=admin, reason="finance", **_grant_values(approval_policy={**PAYMENTS_POLICY, "approvals": 1}))
    # Normalized: the default quorum is left out, every confirm tier states its quorum.
    assert grant.approval_policy == {"currency": "EUR", "thresholds": [
        {"up_to": 1000, "effect": "allow"}, {"up_to": 50000, "effect": "confirm", "approvals": 1},
        {"effect": "confirm", "approvals": 2}]}
    assert grant.changes.get().data["approval_policy"] == grant.approval_policy


def test_the_grant_form_shows_a_bad_policy_on_its_field_and_saves_a_good_one(client, payments):
    boss = make_staff(username="boss", superuser=True)
    client.force_login(boss)
    tenant = make_tenant(slug="acme")
    form = {"capability": make_capability(name="payments.transfer", operation_class="create").pk, "tenant": tenant.pk,
            "scope_kind": "any", "scope_values": "[]", "limits": "{}", "effect": "confirm", "tool_refs": "[]",
            "expires_at_0": "", "expires_at_1": "", "reason": "finance approvals"}
    page = client.get("/specs_app/grant/add/").content.decode()
    assert 'name="approval_policy"' in page and "up_to inclusive" in page
    resp = client.post("/specs_app/grant/add/", {**form, "approval_policy": '{"thresholds": [{"up_to": 10}]}'})
    assert resp.status_code == 200
    assert "effect must be one of" in str(resp.context["adminform"].form.errors["approval_policy"])
    resp = client.post("/specs_app/grant/add/", {**form, "approval_policy": '{"approvals": 2}'})
    assert resp.status_code == 302
    grant = Grant.objects.get(tenant=tenant)
    assert grant.approval_policy == {"approvals": 2}
    assert "&quot;approvals&quot;: 2" in client.get(f"/specs_app/grant/{grant.pk}/change/").content.decode()


def test_the_grant_page_reads_its_limits_and_policy_in_major_units(client, payments):
    """An admin reading {"max_amount_per_call": 50000} sees 500.00 EUR, not fifty thousand."""
    client.force_login(make_staff(username="boss", superuser=True))
    grant = make_grant(subject=make_subject(tenant=make_tenant(slug="acme")), capability="payments.transfer",
                       operation_class="create", limits={"currency": "EUR", "max_amount_per_call": 50_000},
                       approval_policy={"currency": "EUR", "thresholds": [{"up_to": 1_000, "effect": "allow"}, {"approvals": 2}]})
    page = client.get(f"/specs_app/grant/{grant.pk}/change/").content.decode()
    assert "max 500.00 EUR per call" in page and "saved without a currency" not in page
    assert "up to 10.00 EUR: runs without a person; above 10.00 EUR: 2 approver(s)" in page
    # A row saved before limits named a currency reads as authorization reads it.
    Grant.objects.filter(pk=grant.pk).update(limits={"max_amount_per_call": 50_000, "calls_per_minute": 5})
    page = client.get(f"/specs_app/grant/{grant.pk}/change/").content.decode()
    assert "max 500.00 EUR per call; at most 5 calls a minute (saved without a currency: read as EUR)" in page
