"""The Approvals API: people decide over REST with personal tokens, scoped like the console."""
from __future__ import annotations

import pytest
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from invocations_app.models import Confirmation, Invocation
from specs_app.models import PersonalToken
from specs_app.services import personal_token_revoke
from tests.builders import Agent, forget_rate_counts, make_approver

pytestmark = pytest.mark.django_db


def person(secret: str) -> Agent:
    return Agent(APIClient(), secret)  # the same Bearer client; the token decides who it is


@pytest.fixture
def ann(pending):
    return person(make_approver(username="ann", spec=pending.tool_spec)[1])


@pytest.fixture
def stranger(pending):
    return person(make_approver(username="sam")[1])  # staff, with no right on the calendar or its tenant


@pytest.fixture
def tenant_only(pending):
    """Staff who may approve in the call's tenant, but not this tool."""
    user, secret = make_approver(username="tia")
    assign_perm("specs_app.approve_calls", user, pending.tenant)
    return person(secret)


def test_it_lists_pending_confirmations_the_person_may_decide(ann, pending):
    resp = ann.get("/api/v1/confirmations", state="pending")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["count"] == 1
    item = body["results"][0]
    assert item["id"] == str(pending.pk) and item["invocation_id"] == str(pending.invocation_id)
    assert item["tool"] == "calendar.create_event@1" and item["digest"] == pending.digest
    assert item["approvals_needed"] == 1 and item["approvals"] == []
    assert "title: Passport" in item["arguments_display"]
    assert item["why"] and item["expires_at"] and item["requested_at"]


def test_it_shows_a_person_without_the_permission_nothing(stranger, tenant_only, pending):
    assert stranger.get("/api/v1/confirmations").json()["count"] == 0
    assert tenant_only.get("/api/v1/confirmations").json()["count"] == 0
    # No right in the call's tenant: the row does not exist for them (tenancy); a right in the
    # tenant but not on the tool: they may know it exists, not see it.
    assert stranger.get(f"/api/v1/confirmations/{pending.pk}").status_code == 404
    assert tenant_only.get(f"/api/v1/confirmations/{pending.pk}").status_code == 403


@pytest.mark.parametrize("who, status, code", [("stranger", 404, "not_found"), ("tenant_only", 403, "forbidden")])
def test_it_lets_a_person_without_the_permission_decide_nothing(request, who, status, code, pending):
    client = request.getfixturevalue(who)
    answers = [
        client.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": pending.digest}),
        client.post(f"/api/v1/confirmations/{pending.pk}/deny", {"reason": "no"}),
        client.post(f"/api/v1/confirmations/{pending.pk}/approve-with-edits",
                    {"digest": pending.digest, "arguments": {**pending.arguments, "title": "x"}}),
    ]
    assert [a.status_code for a in answers] == [status] * 3
    assert all(a["Content-Type"] == "application/problem+json" and a.json()["code"] == code for a in answers)
    pending.refresh_from_db()
    assert pending.state == "pending" and Invocation.objects.count() == 1


def test_it_refuses_an_agent_token_here_and_a_person_token_on_the_agent_api(agent, ann, pending):
    answer = agent.get("/api/v1/confirmations")
    assert answer.status_code == 401 and answer.json()["code"] == "unauthenticated"
    assert agent.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": pending.digest}).status_code == 401
    assert ann.post("/api/v1/runs", {"timezone": "UTC"}).status_code == 401
    assert ann.get(f"/api/v1/invocations/{pending.invocation_id}").status_code == 401
    pending.refresh_from_db()
    assert pending.state == "pending"


def test_a_persons_token_has_the_per_token_rate_limit_of_every_front_door(ann, agent, pending, settings):
    settings.TOOLOPS_API_RATE = "3/hour"  # a window the test cannot straddle in practice
    forget_rate_counts(rate=settings.TOOLOPS_API_RATE)
    assert [ann.get("/api/v1/confirmations").status_code for _ in range(3)] == [200] * 3
    refused = ann.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": pending.digest})
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited" and int(refused["Retry-After"]) > 0
    pending.refresh_from_db()
    assert pending.state == "pending"  # nothing decided over the limit
    assert agent.get("/api/v1/tools").status_code == 200  # the agent's token counts apart


def test_it_refuses_a_revoked_token(ann, pending):
    personal_token_revoke(token=PersonalToken.objects.get(user__username="ann"))
    assert ann.get("/api/v1/confirmations").status_code == 401


def test_it_approves_the_digest_the_person_saw(ann, pending):
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": pending.digest})
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["confirmation"]["state"] == "approved" and body["confirmation"]["decided_by"] == "ann"
    assert body["invocation"] == {"id": str(pending.invocation_id), "state": "PREPARED", "digest": pending.digest}


def test_it_answers_409_digest_mismatch_and_approves_nothing(ann, pending):
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": "0" * 64})
    assert resp.status_code == 409
    assert resp["Content-Type"] == "application/problem+json"
    assert resp.json()["code"] == "digest_mismatch" and resp.json()["digest"] == pending.digest
    pending.refresh_from_db()
    assert pending.state == "pending"
    assert Invocation.objects.get(pk=pending.invocation_id).state == "AUTHORIZED"


