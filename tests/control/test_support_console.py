"""The support console through Django's test client: the unknown-outcome queue and the call record.

Unknown outcomes are built without a worker: a proposal is admitted through the services, its
confirmation approved, then the invocation is moved PREPARED → EXECUTING → OUTCOME_UNKNOWN with
the transition service and an Attempt row, exactly as a worker whose request timed out would
leave it. The calendar cases run against the demo services on an ephemeral port.
"""
from __future__ import annotations

import threading
from datetime import timedelta
from unittest import mock

import pytest
import requests
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from invocations_app.confirmations import confirmation_approve
from invocations_app.models import Attempt, Confirmation, Event, IdempotencyRecord, Invocation, ToolMessage
from worker.remote_keys import invocation_remote_key
from worker.support import (
    AlreadyResolved, SecondPersonRequired, resolution_confirm, resolution_mark_committed, resolution_mark_not_committed,
)
from invocations_app.runs import model_call_create, run_finish
from invocations_app.transitions import invocation_transition
from specs_app.models import Subject, ToolSpec
from tests.builders import allow_approving, logged_in_client, messages_of, allow_resolving, CALENDAR_ARGS, admit_proposal, make_demo_spec, make_grant, make_staff, make_subject, make_tenant
from tests.conftest import open_demo_services, require_postgres
from toolops.runtime.tracecontext import new_span_id

pytestmark = pytest.mark.django_db

QUEUE = "/console/unknown-outcomes/"
PAYMENT_ARGS = {"to_account": "acme-supplier-42", "amount": {"amount": "1250.00", "currency": "EUR"}, "memo": "Invoice 2026-117"}
TIMEOUT_ERROR = {"code": "outcome_unknown", "message": "ReadTimeout talking to the tool"}


# --- builders (shared with tests/browser/test_support_console.py) ------------------------------

def open_but_nobody_listens(settings) -> None:
    """The demo services' address opened by the operator (nothing is open by default), with
    nothing listening behind it (port 9, discard): a look-up is not reached, not refused."""
    open_demo_services(settings, "http://127.0.0.1:9")


def make_finance_agent(*, tenant_slug: str = "acme", name: str = "finance-bot", currency: str = "EUR") -> Subject:
    tenant = make_tenant(slug=tenant_slug)
    subject = make_subject(tenant=tenant, name=name)
    make_grant(subject=subject, capability="payments.transfer", operation_class="create",
               limits={"currency": currency, "max_amount_per_call": 500_000})
    return subject


def make_planner(*, tenant_slug: str = "globex") -> Subject:
    subject = make_subject(tenant=make_tenant(slug=tenant_slug), name="planner")
    make_grant(subject=subject, capability="calendar.write", operation_class="create")
    return subject


def make_unknown(subject: Subject, spec: ToolSpec, arguments: dict, *, approver=None, error: dict | None = None,
                 sent: bool = True, timezone_name: str = "Europe/Paris") -> Invocation:
    """An invocation left in OUTCOME_UNKNOWN by a first attempt whose response never came."""
    invocation = admit_proposal(subject=subject, spec=spec, arguments=arguments, timezone_name=timezone_name)
    assert invocation.state == "AUTHORIZED", invocation.error_message
    confirmation = Confirmation.objects.get(invocation=invocation, state="pending")
    approver = approver or make_staff(username=f"approver-{new_span_id()[:6]}")
    with mock.patch("invocations_app.dispatch.execution_send"):  # no worker here: nothing is queued
        confirmation_approve(confirmation=confirmation, user=approver, digest_seen=confirmation.digest, reason="expected")
    started = timezone.now() - timedelta(seconds=6)
    invocation_transition(invocation=invocation, src="PREPARED", dst="EXECUTING", kind="execution_started",
                          data={"attempt": 1, "resend_same_key": False}, fields={"attempt_count": 1, "next_attempt_at": None})
    span = new_span_id()
    Attempt.objects.create(
        invocation=invocation, number=1, span_id=span, worker="worker-1", started_at=started,
        sent_at=started + timedelta(milliseconds=4) if sent else None, ended_at=started + timedelta(seconds=5),
        commit="unknown", failure_class="timeout_unknown",
        outcome={"commit": "unknown", "error": error or TIMEOUT_ERROR, "failure_class": "timeout_unknown"},
        decision={"action": "reconcile", "reason": "outcome unknown"},
    )
    idempotent = spec.side_effect_class == "write_idempotent"
    invocation_transition(
        invocation=invocation, src="EXECUTING", dst="OUTCOME_UNKNOWN", kind="outcome_unknown",
        data={"error": error or TIMEOUT_ERROR, "reconcile": idempotent},
        fields={"commit_status": "unknown", "error_code": "outcome_unknown",
                "error_message": "the tool may have acted; the outcome is being reconciled"},
    )
    invocation.refresh_from_db()
    return invocation


