"""Approve-with-edit through the console views (Django test client): permission on every request,
previews that write nothing, raw JSON re-parsed strictly, the approval bound to the new digest."""
from __future__ import annotations

import json

import pytest
from guardian.shortcuts import assign_perm

from invocations_app.models import Confirmation, Invocation
from tests.builders import allow_approving, admit_proposal, make_demo_spec, make_grant, make_staff, make_subject

pytestmark = pytest.mark.django_db

PAYMENT = {"to_account": "acct_42", "amount": {"amount": "12.50", "currency": "EUR"}}


@pytest.fixture
def pending() -> Confirmation:
    spec = make_demo_spec(name="payments.transfer")
    payer = make_subject(name="payer")
    make_grant(subject=payer, capability="payments.transfer", operation_class="create", effect="confirm",
               limits={"max_amount_per_call": 50_000})
    invocation = admit_proposal(subject=payer, spec=spec, arguments=PAYMENT)
    return Confirmation.objects.select_related("tool_spec").get(invocation=invocation, state="pending")


@pytest.fixture
def approver(client, pending):
    user = make_staff(username="ann")
    allow_approving(user=user, spec=pending.tool_spec)
    client.force_login(user)
    return user


def _preview_json(client, pending, arguments: str):
    return client.post(f"/console/confirmations/{pending.pk}/edit", {"mode": "json", "raw_json": arguments})


def test_it_previews_raw_json_without_writing_anything(client, approver, pending):
    response = _preview_json(client, pending, json.dumps({**PAYMENT, "amount": {"amount": "25", "currency": "EUR"}}))
    assert response.status_code == 200
    preview = response.context["preview"]
    assert [c["after"] for c in preview["changes"]] == ["25.00 EUR"] and preview["decision"] == "confirm"
    assert Invocation.objects.count() == 1 and Confirmation.objects.get().state == "pending"


def test_it_reparses_the_typed_json_strictly(client, approver, pending):
    response = _preview_json(client, pending, '{"to_account": "acct_42", "to_account": "acct_43"}')
    assert response.context["preview"] is None
    assert "PARSE_REJECTED" in response.context["errors"][0]


def test_it_shows_an_over_limit_edit_as_refused_with_no_approve_button(client, approver, pending):
    response = _preview_json(client, pending, json.dumps({**PAYMENT, "amount": {"amount": "600", "currency": "EUR"}}))
    assert response.context["preview"]["denied"] is True
    assert b'data-testid="approve-edited-form"' not in response.content


def test_it_approves_the_new_digest_and_redirects_to_the_edited_calls_record(client, approver, pending):
    edited = json.dumps({**PAYMENT, "amount": {"amount": "10", "currency": "EUR"}})  # only narrows: released
    new_digest = _preview_json(client, pending, edited).context["preview"]["digest"]
    response = client.post(f"/console/confirmations/{pending.pk}/approve-edited", {
        "digest_seen": pending.digest, "new_digest_seen": new_digest, "edited": edited, "reason": "invoice says 10"})
    replacement = Invocation.objects.get(edited_from=pending.invocation)
    assert response.status_code == 302 and response["Location"] == f"/console/calls/{replacement.pk}/"
    assert replacement.digest == new_digest and replacement.state == "PREPARED"
    assert replacement.normalized_arguments["amount"] == {"amount_minor": 1000, "currency": "EUR"}
    assert replacement.confirmations.get().decided_by == approver


@pytest.mark.parametrize("tenant_right, status", [(False, 404), (True, 403)], ids=["other-tenant", "same-tenant"])
def test_it_refuses_a_forged_edit_from_someone_who_may_not_approve_the_tool(client, pending, tenant_right, status):
    mallory = make_staff(username="mallory")
    if tenant_right:  # may approve in the call's tenant, not this tool: 403; no right there: 404
        assign_perm("specs_app.approve_calls", mallory, pending.tenant)
    client.force_login(mallory)
    edited = json.dumps({**PAYMENT, "amount": {"amount": "1", "currency": "EUR"}})
    assert client.get(f"/console/confirmations/{pending.pk}/edit").status_code == status
    response = client.post(f"/console/confirmations/{pending.pk}/approve-edited", {
        "digest_seen": pending.digest, "new_digest_seen": "x" * 64, "edited": edited, "reason": "mine"})
    assert response.status_code == status
    assert Invocation.objects.count() == 1 and Confirmation.objects.get().state == "pending"


# --- maker–checker: what an edit will need, shown before it is submitted ----------------------------

def test_the_preview_says_another_approver_must_approve_an_edit_of_the_recipient(client, approver, pending):
    edited = json.dumps({**PAYMENT, "to_account": "acct_99", "amount": {"amount": "10", "currency": "EUR"}})
    response = _preview_json(client, pending, edited)
    needs = response.context["preview"]["needs"]
    assert needs.second_person is True and needs.approvals_needed == 2 and needs.changes == ("/to_account",)
    page = response.content.decode()
    assert ("This edit changes to_account: another approver must approve it before it runs "
            "(2 approvals in all, yours included).") in page
    assert 'data-second-person="true"' in page and "ask for 1 more approval(s)" in page
    assert Invocation.objects.count() == 1  # a preview writes nothing

    response = client.post(f"/console/confirmations/{pending.pk}/approve-edited", {
        "digest_seen": pending.digest, "new_digest_seen": response.context["preview"]["digest"], "edited": edited,
        "reason": "the supplier's new account"}, follow=True)
    replacement = Invocation.objects.get(edited_from=pending.invocation)
    assert replacement.state == "AUTHORIZED"
    waiting = replacement.confirmations.get(state="pending")
    assert waiting.approvals_needed == 2 and list(waiting.approvals.values_list("user__username", flat=True)) == ["ann"]
    assert "recorded with your approval: 1 of 2; it runs when 1 other person(s) approve it" in response.content.decode()


def test_the_preview_says_the_editors_approval_releases_an_edit_that_only_narrows(client, approver, pending):
    response = _preview_json(client, pending, json.dumps({**PAYMENT, "amount": {"amount": "10", "currency": "EUR"}}))
    assert response.context["preview"]["needs"].second_person is False
    assert "This edit only narrows numbers: your approval releases it." in response.content.decode()
    assert 'data-approvals-needed="1"' in response.content.decode()
