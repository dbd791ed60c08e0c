"""A quorum call through a real worker: it runs when the second distinct approver approves, exactly once."""
from __future__ import annotations

import json

import pytest

from invocations_app.confirmations import AlreadyDecided, DuplicateApprover, confirmation_approve
from invocations_app.models import Confirmation, Event, Invocation
from specs_app.models import Grant
from tests.builders import make_staff

from tests.integration.conftest import wait_for

PAYMENT = {"to_account": "acct-quorum", "amount": {"amount": "120.00", "currency": "EUR"}}


def _pending(invocation_id: str) -> Confirmation:
    return Confirmation.objects.select_related("run", "invocation").get(invocation_id=invocation_id, state="pending")


@pytest.mark.django_db(transaction=True)
def test_a_quorum_payment_executes_exactly_once_after_the_second_approver(demo_agent, worker, demo_services):
    Grant.objects.filter(capability__name="payments.transfer").update(approval_policy={"approvals": 2})
    run = demo_agent.run(timezone="Europe/Paris")
    call = demo_agent.model_call(run["id"], tools=["payments.transfer@1"])
    resp = demo_agent.post(f"/api/v1/model-calls/{call['id']}/proposals",
                           {"proposal_id": "call_q", "name": "payments.transfer@1", "arguments": json.dumps(PAYMENT)})
    assert resp.status_code == 201, resp.content
    inv = resp.json()
    assert inv["state"] == "AUTHORIZED" and inv["confirmation"]["approvals_needed"] == 2

    first, second = make_staff(username="first"), make_staff(username="second")
    digest = _pending(inv["id"]).digest
    confirmation_approve(confirmation=_pending(inv["id"]), user=first, digest_seen=digest, reason="invoice 117")
    with pytest.raises(DuplicateApprover):
        confirmation_approve(confirmation=_pending(inv["id"]), user=first, digest_seen=digest)
    worker.wait_for_beat("invocations.enqueue_due")  # the beat ran with the call still waiting: nothing was sent
    assert demo_services.transfers("acct-quorum") == []
    assert Invocation.objects.get(pk=inv["id"]).state == "AUTHORIZED"

    confirmation_approve(confirmation=_pending(inv["id"]), user=second, digest_seen=digest, reason="ok")
    done = wait_for(lambda: (lambda b: b if b["state"] in ("OBSERVED", "FAILED_BEFORE_COMMIT", "OUTCOME_UNKNOWN") else None)(
        demo_agent.get(f"/api/v1/invocations/{inv['id']}").json()), timeout=40)
    assert done["state"] == "OBSERVED", done["error"]
    assert len(demo_services.transfers("acct-quorum")) == 1
    assert Invocation.objects.get(pk=inv["id"]).attempt_count == 1
    assert [a["user"] for a in done["confirmation"]["approvals"]] == ["first", "second"]
    kinds = list(Event.objects.filter(invocation_id=inv["id"]).values_list("kind", flat=True))
    assert kinds.count("confirmation_partially_approved") == 1 and kinds.count("confirmation_approved") == 1

    # A late third approver changes nothing, and the beat never sends the call again.
    confirmation = Confirmation.objects.select_related("run", "invocation").get(invocation_id=inv["id"])
    with pytest.raises(AlreadyDecided):
        confirmation_approve(confirmation=confirmation, user=make_staff(username="third"), digest_seen=digest)
    worker.wait_for_beat("invocations.enqueue_due")
    assert len(demo_services.transfers("acct-quorum")) == 1