client_for = logged_in_client


def act(client, invocation, verb, **form):
    return client.post(f"{QUEUE}{invocation.pk}/{verb}", {"next": QUEUE, **form}, follow=True)


# --- fixtures -------------------------------------------------------------------------------------

@pytest.fixture
def payments():
    return make_demo_spec(name="payments.transfer")


@pytest.fixture
def finance():
    return make_finance_agent()


@pytest.fixture
def unknown(payments, finance) -> Invocation:
    return make_unknown(finance, payments, PAYMENT_ARGS)


@pytest.fixture
def support(payments):
    user = make_staff(username="support")
    allow_resolving(user=user, spec=payments)
    return user


@pytest.fixture
def demo_services(settings, tmp_path):
    """The demo calendar/payments services on an ephemeral port; executors are pointed at them."""
    from demo_services.server import make_server

    server = make_server("127.0.0.1", 0, tmp_path / "demo-services")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    open_demo_services(settings, base)
    yield base
    server.shutdown()
    server.server_close()


def transition_events(invocation) -> list[Event]:
    return list(Event.objects.filter(invocation=invocation, from_state="OUTCOME_UNKNOWN").exclude(to_state="OUTCOME_UNKNOWN"))


# --- the queue -------------------------------------------------------------------------------------

def test_it_shows_a_resolver_the_unknown_call_with_its_tool_tenant_arguments_attempts_error_and_age(unknown, support):
    resp = client_for(support).get(QUEUE)
    assert resp.status_code == 200
    html = resp.content.decode()
    assert [r.pk for r in resp.context["rows"]] == [unknown.pk]
    assert "payments.transfer@1" in html and "acme" in html and "finance-bot" in html
    assert "to_account: acme-supplier-42" in html and "&quot;amount_minor&quot;: 125000" in html
    row = resp.context["rows"][0]
    assert len(row.attempt_list) == 1 and row.last_attempt.failure_class == "timeout_unknown"
    assert "ReadTimeout talking to the tool" in html and "outcome_unknown" in html
    assert row.age_text and row.unknown_for
    assert [h["kind"] for h in row.history_lines] == ["outcome_unknown"]
    assert f'href="/console/calls/{unknown.pk}/"' in html, "links the record of the call"
    assert 'data-testid="resend-unavailable"' in html, "payments is write_unsafe: no re-send"


def test_it_lists_oldest_first_and_filters_by_tool_and_tenant(payments, finance, support):
    first = make_unknown(finance, payments, PAYMENT_ARGS)
    other_tenant = make_finance_agent(tenant_slug="initech", name="ap-bot")
    second = make_unknown(other_tenant, payments, {**PAYMENT_ARGS, "memo": "second"})
    Invocation.objects.filter(pk=second.pk).update(created_at=first.created_at - timedelta(minutes=5))
    client = client_for(support)
    assert [r.pk for r in client.get(QUEUE).context["rows"]] == [second.pk, first.pk]
    assert [r.pk for r in client.get(QUEUE, {"tenant": "acme"}).context["rows"]] == [first.pk]
    assert [r.pk for r in client.get(QUEUE, {"tool": str(payments.pk)}).context["rows"]] == [second.pk, first.pk]
    assert client.get(QUEUE, {"tool": "999999"}).context["rows"] == []