def test_it_requires_a_reason_to_deny(ann, pending):
    for body in ({}, {"reason": "   "}):
        resp = ann.post(f"/api/v1/confirmations/{pending.pk}/deny", body)
        assert resp.status_code == 400 and resp.json()["code"] == "reason_required", resp.content
    pending.refresh_from_db()
    assert pending.state == "pending"
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/deny", {"reason": "wrong calendar"})
    assert resp.status_code == 200
    assert resp.json()["invocation"]["state"] == "AUTHORIZATION_REJECTED"
    assert resp.json()["confirmation"]["reason"] == "wrong calendar"


def test_it_tells_a_second_decision_that_the_first_one_won(ann, pending):
    ann.post(f"/api/v1/confirmations/{pending.pk}/deny", {"reason": "no"})
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/approve", {"digest": pending.digest})
    assert resp.status_code == 409 and resp.json()["code"] == "already_decided"


def test_it_approves_edited_arguments_under_their_new_digest(ann, pending):
    edited = {**pending.arguments, "duration_minutes": 5}  # only narrows: ann's approval releases it
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/approve-with-edits", {"digest": pending.digest, "arguments": edited})
    assert resp.status_code == 200, resp.content
    replacement = Invocation.objects.get(pk=resp.json()["invocation"]["id"])
    assert replacement.edited_from_id == pending.invocation_id and replacement.state == "PREPARED"
    assert replacement.normalized_arguments["duration_minutes"] == 5 and replacement.digest != pending.digest
    assert resp.json()["confirmation"]["state"] == "edited" and resp.json()["awaiting"] is None


def test_it_refuses_edits_whose_digest_is_not_the_one_announced(ann, pending):
    edited = {**pending.arguments, "duration_minutes": 30}
    resp = ann.post(f"/api/v1/confirmations/{pending.pk}/approve-with-edits",
                    {"digest": pending.digest, "arguments": edited, "new_digest": "f" * 64})
    assert resp.status_code == 409 and resp.json()["code"] == "digest_mismatch"
    pending.refresh_from_db()
    assert pending.state == "pending" and Invocation.objects.count() == 1


def test_it_shows_the_interpretation_trail_and_the_record_link(ann, pending):
    body = ann.get(f"/api/v1/confirmations/{pending.pk}").json()
    assert '"title": "Passport"' in body["interpretation"]["raw_arguments"]
    assert body["interpretation"]["normalization_context"]["timezone"] == "Asia/Shanghai"
    assert isinstance(body["interpretation"]["trace"], list)
    assert body["record_url"].endswith(f"/console/calls/{pending.invocation_id}/")


def test_it_lists_decided_ones_by_state_and_pages(ann, pending):
    ann.post(f"/api/v1/confirmations/{pending.pk}/deny", {"reason": "no"})
    assert ann.get("/api/v1/confirmations").json()["count"] == 0
    denied = ann.get("/api/v1/confirmations", state="denied", page_size=1).json()
    assert denied["count"] == 1 and denied["results"][0]["state"] == "denied"
    assert ann.get("/api/v1/confirmations", state="bogus").status_code == 400
    assert Confirmation.objects.get(pk=pending.pk).state == "denied"


def test_the_pending_list_costs_the_same_queries_for_one_or_many(ann, agent, pending):
    """No query per row: each summary reads its proposal, approvals and edit trail from the page's query."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.approvals.conftest import propose_calendar

    with CaptureQueriesContext(connection) as one:
        assert ann.get("/api/v1/confirmations").json()["count"] == 1
    for _ in range(3):
        propose_calendar(agent, pending.tool_spec)
    with CaptureQueriesContext(connection) as four:
        assert ann.get("/api/v1/confirmations").json()["count"] == 4
    assert len(four.captured_queries) == len(one.captured_queries), [q["sql"][:120] for q in four.captured_queries]


def test_a_standing_approval_is_revoked_over_the_api_only_with_a_reason(ann, stranger, pending):
    from django.contrib.auth.models import User

    from invocations_app.models import Event, StandingApproval
    from invocations_app.standing_approvals import standing_approval_grant

    standing = standing_approval_grant(confirmation=pending, user=User.objects.get(username="ann"), minutes=30,
                                       max_amount=None, max_calls=None, reason="the day's bookings")
    url = f"/api/v1/standing-approvals/{standing.pk}/revoke"
    refused = stranger.post(url, {"reason": "not mine"})  # no right in its tenant: it does not exist for them
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    blank = ann.post(url, {"reason": "  "})
    assert blank.status_code == 400 and blank.json()["code"] == "reason_required"
    assert blank["Content-Type"].startswith("application/problem+json")
    assert StandingApproval.objects.get(pk=standing.pk).revoked_at is None

    done = ann.post(url, {"reason": "bookings closed"})
    assert done.status_code == 200, done.content
    assert done.json()["revoke_reason"] == "bookings closed" and done.json()["revoked_by"] == "ann"
    assert Event.objects.get(kind="standing_approval_revoked").data["reason"] == "bookings closed"
    again = ann.post(url, {"reason": "twice"})
    assert again.status_code == 409 and again.json()["code"] == "already_revoked"
