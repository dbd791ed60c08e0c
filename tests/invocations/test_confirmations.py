"""Human confirmation bound to a digest (docs/concepts/confirmation.md, failure table row 5): approve, deny,
expire, single use."""
from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from invocations_app import admission, runs
from invocations_app.confirmations import (
    AlreadyDecided,
    StaleDigest,
    confirmation_approve,
    confirmation_deny,
    confirmations_expire_due,
)
from invocations_app.models import Confirmation, Event, Invocation
from tests.builders import make_calendar_spec, make_grant, make_subject
from tests.conftest import require_postgres
from toolops.errors import ApplicationError

ARGS_A = {"calendar_id": "primary", "title": "Bring passport"}
ARGS_B = {"calendar_id": "primary", "title": "Bring passport and visa"}


# --- helpers ----------------------------------------------------------------------------------


class Session:
    """A subject with a calendar grant, one run and one model call seeing the calendar tool."""

    def __init__(self, spec):
        self.spec = spec
        self.subject = make_subject()
        make_grant(subject=self.subject, capability="calendar.write", operation_class="create")
        self.run = runs.run_create(
            subject=self.subject, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None
        )
        self.call = runs.model_call_create(run=self.run, tool_refs=[spec.ref], fmt="openai", context=[])
        self._n = 0

    def propose(self, arguments: dict) -> Invocation:
        self._n += 1
        inv, created = admission.proposal_admit(
            model_call=self.call, subject=self.subject, proposal_id=f"call_{self._n}", name=self.spec.ref,
            arguments_bytes=json.dumps(arguments).encode(),
        )
        assert created
        return inv


def pending_for(inv: Invocation) -> Confirmation:
    return Confirmation.objects.get(invocation=inv, state="pending")


def state_of(inv: Invocation) -> str:
    return Invocation.objects.values_list("state", flat=True).get(pk=inv.pk)


@pytest.fixture
def session(db):
    return Session(make_calendar_spec())


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="x")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="x")


# --- docs/concepts/failures.md row 5: the approval is bound to the digest -----------------------------------------


@pytest.mark.django_db
def test_it_waits_in_authorized_with_a_pending_confirmation_of_the_digest(session):
    inv = session.propose(ARGS_A)
    assert state_of(inv) == "AUTHORIZED"
    confirmation = pending_for(inv)
    assert confirmation.digest == inv.digest
    assert confirmation.arguments == ARGS_A