def test_it_reads_the_queue_in_a_constant_number_of_queries(payments, finance, support):
    make_unknown(finance, payments, PAYMENT_ARGS)
    client = client_for(support)
    client.get(QUEUE)
    with CaptureQueriesContext(connection) as one:
        client.get(QUEUE)
    for memo in ("b", "c", "d"):
        make_unknown(finance, payments, {**PAYMENT_ARGS, "memo": memo})
    with CaptureQueriesContext(connection) as four:
        assert len(client.get(QUEUE).context["rows"]) == 4
    assert len(four) == len(one), [q["sql"] for q in four.captured_queries]


def test_it_shows_nothing_to_staff_without_resolve_and_refuses_every_post(unknown):
    stranger = make_staff(username="stranger")
    allow_approving(user=stranger, spec=unknown.tool_spec)  # approving is not resolving
    client = client_for(stranger)
    resp = client.get(QUEUE)
    assert resp.context["rows"] == [] and 'data-testid="queue-empty"' in resp.content.decode()
    assert client.get(f"{QUEUE}count.json").json() == {"unknown": 0}
    seq = unknown.event_seq
    for verb, form in [("lookup", {}), ("mark-committed", {"external_resource_id": "trf_1", "evidence": "x"}),
                       ("mark-not-committed", {"evidence": "x"}), ("resend", {}), ("confirm", {"proposal_seq": "1"}),
                       ("reject", {"proposal_seq": "1"})]:
        resp = client.post(f"{QUEUE}{unknown.pk}/{verb}", {"reason": "forged", **form})
        assert resp.status_code == 403, verb
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN" and unknown.event_seq == seq


def test_it_scopes_by_tool_version(unknown):
    calendar = make_demo_spec(name="calendar.create_event")
    user = make_staff(username="calendar-support")
    allow_resolving(user=user, spec=calendar)
    assert client_for(user).get(QUEUE).context["rows"] == []
    assert client_for(user).post(f"{QUEUE}{unknown.pk}/lookup", {"reason": "x"}).status_code == 403


def test_it_lets_superusers_and_model_wide_resolvers_see_everything(unknown):
    boss = make_staff(username="boss", superuser=True)
    assert [r.pk for r in client_for(boss).get(QUEUE).context["rows"]] == [unknown.pk]
    wide = make_staff(username="wide")
    allow_resolving(user=wide)  # model-wide grant of the permission
    assert [r.pk for r in client_for(wide).get(QUEUE).context["rows"]] == [unknown.pk]


def test_it_requires_a_staff_login_csrf_and_post(unknown, support):
    anonymous = Client()
    assert anonymous.get(QUEUE).status_code == 302
    resp = anonymous.post(f"{QUEUE}{unknown.pk}/mark-not-committed", {"evidence": "x", "reason": "y"})
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    csrf = Client(enforce_csrf_checks=True)
    csrf.force_login(support)
    assert csrf.post(f"{QUEUE}{unknown.pk}/mark-not-committed", {"evidence": "x", "reason": "y"}).status_code == 403
    assert client_for(support).get(f"{QUEUE}{unknown.pk}/lookup").status_code == 405
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"


# --- look up now -----------------------------------------------------------------------------------

def test_it_looks_up_now_shows_the_answer_records_who_and_why_and_changes_nothing(unknown, support, settings):
    open_but_nobody_listens(settings)
    client = client_for(support)
    resp = act(client, unknown, "lookup", reason="customer asks whether the money left")
    [message] = messages_of(resp)
    assert "answered: unknown — the tool could not be reached" in message and "Nothing was changed" in message
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN" and unknown.commit_status == "unknown"
    event = Event.objects.get(invocation=unknown, kind="support_lookup")
    assert event.actor == "user:support" and event.from_state == event.to_state == "OUTCOME_UNKNOWN"
    assert event.data["reason"] == "customer asks whether the money left"
    assert event.data["committed"] is None and event.data["detail"] == {"reason": "the tool could not be reached"}
    row = resp.context["rows"][0]
    assert row.last_lookup_text == "unknown — the tool could not be reached"
    assert 'data-testid="lookup-answer"' in resp.content.decode()


def test_it_requires_a_reason_for_every_action(unknown, support):
    client = client_for(support)
    for verb, form in [("lookup", {}), ("mark-committed", {"external_resource_id": "trf_1", "evidence": "ledger"}),
                       ("mark-not-committed", {"evidence": "ledger"})]:
        resp = act(client, unknown, verb, reason="  ", **form)
        assert any("a reason is required" in m for m in messages_of(resp)), verb
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"
    assert not Event.objects.filter(invocation=unknown, actor="user:support").exists()


