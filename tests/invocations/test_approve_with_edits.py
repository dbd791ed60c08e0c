"""Approve with edits: a new invocation with a new digest, the original cancelled and linked."""
from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from invocations_app.confirmation_edits import confirmation_approve_with_edits, confirmation_preview_edit
from invocations_app.confirmations import StaleDigest, confirmation_approve
from invocations_app.models import Confirmation, Invocation, ToolMessage
from invocations_app.tool_messages import tool_message
from toolops.errors import ApplicationError
from tests.builders import ServiceWorld, fresh, make_demo_spec, make_grant

pytestmark = pytest.mark.django_db

ARGS = '{"calendar_id": "primary", "title": "Passport", "start": "2026-07-20T09:00:00+08:00", "duration_minutes": 10}'


@pytest.fixture
def pending(agent):
    spec = make_demo_spec(name="calendar.create_event")
    make_grant(subject=agent.subject, capability="calendar.write", operation_class="create",
               scope_kind="exact", scope_values=["primary", "work"])
    run = agent.run()
    call = agent.model_call(run["id"], tools=[spec.ref])
    inv = agent.propose(call["id"], name=spec.ref, arguments=ARGS).json()
    assert inv["state"] == "AUTHORIZED" and inv["confirmation"]["state"] == "pending"
    return Confirmation.objects.get(invocation_id=inv["id"])


@pytest.fixture
def approver():
    return User.objects.create_user("ann", is_staff=True)


def test_it_previews_the_new_digest_without_writing(pending):
    edited = {**pending.arguments, "duration_minutes": 30}
    plan = confirmation_preview_edit(confirmation=pending, edited_arguments=edited)
    assert plan.error is None
    assert plan.digest != pending.digest
    assert Confirmation.objects.count() == 1


def test_it_replaces_the_call_and_approves_the_confirmed_new_digest(pending, approver, agent):
    edited = {**pending.arguments, "duration_minutes": 5}  # only narrows: the editor's approval releases it
    new_digest = confirmation_preview_edit(confirmation=pending, edited_arguments=edited).digest
    replacement = confirmation_approve_with_edits(
        confirmation=pending, user=approver, digest_seen=pending.digest, edited_arguments=edited,
        new_digest_seen=new_digest, reason="five minutes is enough",
    )
    assert replacement.state == "PREPARED"
    assert replacement.digest == new_digest and replacement.edited_from_id == pending.invocation_id
    assert replacement.normalized_arguments["duration_minutes"] == 5
    original = agent.get(f"/api/v1/invocations/{pending.invocation_id}").json()
    assert original["state"] == "CANCELLED_BEFORE_COMMIT"
    assert original["error"]["detail"]["replacement_invocation_id"] == str(replacement.pk)
    assert original["confirmation"]["state"] == "edited"
    assert original["confirmation"]["replacement_invocation_id"] == str(replacement.pk)


def test_it_refuses_when_the_approver_did_not_confirm_the_new_digest(pending, approver):
    edited = {**pending.arguments, "duration_minutes": 30}
    with pytest.raises(StaleDigest):
        confirmation_approve_with_edits(
            confirmation=pending, user=approver, digest_seen=pending.digest, edited_arguments=edited,
            new_digest_seen=pending.digest, reason="x",
        )
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.invocation.state == "AUTHORIZED"


def test_it_refuses_an_edit_the_grants_would_deny_and_changes_nothing(pending, approver):
    edited = {**pending.arguments, "calendar_id": "boss"}  # outside the grant's scope
    new_digest = confirmation_preview_edit(confirmation=pending, edited_arguments=edited).digest
    with pytest.raises(ApplicationError) as refused:
        confirmation_approve_with_edits(
            confirmation=pending, user=approver, digest_seen=pending.digest, edited_arguments=edited,
            new_digest_seen=new_digest, reason="move it",
        )
    assert refused.value.code == "edit_not_authorized"
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.invocation.state == "AUTHORIZED"
    assert Invocation.objects.count() == 1


def test_it_reparses_the_bytes_the_approver_typed_with_the_strict_parser(pending):
    plan = confirmation_preview_edit(confirmation=pending, edited_arguments='{"title": "a", "title": "b"}')
    assert plan.error is not None and plan.final_state == "PARSE_REJECTED"


def test_it_answers_the_models_original_tool_call_id_saying_a_person_changed_the_arguments(approver):
    world = ServiceWorld(user=approver)
    original = world.write("Dinner at 8")
    confirmation = world.pending(original)
    edited = {"calendar_id": "primary", "title": "Dinner at 9"}
    new_digest = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited).digest
    replacement = confirmation_approve_with_edits(
        confirmation=confirmation, user=approver, digest_seen=original.digest, edited_arguments=edited,
        new_digest_seen=new_digest, reason="nine is better",
    )
    checker = User.objects.create_user("checker")  # a new title: another person must approve it
    confirmation_approve(confirmation=world.pending(replacement), user=checker, digest_seen=new_digest)
    world.execute(replacement)

    message = json.loads(tool_message(invocation=fresh(original), fmt="openai"))
    assert message["tool_call_id"] == original.proposal.proposal_id != replacement.proposal.proposal_id
    payload = json.loads(message["content"])
    assert payload["ok"] is True and payload["invocation_id"] == str(replacement.pk)
    notice = payload["edited_by_approver"]
    assert notice["arguments"] == {"calendar_id": "primary", "title": "Dinner at 9"}
    assert notice["reason"] == "nine is better" and "changed its arguments" in notice["message"]
    assert not ToolMessage.objects.filter(invocation=original).exists()
