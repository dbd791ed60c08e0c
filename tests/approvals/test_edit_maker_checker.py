"""Maker–checker on "approve with edits", through the agent API and the Approvals API: an edit
needs as many distinct approvers as the original or the edited call, whichever is more (the
editor's approval counted as one), and a second person unless it only narrows numbers."""
from __future__ import annotations

import json

import pytest

from invocations_app.models import Confirmation, Event, Invocation
from invocations_app.standing_approvals import standing_approval_grant
from specs_app.models import Grant
from tests.builders import Agent, agent_client, make_finance_subject, make_payments_spec, payment_args, person_client

pytestmark = pytest.mark.django_db

# Up to 10 EUR runs alone, up to 50 EUR needs one approver, more needs two.
POLICY = {"currency": "EUR", "thresholds": [{"up_to": 1000, "effect": "allow"}, {"up_to": 5000, "effect": "confirm"},
                                            {"effect": "confirm", "approvals": 2}]}


@pytest.fixture
def payments():
    return make_payments_spec()


def finance_agent(policy: dict) -> Agent:
    agent = agent_client(subject=make_finance_subject(policy=policy))
    agent.run_id = agent.run()["id"]
    return agent


@pytest.fixture
def agent(payments):
    return finance_agent(POLICY)


@pytest.fixture
def ann(payments):
    return person_client(username="ann", spec=payments)


@pytest.fixture
def ben(payments):
    return person_client(username="ben", spec=payments)


def propose(agent: Agent, payments, arguments: dict) -> Confirmation:
    call = agent.model_call(agent.run_id, tools=[payments.ref])
    invocation = agent.propose(call["id"], name=payments.ref, arguments=json.dumps(arguments)).json()
    return Confirmation.objects.get(invocation_id=invocation["id"], state="pending")


def edit(person, confirmation: Confirmation, arguments: dict):
    answer = person.client.post(f"/api/v1/confirmations/{confirmation.pk}/approve-with-edits",
                                {"digest": confirmation.digest, "arguments": arguments, "reason": "corrected"})
    assert answer.status_code == 200, answer.content
    return answer.json()


def approve(person, confirmation_id: str, digest: str):
    return person.client.post(f"/api/v1/confirmations/{confirmation_id}/approve", {"digest": digest})


def test_an_edit_of_a_two_person_call_into_a_one_person_call_to_another_account_still_needs_two(agent, payments, ann, ben):
    original = propose(agent, payments, payment_args(9000))  # 90 EUR: two approvers
    assert original.approvals_needed == 2
    body = edit(ann, original, payment_args(5000, to_account="ann-private-1"))  # 50 EUR: one, by the policy alone
    assert body["invocation"]["state"] == "AUTHORIZED", body
    waiting = body["awaiting"]
    assert (waiting["approvals"], waiting["approvals_needed"]) == (1, 2)
    assert approve(ann, waiting["confirmation_id"], body["invocation"]["digest"]).json()["code"] == "duplicate_approver"
    assert Invocation.objects.get(pk=body["invocation"]["id"]).state == "AUTHORIZED"

    released = approve(ben, waiting["confirmation_id"], body["invocation"]["digest"])
    assert released.status_code == 200 and released.json()["invocation"]["state"] == "PREPARED"
    assert released.json()["awaiting"] is None
    edited = Event.objects.get(invocation_id=original.invocation_id, kind="edited_by_approver").data
    assert edited["approvals_needed"] == 2 and edited["second_person"] is True
    assert edited["changes"] == ["/to_account"] and edited["edit_rule"] == "second_person_unless_narrowing"


def test_a_narrowing_edit_of_a_one_person_call_is_released_by_the_editor(agent, payments, ann):
    original = propose(agent, payments, payment_args(4000))  # 40 EUR: one approver
    body = edit(ann, original, payment_args(3000))  # same account, a smaller amount
    assert body["invocation"]["state"] == "PREPARED" and body["awaiting"] is None


def test_a_narrowing_edit_keeps_the_quorum_of_the_original(agent, payments, ann, ben):
    original = propose(agent, payments, payment_args(9000))  # 90 EUR: two approvers
    body = edit(ann, original, payment_args(4000))  # 40 EUR would need one: the original's two stand
    assert body["invocation"]["state"] == "AUTHORIZED"
    assert (body["awaiting"]["approvals"], body["awaiting"]["approvals_needed"]) == (1, 2)
    assert approve(ben, body["awaiting"]["confirmation_id"], body["invocation"]["digest"]).status_code == 200


def test_an_edit_into_the_tier_that_runs_alone_still_needs_a_second_person_when_it_changes_the_recipient(
        agent, payments, ann):
    original = propose(agent, payments, payment_args(4000))
    body = edit(ann, original, payment_args(500, to_account="ann-private-1"))  # 5 EUR: no person by the policy
    assert body["invocation"]["state"] == "AUTHORIZED"
    assert (body["awaiting"]["approvals"], body["awaiting"]["approvals_needed"]) == (1, 2)


def test_a_standing_approval_never_stands_in_for_the_second_person(agent, payments, ann, ben):
    first = propose(agent, payments, payment_args(2000))
    standing_approval_grant(confirmation=first, user=ben, minutes=30, max_amount=4000, max_calls=None, reason="batch")
    over_cap = propose(agent, payments, payment_args(4500))  # above ben's 40 EUR cap: asks a person
    body = edit(ann, over_cap, payment_args(3000, to_account="ann-private-1"))  # within the cap, another account
    assert body["invocation"]["state"] == "AUTHORIZED"
    assert body["awaiting"]["approvals_needed"] == 2
    assert not Event.objects.filter(invocation_id=body["invocation"]["id"], kind="standing_approval_applied").exists()


def test_the_policy_can_ask_a_second_person_for_every_edit(payments, ann):
    agent = finance_agent({**POLICY, "edits": "second_person_always"})
    original = propose(agent, payments, payment_args(4000))
    body = edit(ann, original, payment_args(3000))  # only narrows, yet the policy wants a checker
    assert body["invocation"]["state"] == "AUTHORIZED"
    assert (body["awaiting"]["approvals"], body["awaiting"]["approvals_needed"]) == (1, 2)


def test_relaxing_the_policy_after_the_call_was_asked_for_does_not_relax_its_edits(payments, ann):
    agent = finance_agent({**POLICY, "edits": "second_person_always"})
    original = propose(agent, payments, payment_args(4000))
    Grant.objects.filter(subject=agent.subject).update(approval_policy=POLICY)  # the default rule from now on
    body = edit(ann, original, payment_args(3000))
    assert (body["awaiting"]["approvals"], body["awaiting"]["approvals_needed"]) == (1, 2)