# --- mark committed / not committed -------------------------------------------------------------

def test_it_marks_not_committed_only_with_evidence_and_fails_the_call_with_a_tool_message(unknown, support):
    client = client_for(support)
    resp = act(client, unknown, "mark-not-committed", reason="checked", evidence="")
    assert any("evidence is required" in m for m in messages_of(resp))
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"

    resp = act(client, unknown, "mark-not-committed", reason="bank confirms no debit",
               evidence="Bank statement 2026-07-19 has no line for acme-supplier-42; ticket SUP-881")
    [message] = messages_of(resp)
    assert "FAILED_BEFORE_COMMIT" in message and "a tool message was given back" in message
    unknown.refresh_from_db()
    assert (unknown.state, unknown.commit_status, unknown.error_code) == ("FAILED_BEFORE_COMMIT", "not_committed", "not_committed")
    applied = Event.objects.get(invocation=unknown, kind="resolution_applied")
    assert applied.actor == "user:support" and "SUP-881" in applied.data["evidence"]
    assert applied.data["reason"] == "bank confirms no debit"
    [edge] = transition_events(unknown)
    assert edge.kind == "resolved_not_committed" and edge.to_state == "FAILED_BEFORE_COMMIT"
    assert edge.data["by"] == ["support"] and edge.data["run_live"] is True
    formats = sorted(ToolMessage.objects.filter(invocation=unknown).values_list("format", flat=True))
    assert formats == ["anthropic", "mcp", "openai"]
    openai = bytes(ToolMessage.objects.get(invocation=unknown, format="openai").message_bytes).decode()
    assert "not_committed" in openai and "SUP-881" not in openai, "evidence stays internal"
    assert IdempotencyRecord.objects.get(invocation=unknown).status == "failed"
    assert resp.context["rows"] == [], "resolved calls leave the queue"


def test_it_marks_committed_only_with_an_external_id_and_evidence_and_observes_with_a_tool_message(unknown, support):
    client = client_for(support)
    resp = act(client, unknown, "mark-committed", reason="found it", evidence="ledger line 7", external_resource_id=" ")
    assert any("external resource id is required" in m for m in messages_of(resp))
    resp = act(client, unknown, "mark-committed", reason="found it", evidence="", external_resource_id="trf_9")
    assert any("evidence is required" in m for m in messages_of(resp))
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN"

    resp = act(client, unknown, "mark-committed", reason="payee confirms receipt",
               evidence="Payments dashboard shows trf_9K2 at 14:02 for 1250.00 EUR", external_resource_id="trf_9K2")
    assert any("is OBSERVED" in m for m in messages_of(resp))
    unknown.refresh_from_db()
    assert (unknown.state, unknown.commit_status, unknown.external_resource_id) == ("OBSERVED", "committed", "trf_9K2")
    assert [e.kind for e in Event.objects.filter(invocation=unknown).order_by("seq")][-3:] == [
        "resolution_applied", "resolved_committed", "observed"]
    assert Event.objects.get(invocation=unknown, kind="resolved_committed").actor == "user:support"
    message = bytes(ToolMessage.objects.get(invocation=unknown, format="openai").message_bytes).decode()
    assert "trf_9K2" in message
    assert IdempotencyRecord.objects.get(invocation=unknown).status == "succeeded"