@pytest.mark.django_db
def test_it_prepares_the_invocation_when_the_digest_seen_is_approved(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    confirmation_approve(confirmation=confirmation, user=alice, digest_seen=inv.digest, reason="ok")
    assert state_of(inv) == "PREPARED"
    confirmation.refresh_from_db()
    assert (confirmation.state, confirmation.decided_by, confirmation.reason) == ("approved", alice, "ok")
    assert confirmation.decided_at is not None


@pytest.mark.django_db
def test_it_refuses_an_approval_that_carries_another_digest_and_changes_nothing(session, alice):
    inv = session.propose(ARGS_A)
    other = session.propose(ARGS_B)
    confirmation = pending_for(inv)
    seq_before = Invocation.objects.get(pk=inv.pk).event_seq
    for stale in (other.digest, "0" * 64, "", inv.digest.upper()):
        with pytest.raises(StaleDigest) as err:
            confirmation_approve(confirmation=confirmation, user=alice, digest_seen=stale)
        assert err.value.extra["digest"] == inv.digest
    assert state_of(inv) == "AUTHORIZED"
    confirmation.refresh_from_db()
    assert confirmation.state == "pending" and confirmation.decided_by is None
    assert Invocation.objects.get(pk=inv.pk).event_seq == seq_before
    assert not Event.objects.filter(invocation=inv, kind="confirmation_approved").exists()
    confirmation_approve(confirmation=confirmation, user=alice, digest_seen=inv.digest)  # still approvable
    assert state_of(inv) == "PREPARED"


@pytest.mark.django_db
def test_it_needs_a_new_confirmation_when_the_arguments_change(session, alice):
    a = session.propose(ARGS_A)
    confirmation_approve(confirmation=pending_for(a), user=alice, digest_seen=a.digest)
    b = session.propose(ARGS_B)  # the model came back with changed arguments: a new proposal
    assert b.digest != a.digest
    assert state_of(a) == "PREPARED"
    assert state_of(b) == "AUTHORIZED"  # A's approval does not carry over
    confirmation_b = pending_for(b)
    assert confirmation_b.digest == b.digest
    with pytest.raises(StaleDigest):
        confirmation_approve(confirmation=confirmation_b, user=alice, digest_seen=a.digest)
    assert state_of(b) == "AUTHORIZED"
    confirmation_approve(confirmation=confirmation_b, user=alice, digest_seen=b.digest)
    assert state_of(b) == "PREPARED"


@pytest.mark.django_db
def test_it_asks_again_for_the_same_arguments_in_a_new_proposal(session, alice):
    """Same digest, but a new invocation: confirmations are per invocation, not per digest."""
    a = session.propose(ARGS_A)
    confirmation_approve(confirmation=pending_for(a), user=alice, digest_seen=a.digest)
    again = session.propose({"title": "Bring passport", "calendar_id": " PRIMARY "})
    assert again.digest == a.digest
    assert state_of(again) == "AUTHORIZED"
    assert pending_for(again).invocation_id == again.pk


# --- deny --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_rejects_the_invocation_when_a_human_denies(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    confirmation_deny(confirmation=confirmation, user=alice, reason="wrong calendar")
    stored = Invocation.objects.get(pk=inv.pk)
    assert stored.state == "AUTHORIZATION_REJECTED"
    assert stored.error_code == "confirmation_denied"
    assert "wrong calendar" in stored.error_message
    confirmation.refresh_from_db()
    assert (confirmation.state, confirmation.reason, confirmation.decided_by) == ("denied", "wrong calendar", alice)


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["", "   ", "\n\t"])
def test_it_requires_a_reason_to_deny(session, alice, reason):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    with pytest.raises(ApplicationError) as err:
        confirmation_deny(confirmation=confirmation, user=alice, reason=reason)
    assert err.value.code == "reason_required"
    assert state_of(inv) == "AUTHORIZED"
    confirmation.refresh_from_db()
    assert confirmation.state == "pending"


@pytest.mark.django_db
def test_it_refuses_to_approve_a_denied_confirmation(session, alice, bob):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    confirmation_deny(confirmation=confirmation, user=alice, reason="no")
    with pytest.raises(AlreadyDecided):
        confirmation_approve(confirmation=Confirmation.objects.get(pk=confirmation.pk), user=bob, digest_seen=inv.digest)
    assert state_of(inv) == "AUTHORIZATION_REJECTED"


# --- expiry ------------------------------------------------------------------------------


