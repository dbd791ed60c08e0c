"""``on_behalf_of`` names a real person: resolved when the run opens to one user of the tenant
(NFKC, case-folded, UTS #39 skeleton), refused when it names nobody, and compared by user when
that person tries to approve — through the agent API, the Approvals API and the admin."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from guardian.shortcuts import assign_perm

from invocations_app.models import Confirmation, Run
from specs_app.models import Subject
from tests.builders import make_grant, make_person, make_staff, make_tenant, person_client

from tests.approvals.conftest import ARGS

pytestmark = pytest.mark.django_db


@pytest.fixture
def bob(calendar):
    """bob may approve calendar calls in every tenant (so also the agent's): the person a run acts for."""
    return person_client(username="bob", spec=calendar)


def calendar_call(agent, calendar, **run) -> Confirmation:
    """A calendar call waiting for a person, in a run opened with ``run`` (POST /api/v1/runs)."""
    make_grant(subject=agent.subject, capability="calendar.write", operation_class="create",
               scope_kind="exact", scope_values=["primary", "work"])
    opened = agent.run(**run)
    call = agent.model_call(opened["id"], tools=[calendar.ref])
    invocation = agent.propose(call["id"], name=calendar.ref, arguments=ARGS).json()
    return Confirmation.objects.get(invocation_id=invocation["id"], state="pending")


def approve(person, confirmation: Confirmation):
    return person.client.post(f"/api/v1/confirmations/{confirmation.pk}/approve", {"digest": confirmation.digest})


@pytest.mark.parametrize("declared", ["bоb", "BOB", "ｂｏｂ", "Bob@Example.Invalid"],
                         ids=["cyrillic-o", "upper-case", "fullwidth", "email-any-case"])
def test_a_name_that_reads_as_bob_is_bob_and_he_cannot_approve_the_runs_calls(agent, calendar, bob, declared):
    confirmation = calendar_call(agent, calendar, on_behalf_of=declared)
    answer = approve(bob, confirmation)
    assert answer.status_code == 403 and answer.json()["code"] == "separation_of_duties", answer.content
    confirmation.refresh_from_db()
    assert confirmation.state == "pending" and not confirmation.approvals.exists()
    assert agent.get(f"/api/v1/runs/{confirmation.run_id}").json()["on_behalf_of_user"] == "bob"


@pytest.mark.parametrize("declared, character", [("bob\u200b", "U+200B ZERO WIDTH SPACE"),
                                                 ("b\u00adob", "U+00AD SOFT HYPHEN"),
                                                 ("bo\u202eb", "U+202E RIGHT-TO-LEFT OVERRIDE")])
def test_a_name_with_an_invisible_character_is_refused_saying_which(agent, bob, declared, character):
    answer = agent.post("/api/v1/runs", {"timezone": "UTC", "on_behalf_of": declared})
    assert answer.status_code == 400 and answer["Content-Type"] == "application/problem+json"
    assert answer.json()["code"] == "unknown_person" and answer.json()["character"] == character
    assert character in answer.json()["detail"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("declared", ["user:bob", "nobody", "carol"])
def test_a_name_of_nobody_in_the_tenant_is_refused(agent, bob, declared):
    carol = make_staff(username="carol")
    assign_perm("specs_app.approve_calls", carol, make_tenant(slug="elsewhere"))  # a person of another tenant only
    answer = agent.post("/api/v1/runs", {"timezone": "UTC", "on_behalf_of": declared})
    assert answer.status_code == 400 and answer.json()["code"] == "unknown_person", answer.content
    assert "names no person of tenant" in answer.json()["detail"]
    assert not Run.objects.exists()


def test_two_people_whose_names_look_alike_make_the_name_ambiguous_and_refused(agent, bob):
    make_person(username="bоb", tenant=agent.subject.tenant)  # Cyrillic о: another account that reads as bob
    answer = agent.post("/api/v1/runs", {"timezone": "UTC", "on_behalf_of": "bob"})
    assert answer.status_code == 400 and answer.json()["code"] == "unknown_person"
    assert "reads as 2 people" in answer.json()["detail"]


def test_a_run_without_on_behalf_of_acts_for_nobody_and_anyone_entitled_approves(agent, calendar, bob):
    confirmation = calendar_call(agent, calendar)
    assert approve(bob, confirmation).status_code == 200
    assert agent.get(f"/api/v1/runs/{confirmation.run_id}").json()["on_behalf_of_user"] is None


# --- an agent bound to the person it acts for ------------------------------------------------------

def bind_in_admin(client, subject: Subject, person) -> object:
    """Set ``acts_for`` on the subject's admin change form, as an admin does."""
    admin = User.objects.filter(username="root").first() or make_staff(username="root", superuser=True)
    client.force_login(admin)
    return client.post(f"/specs_app/subject/{subject.pk}/change/", {
        "tenant": subject.tenant_id, "name": subject.name, "is_active": "on", "acts_for": person.pk if person else "",
        "timezone": subject.timezone, "locale": subject.locale,  # the form shows them filled in
    })


def test_an_admin_binds_an_agent_to_a_person_of_its_tenant_only(client, agent):
    outsider = make_staff(username="olga")  # no permission on the agent's tenant
    refused = bind_in_admin(client, agent.subject, outsider)
    assert refused.status_code == 200 and "is not a person of tenant" in refused.content.decode()
    assert Subject.objects.get(pk=agent.subject.pk).acts_for is None
    alice = make_person(username="alice", tenant=agent.subject.tenant)
    assert bind_in_admin(client, agent.subject, alice).status_code == 302
    assert Subject.objects.get(pk=agent.subject.pk).acts_for == alice


def test_a_bound_agents_runs_act_for_its_person_named_or_not(client, agent, calendar, bob):
    bind_in_admin(client, agent.subject, bob)
    confirmation = calendar_call(agent, calendar)
    assert approve(bob, confirmation).status_code == 403
    assert agent.get(f"/api/v1/runs/{confirmation.run_id}").json()["on_behalf_of_user"] == "bob"
    assert agent.run(on_behalf_of="BOB")["on_behalf_of_user"] == "bob"
    carol = make_person(username="carol", tenant=agent.subject.tenant)
    conflict = agent.post("/api/v1/runs", {"timezone": "UTC", "on_behalf_of": carol.username})
    assert conflict.status_code == 400 and conflict.json()["code"] == "on_behalf_of_conflict"
    assert conflict.json()["acts_for"] == "bob"


def test_binding_an_agent_covers_the_calls_of_runs_it_opened_before(client, agent, calendar, bob):
    confirmation = calendar_call(agent, calendar)  # a run acting for nobody, still waiting
    bind_in_admin(client, agent.subject, bob)
    assert approve(bob, confirmation).status_code == 403


def test_a_run_stored_before_names_were_resolved_is_compared_as_a_reader_sees_it(agent, calendar, bob):
    confirmation = calendar_call(agent, calendar)
    Run.objects.filter(pk=confirmation.run_id).update(on_behalf_of="user:bоb\u200b")  # as an old row may hold it
    assert approve(bob, confirmation).status_code == 403