def test_it_emits_no_tool_message_once_the_run_has_ended(payments, finance, support):
    committed = make_unknown(finance, payments, PAYMENT_ARGS)
    failed = make_unknown(finance, payments, {**PAYMENT_ARGS, "memo": "other"})
    run_finish(run=committed.run, reason="the agent stopped")
    run_finish(run=failed.run, reason="the agent stopped")
    client = client_for(support)
    resp = act(client, committed, "mark-committed", reason="r", evidence="ledger", external_resource_id="trf_A")
    assert any("is COMMITTED" in m and "no tool message was emitted" in m for m in messages_of(resp))
    resp = act(client, failed, "mark-not-committed", reason="r", evidence="ledger")
    assert any("is FAILED_BEFORE_COMMIT" in m and "no tool message was emitted" in m for m in messages_of(resp))
    committed.refresh_from_db()
    failed.refresh_from_db()
    assert (committed.state, committed.commit_status, committed.external_resource_id) == ("COMMITTED", "committed", "trf_A")
    assert (failed.state, failed.commit_status) == ("FAILED_BEFORE_COMMIT", "not_committed")
    assert not ToolMessage.objects.filter(invocation__in=[committed, failed]).exists()
    assert Event.objects.get(invocation=committed, kind="resolved_committed").data["run_live"] is False
    assert Event.objects.get(invocation=failed, kind="resolved_not_committed").actor == "user:support"
    record = client.get(f"/console/calls/{committed.pk}/").content.decode()
    assert "after its run had ended, so no tool message was emitted" in record


def test_it_tells_a_second_resolver_who_resolved_it_first(unknown, support):
    other = make_staff(username="other")
    allow_resolving(user=other, spec=unknown.tool_spec)
    act(client_for(support), unknown, "mark-not-committed", reason="r", evidence="e")
    resp = act(client_for(other), unknown, "mark-committed", reason="r", evidence="e", external_resource_id="trf_X")
    assert any("already resolved: the call is FAILED_BEFORE_COMMIT now by support" in m for m in messages_of(resp))
    unknown.refresh_from_db()
    assert unknown.state == "FAILED_BEFORE_COMMIT" and unknown.external_resource_id == ""


# --- re-send -------------------------------------------------------------------------------------------

def test_it_refuses_to_resend_a_tool_without_idempotency(unknown, support):
    resp = act(client_for(support), unknown, "resend", reason="try again")
    assert any("only for write_idempotent" in m for m in messages_of(resp))
    unknown.refresh_from_db()
    assert unknown.state == "OUTCOME_UNKNOWN" and unknown.attempts.count() == 1


def test_it_looks_up_then_resends_a_calendar_call_with_the_same_key_creating_one_event(demo_services):
    calendar = make_demo_spec(name="calendar.create_event")
    planner = make_planner()
    unknown = make_unknown(planner, calendar, CALENDAR_ARGS)
    user = make_staff(username="cal-support")
    allow_resolving(user=user, spec=calendar)
    client = client_for(user)

    resp = act(client, unknown, "lookup", reason="did the event land?")
    assert any("not committed — the tool proves it never took effect" in m for m in messages_of(resp))
    resp = act(client, unknown, "resend", reason="lookup proved absence; same key is safe")
    assert any("with the same key" in m and "is OBSERVED" in m for m in messages_of(resp)), messages_of(resp)
    unknown.refresh_from_db()
    assert unknown.state == "OBSERVED" and unknown.external_resource_id.startswith("evt_")
    assert list(unknown.attempts.values_list("number", flat=True)) == [1, 2]
    started = Event.objects.get(invocation=unknown, kind="execution_started", from_state="OUTCOME_UNKNOWN")
    assert started.data["resend_same_key"] is True
    assert Event.objects.get(invocation=unknown, kind="support_resend").actor == "user:cal-support"
    events = requests.get(f"{demo_services}/calendar/calendars/primary/events", timeout=5).json()["events"]
    assert [e["id"] for e in events] == [unknown.external_resource_id]


def test_it_prefills_mark_committed_from_a_lookup_that_finds_the_effect(demo_services):
    calendar = make_demo_spec(name="calendar.create_event")
    unknown = make_unknown(make_planner(), calendar, CALENDAR_ARGS)
    # The first attempt did reach the calendar (under the key derived for the tenant, docs/concepts/execution.md);
    # only its response was lost.
    created = requests.post(
        f"{demo_services}/calendar/calendars/primary/events", timeout=5,
        headers={"Idempotency-Key": invocation_remote_key(unknown)},
        json={"title": CALENDAR_ARGS["title"], "start": unknown.normalized_arguments["start"], "duration_minutes": 45},
    ).json()
    boss = make_staff(username="boss", superuser=True)
    resp = act(client_for(boss), unknown, "lookup", reason="check")
    assert any(f"committed — the tool has it as {created['id']}" in m for m in messages_of(resp))
    assert f'value="{created["id"]}"' in resp.content.decode()
    act(client_for(boss), unknown, "mark-committed", reason="lookup found it", evidence="GET by-key 200",
        external_resource_id=created["id"])
    unknown.refresh_from_db()
    assert unknown.state == "OBSERVED" and unknown.external_resource_id == created["id"]