def _expire_now(confirmation: Confirmation) -> None:
    Confirmation.objects.filter(pk=confirmation.pk).update(expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_it_cancels_the_invocation_when_its_confirmation_expires(session):
    inv = session.propose(ARGS_A)
    keep = session.propose(ARGS_B)
    confirmation = pending_for(inv)
    _expire_now(confirmation)
    assert confirmations_expire_due() == 1
    stored = Invocation.objects.get(pk=inv.pk)
    assert stored.state == "CANCELLED_BEFORE_COMMIT"
    assert stored.error_code == "confirmation_expired"
    confirmation.refresh_from_db()
    assert confirmation.state == "expired" and confirmation.decided_at is not None
    assert state_of(keep) == "AUTHORIZED" and pending_for(keep)  # not yet due
    event = Event.objects.filter(invocation=inv).order_by("-seq").first()
    assert (event.kind, event.from_state, event.to_state) == ("confirmation_expired", "AUTHORIZED", "CANCELLED_BEFORE_COMMIT")


@pytest.mark.django_db
def test_it_expires_each_confirmation_only_once(session):
    inv = session.propose(ARGS_A)
    _expire_now(pending_for(inv))
    assert confirmations_expire_due() == 1
    assert confirmations_expire_due() == 0
    assert Event.objects.filter(invocation=inv, kind="confirmation_expired").count() == 1


@pytest.mark.django_db
def test_it_refuses_to_approve_an_expired_confirmation(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    _expire_now(confirmation)
    confirmations_expire_due()
    with pytest.raises(AlreadyDecided) as err:
        confirmation_approve(confirmation=Confirmation.objects.get(pk=confirmation.pk), user=alice, digest_seen=inv.digest)
    assert err.value.extra["state"] == "expired"
    assert state_of(inv) == "CANCELLED_BEFORE_COMMIT"


@pytest.mark.django_db
def test_it_refuses_to_approve_a_confirmation_past_its_expiry_that_the_sweeper_has_not_seen(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    _expire_now(confirmation)
    with pytest.raises(AlreadyDecided):
        confirmation_approve(confirmation=Confirmation.objects.get(pk=confirmation.pk), user=alice, digest_seen=inv.digest)
    assert state_of(inv) != "PREPARED"
    assert not Event.objects.filter(invocation=inv, kind="confirmation_approved").exists()


@pytest.mark.django_db
def test_it_keeps_the_expiry_it_records_when_an_overdue_confirmation_is_approved(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    _expire_now(confirmation)
    with pytest.raises(AlreadyDecided) as err:
        confirmation_approve(confirmation=Confirmation.objects.get(pk=confirmation.pk), user=alice, digest_seen=inv.digest)
    assert err.value.extra["state"] == "expired"
    assert Confirmation.objects.get(pk=confirmation.pk).state == "expired"
    assert state_of(inv) == "CANCELLED_BEFORE_COMMIT"


# --- single use --------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_lets_a_confirmation_be_decided_only_once(session, alice, bob):
    inv = session.propose(ARGS_A)
    confirmation_approve(confirmation=pending_for(inv), user=alice, digest_seen=inv.digest)
    confirmation = Confirmation.objects.get(invocation=inv)
    with pytest.raises(AlreadyDecided) as err:
        confirmation_approve(confirmation=confirmation, user=bob, digest_seen=inv.digest)
    assert err.value.extra["state"] == "approved"
    with pytest.raises(AlreadyDecided):
        confirmation_deny(confirmation=confirmation, user=bob, reason="changed my mind")
    assert Event.objects.filter(invocation=inv, kind="confirmation_approved").count() == 1
    assert not Event.objects.filter(invocation=inv, kind="confirmation_denied").exists()
    confirmation.refresh_from_db()
    assert confirmation.decided_by == alice
    assert state_of(inv) == "PREPARED"


@pytest.mark.django_db
def test_it_refuses_a_second_approval_through_a_stale_in_memory_object(session, alice, bob):
    """Two approvers loaded the same pending row; the second write must not win."""
    inv = session.propose(ARGS_A)
    first, second = pending_for(inv), pending_for(inv)
    confirmation_approve(confirmation=first, user=alice, digest_seen=inv.digest)
    with pytest.raises(AlreadyDecided):
        confirmation_approve(confirmation=second, user=bob, digest_seen=inv.digest)
    assert Confirmation.objects.get(pk=first.pk).decided_by == alice
    assert Event.objects.filter(invocation=inv, kind="confirmation_approved").count() == 1


@pytest.mark.django_db(transaction=True)
def test_it_lets_exactly_one_of_two_concurrent_approvals_win(django_user_model):
    require_postgres()
    session = Session(make_calendar_spec())
    inv = session.propose(ARGS_A)
    confirmation_id = pending_for(inv).pk
    users = [django_user_model.objects.create_user(name, password="x") for name in ("alice", "bob")]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approver(user) -> None:
        try:
            confirmation = Confirmation.objects.select_related("invocation").get(pk=confirmation_id)
            barrier.wait(timeout=10)
            confirmation_approve(confirmation=confirmation, user=user, digest_seen=inv.digest)
            outcomes.append("approved")
        except AlreadyDecided:
            outcomes.append("already_decided")
        except Exception as exc:  # noqa: BLE001 - surfaced in the assertion below
            outcomes.append(f"error: {exc!r}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=approver, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["already_decided", "approved"]
    assert Event.objects.filter(invocation_id=inv.pk, kind="confirmation_approved").count() == 1
    assert state_of(inv) == "PREPARED"
    assert Confirmation.objects.get(pk=confirmation_id).state == "approved"


@pytest.mark.django_db(transaction=True)
def test_it_lets_exactly_one_of_a_concurrent_approve_and_deny_win(django_user_model):
    require_postgres()
    session = Session(make_calendar_spec())
    inv = session.propose(ARGS_A)
    confirmation_id = pending_for(inv).pk
    alice = django_user_model.objects.create_user("alice", password="x")
    bob = django_user_model.objects.create_user("bob", password="x")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def act(kind: str) -> None:
        try:
            confirmation = Confirmation.objects.select_related("invocation").get(pk=confirmation_id)
            barrier.wait(timeout=10)
            if kind == "approve":
                confirmation_approve(confirmation=confirmation, user=alice, digest_seen=inv.digest)
            else:
                confirmation_deny(confirmation=confirmation, user=bob, reason="no")
            outcomes.append(kind)
        except AlreadyDecided:
            outcomes.append("already_decided")
        except Exception as exc:  # noqa: BLE001
            outcomes.append(f"error: {exc!r}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=act, args=(k,)) for k in ("approve", "deny")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(outcomes) == 2 and outcomes.count("already_decided") == 1, outcomes
    winner = next(o for o in outcomes if o != "already_decided")
    assert state_of(inv) == {"approve": "PREPARED", "deny": "AUTHORIZATION_REJECTED"}[winner]
    decisions = Event.objects.filter(invocation_id=inv.pk, kind__in=["confirmation_approved", "confirmation_denied"])
    assert decisions.count() == 1


# --- every decision is an event --------------------------------------------------------------


@pytest.mark.django_db
def test_it_records_an_approval_as_an_event_with_the_user_and_reason(session, alice):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    confirmation_approve(confirmation=confirmation, user=alice, digest_seen=inv.digest, reason="checked the date")
    event = Event.objects.get(invocation=inv, kind="confirmation_approved")
    assert event.actor == "user:alice"
    assert (event.from_state, event.to_state) == ("AUTHORIZED", "PREPARED")
    inv.refresh_from_db()
    assert event.data == {"confirmation_id": str(confirmation.pk), "digest": inv.digest, "reason": "checked the date",
                          "deadline": inv.deadline.isoformat()}  # the call's deadline starts at approval


@pytest.mark.django_db
def test_it_records_a_denial_as_an_event_with_the_user_and_reason(session, bob):
    inv = session.propose(ARGS_A)
    confirmation = pending_for(inv)
    confirmation_deny(confirmation=confirmation, user=bob, reason="not this calendar")
    event = Event.objects.get(invocation=inv, kind="confirmation_denied")
    assert event.actor == "user:bob"
    assert (event.from_state, event.to_state) == ("AUTHORIZED", "AUTHORIZATION_REJECTED")
    assert event.data == {"confirmation_id": str(confirmation.pk), "reason": "not this calendar"}


@pytest.mark.django_db
def test_it_records_the_request_the_approval_and_nothing_else_in_order(session, alice):
    inv = session.propose(ARGS_A)
    confirmation_approve(confirmation=pending_for(inv), user=alice, digest_seen=inv.digest)
    events = list(Event.objects.filter(invocation=inv).order_by("seq"))
    assert [e.kind for e in events][-3:] == ["authorized", "confirmation_requested", "confirmation_approved"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-2].data["digest"] == inv.digest


@pytest.mark.django_db
def test_it_records_the_approval_of_a_read_only_call_without_moving_it(alice):
    """Read-only tools go AUTHORIZED → EXECUTING; approval is an event, not a transition."""
    session = Session(make_calendar_spec(side_effect_class="read_only"))
    inv = session.propose(ARGS_A)
    confirmation_approve(confirmation=pending_for(inv), user=alice, digest_seen=inv.digest, reason="fine")
    assert state_of(inv) == "AUTHORIZED"
    event = Event.objects.get(invocation=inv, kind="confirmation_approved")
    assert (event.actor, event.data["reason"]) == ("user:alice", "fine")
    assert (event.from_state, event.to_state) == ("AUTHORIZED", "AUTHORIZED")