# --- four-eyes ------------------------------------------------------------------------------------------

@pytest.fixture
def four_eyes_unknown(finance):
    spec = make_demo_spec(name="payments.transfer", four_eyes=True)
    return make_unknown(finance, spec, PAYMENT_ARGS)


@pytest.fixture
def alice_and_bob(four_eyes_unknown):
    users = []
    for name in ("alice", "bob"):
        user = make_staff(username=name)
        allow_resolving(user=user, spec=four_eyes_unknown.tool_spec)
        users.append(user)
    return users


def test_it_needs_a_second_person_under_four_eyes(four_eyes_unknown, alice_and_bob):
    alice, bob = alice_and_bob
    inv = four_eyes_unknown
    resp = act(client_for(alice), inv, "mark-not-committed", reason="no debit", evidence="statement")
    assert any("a second person must confirm" in m for m in messages_of(resp))
    inv.refresh_from_db()
    assert inv.state == "OUTCOME_UNKNOWN"
    proposal = Event.objects.get(invocation=inv, kind="resolution_proposed")
    assert proposal.actor == "user:alice" and proposal.data["action"] == "mark_not_committed"
    row = resp.context["rows"][0]
    assert row.pending.seq == proposal.seq and row.is_proposer
    assert 'data-testid="proposer-note"' in resp.content.decode()

    resp = act(client_for(alice), inv, "confirm", proposal_seq=proposal.seq, reason="me again")
    assert any("a different person must confirm" in m for m in messages_of(resp))
    resp = act(client_for(alice), inv, "mark-committed", reason="changed my mind", evidence="e", external_resource_id="trf_1")
    assert any("alice already proposed" in m for m in messages_of(resp))
    with pytest.raises(SecondPersonRequired):
        resolution_confirm(invocation=inv, user=alice, proposal_seq=proposal.seq, reason="direct call")
    inv.refresh_from_db()
    assert inv.state == "OUTCOME_UNKNOWN" and not ToolMessage.objects.filter(invocation=inv).exists()

    resp = act(client_for(bob), inv, "confirm", proposal_seq=proposal.seq - 1, reason="stale")
    assert any("no longer pending" in m for m in messages_of(resp))
    resp = act(client_for(bob), inv, "confirm", proposal_seq=proposal.seq, reason="statement checked too")
    assert any("is FAILED_BEFORE_COMMIT" in m for m in messages_of(resp))
    inv.refresh_from_db()
    assert inv.state == "FAILED_BEFORE_COMMIT"
    confirmed = Event.objects.get(invocation=inv, kind="resolution_confirmed")
    assert confirmed.actor == "user:bob" and confirmed.data["proposed_by"] == "alice"
    assert Event.objects.get(invocation=inv, kind="resolved_not_committed").data["by"] == ["alice", "bob"]


def test_it_leaves_the_call_unknown_when_a_four_eyes_proposal_is_rejected(four_eyes_unknown, alice_and_bob):
    alice, bob = alice_and_bob
    inv = four_eyes_unknown
    act(client_for(alice), inv, "mark-committed", reason="r", evidence="e", external_resource_id="trf_1")
    seq = Event.objects.get(invocation=inv, kind="resolution_proposed").seq
    resp = act(client_for(bob), inv, "reject", proposal_seq=seq, reason="")
    assert any("a reason is required" in m for m in messages_of(resp))
    resp = act(client_for(bob), inv, "reject", proposal_seq=seq, reason="trf_1 belongs to another customer")
    assert any("Rejected the proposal of alice" in m for m in messages_of(resp))
    inv.refresh_from_db()
    assert inv.state == "OUTCOME_UNKNOWN" and resp.context["rows"][0].pending is None
    act(client_for(bob), inv, "mark-not-committed", reason="r2", evidence="e2")
    pending = client_for(alice).get(QUEUE).context["rows"][0].pending
    assert pending.proposed_by == "bob" and pending.action == "mark_not_committed"


# --- race safety ------------------------------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_lets_exactly_one_of_two_concurrent_resolvers_win():
    require_postgres()
    payments = make_demo_spec(name="payments.transfer")
    finance = make_finance_agent()
    users = []
    for name in ("ann", "ben"):
        user = make_staff(username=name)
        allow_resolving(user=user, spec=payments)
        users.append(user)
    for round_ in range(5):
        inv = make_unknown(finance, payments, {**PAYMENT_ARGS, "memo": f"race {round_}"}, approver=users[0])
        barrier = threading.Barrier(2)
        results: list = []

        def resolve(user, committed):
            try:
                barrier.wait(timeout=10)
                target = Invocation.objects.get(pk=inv.pk)
                if committed:
                    results.append(resolution_mark_committed(invocation=target, user=user, external_resource_id="trf_R",
                                                             evidence="e", reason="r"))
                else:
                    results.append(resolution_mark_not_committed(invocation=target, user=user, evidence="e", reason="r"))
            except AlreadyResolved as exc:
                results.append(exc)
            finally:
                connection.close()

        threads = [threading.Thread(target=resolve, args=(users[0], True)), threading.Thread(target=resolve, args=(users[1], False))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(results) == 2, results
        wins = [r for r in results if not isinstance(r, AlreadyResolved)]
        losses = [r for r in results if isinstance(r, AlreadyResolved)]
        assert len(wins) == 1 and len(losses) == 1, results
        inv.refresh_from_db()
        assert inv.state in ("OBSERVED", "FAILED_BEFORE_COMMIT")
        assert len(transition_events(inv)) == 1
        assert Event.objects.filter(invocation=inv, kind="resolution_applied").count() == 1
        assert ToolMessage.objects.filter(invocation=inv).count() == 3
        assert "already resolved" in losses[0].message


# --- the record of one call ------------------------------------------------------------------------

@pytest.fixture
def resolved(unknown, support):
    act(client_for(support), unknown, "mark-not-committed", reason="bank confirms no debit", evidence="statement line missing")
    unknown.refresh_from_db()
    # The agent's next model call carries the tool message back to the model.
    model_call_create(run=unknown.run, tool_refs=[unknown.tool_ref], fmt="anthropic", context=[str(unknown.pk)])
    model_call_create(run=unknown.run, tool_refs=[unknown.tool_ref], fmt="openai", context=[])
    return unknown


def test_it_answers_the_eight_questions_on_the_record_page(resolved, support):
    inv = resolved
    resp = client_for(support).get(f"/console/calls/{inv.pk}/")
    assert resp.status_code == 200
    html = resp.content.decode()
    for n in range(1, 9):
        assert f'data-testid="record-q{n}"' in html, n
    r = resp.context["r"]
    # 1. the ToolSpec version and its definition exactly as rendered
    assert r.seen_tool.tool_ref == "payments.transfer@1" and "payments-transfer_v1" in html
    assert r.visible_refs == ["payments.transfer@1"]
    # 2. raw bytes, escaped and hex
    raw = bytes(inv.proposal.arguments_bytes)
    assert r.raw.raw == raw and raw[:16].hex(" ") in html
    assert "acme-supplier-42" in html and f">{len(raw)}</span> bytes" in html
    # 3. parser, validator, normalizers with versions and context
    assert "toolops.strict_json" in html and "jsonschema" in html and "validator_version" in html
    assert "currency_minor_units" in html and "Europe/Paris" in html and inv.digest in html
    # 4. authorization with the grant, and the confirmation of the digest
    assert r.grants and r.grants[0].capability.name == "payments.transfer"
    [confirmation] = r.confirmations
    assert confirmation.state == "approved" and confirmation.digest_matches
    assert f'data-testid="confirmation-digest">{inv.digest}<' in html
    # 5. the invocation and every attempt with timings
    [attempt] = r.attempts
    assert attempt.duration_ms == 5000 and "worker-1" in html and "timeout_unknown" in html
    # 6. commit status and who resolved it
    assert 'data-testid="commit-status">not_committed<' in html
    assert any(h["kind"] == "resolved_not_committed" for h in resp.context["history"])
    # 7. the exact tool-message bytes per format
    assert [m.format for m in r.messages] == ["anthropic", "mcp", "openai"]
    stored = bytes(ToolMessage.objects.get(invocation=inv, format="openai").message_bytes)
    openai = next(m for m in r.messages if m.format == "openai")
    assert openai.body.raw == stored and stored[:12].hex(" ") in html
    # 8. the later model call whose context carried it, and only that one
    [later] = r.later_model_calls
    assert later.format == "anthropic" and f'data-model-call-id="{later.pk}"' in html
    # links: run and trace
    assert str(inv.run_id) in html and inv.trace_id in html


def test_it_links_related_invocations_from_the_record(resolved, support, finance):
    twin = make_unknown(finance, resolved.tool_spec, {**PAYMENT_ARGS, "memo": "twin"})
    Invocation.objects.filter(pk=twin.pk).update(idempotency_key=resolved.idempotency_key, edited_from=resolved)
    resp = client_for(support).get(f"/console/calls/{resolved.pk}/")
    r = resp.context["r"]
    assert [i.pk for i in r.same_key] == [twin.pk] and [i.pk for i in r.edits] == [twin.pk]
    twin_record = client_for(support).get(f"/console/calls/{twin.pk}/").content.decode()
    assert f'href="/console/calls/{resolved.pk}/" data-testid="edited-from"' in twin_record


def test_it_reads_the_record_in_a_fixed_number_of_queries(resolved, support):
    client = client_for(support)
    client.get(f"/console/calls/{resolved.pk}/")
    with CaptureQueriesContext(connection) as before:
        client.get(f"/console/calls/{resolved.pk}/")
    for n in range(2, 6):
        Attempt.objects.create(invocation=resolved, number=n, span_id=new_span_id(), started_at=timezone.now(), ended_at=timezone.now())
    for _ in range(3):
        model_call_create(run=resolved.run, tool_refs=[resolved.tool_ref], fmt="openai", context=[str(resolved.pk)])
    with CaptureQueriesContext(connection) as after:
        resp = client.get(f"/console/calls/{resolved.pk}/")
    assert len(resp.context["r"].attempts) == 5 and len(resp.context["r"].later_model_calls) == 4
    assert len(after) == len(before) <= 25, [q["sql"] for q in after.captured_queries]


def test_it_shows_the_record_to_viewers_approvers_resolvers_and_superusers_only(unknown):
    path = f"/console/calls/{unknown.pk}/"
    assert client_for(make_staff(username="stranger")).get(path).status_code == 404  # no rights in its tenant
    viewer = make_staff(username="viewer")
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_invocation"))
    assert client_for(viewer).get(path).status_code == 200
    approver = make_staff(username="tool-approver")
    allow_approving(user=approver, spec=unknown.tool_spec)
    assert client_for(approver).get(path).status_code == 200
    resolver = make_staff(username="tool-resolver")
    allow_resolving(user=resolver, spec=unknown.tool_spec)
    resp = client_for(resolver).get(path)
    assert resp.status_code == 200 and resp.context["can_resolve"]
    assert f'href="/console/unknown-outcomes/#unknown-{unknown.pk}"' in resp.content.decode()
    assert client_for(make_staff(username="boss", superuser=True)).get(path).status_code == 200
    assert Client().get(path).status_code == 302
    assert client_for(resolver).get("/console/calls/00000000-0000-0000-0000-000000000000/").status_code == 404


def test_it_records_a_call_naming_no_visible_tool(finance, payments):
    from invocations_app.admission import proposal_admit
    from invocations_app.runs import run_create

    run = run_create(subject=finance, budgets={}, timezone_name="UTC", locale="en-US", metadata={}, trace=None)
    call = model_call_create(run=run, tool_refs=[payments.ref], fmt="openai", context=[])
    inv, _ = proposal_admit(model_call=call, subject=finance, proposal_id="call_bad", name="payments.transfer@9",
                            arguments_bytes=b'{"to_account": "x\xff"}')
    resp = client_for(make_staff(username="boss", superuser=True)).get(f"/console/calls/{inv.pk}/")
    html = resp.content.decode()
    assert resp.status_code == 200 and 'data-testid="tool-unresolved"' in html
    assert "payments.transfer@9" in html and "\\xff" in html and "ff 22 7d" in html
