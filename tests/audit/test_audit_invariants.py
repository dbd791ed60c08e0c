"""`audit_invariants` (docs/concepts/lifecycle.md): it finds every kind of stored violation, and nothing in clean data.

The base data is written through the real services (admission, authorization, confirmation,
execution with the in-process ``python`` executors of ``tests.builders.ServiceWorld``, reconciliation, cancel, approve
with edits), and must audit clean. Each violation is then *planted* with raw SQL — INSERTs into
the append-only event table (the triggers guard UPDATE/DELETE of events and forbidden state
edges, not INSERTs) and UPDATEs of unguarded columns — exactly the kind of write that bypasses
the services and that the audit exists to catch.
"""
from __future__ import annotations

import io
import json
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from audit import checks as audit_mod
from invocations_app import admission, cancellation
from audit.checks import KINDS, Violation, audit, parse_since
from invocations_app.confirmation_edits import confirmation_approve_with_edits, confirmation_preview_edit
from invocations_app.confirmations import confirmation_approve, confirmation_deny, confirmation_expire
from worker.recovery import reconcile
from invocations_app.models import Confirmation, Event, Invocation, ModelCallTool, Proposal
from specs_app.models import Grant
from specs_app.services import toolspec_publish
from tests.builders import ServiceWorld, fresh, make_subject, make_tenant, make_toolspec
from toolops.errors import ApplicationError

pytestmark = pytest.mark.django_db


def build_mixed_workload(world: ServiceWorld) -> dict[str, Invocation]:
    """Every path the services offer, ending in every state an invocation can rest in."""
    w, inv = world, {}
    inv["read_observed"] = w.execute(w.propose(w.weather.ref, '{"city": "Paris", "date": "tomorrow"}'))
    inv["read_authorized"] = w.propose(w.weather.ref, '{"date": "tomorrow", "city": "Lyon"}')
    inv["parse_rejected"] = w.propose(w.weather.ref, b'{"city": "Paris", "city": "Rome", "date": "today"}')
    inv["validation_rejected"] = w.propose(w.weather.ref, '{"city": "Paris", "date": "today", "as_admin": true}')
    inv["normalization_rejected"] = w.propose(w.weather.ref, '{"city": "Paris", "date": "some day soon"}')
    inv["unknown_tool"] = w.propose("weather.get_forcast", '{"city": "Paris", "date": "today"}')
    inv["authorization_rejected"] = w.propose(w.weather.ref, '{"city": "Paris", "date": "today"}', stranger=True)
    inv["read_confirmed_observed"] = w.execute(w.approve(w.propose(w.alerts.ref, '{"city": "Oslo", "date": "in 2 days"}')))
    inv["write_pending"] = w.write("Bring passport")
    inv["write_prepared"] = w.approve(w.write("Pack the bags"))
    inv["write_observed"] = w.execute(w.approve(w.write("Book the taxi", key="trip-42:taxi")))
    # The same key and arguments again: the original's result, no second invocation.
    replay = w.write("Book the taxi", key="trip-42:taxi", expect_new=False)
    assert replay.pk == inv["write_observed"].pk
    with pytest.raises(ApplicationError):  # the key reused with other arguments
        w.write("Book two taxis", key="trip-42:taxi")
    denied = w.write("Cancel the meeting")
    confirmation_deny(confirmation=w.pending(denied), user=w.user, reason="not now")
    inv["write_denied"] = fresh(denied)
    expired = w.write("Call the embassy")
    pending = w.pending(expired)
    assert confirmation_expire(confirmation=pending, now=pending.expires_at + timedelta(seconds=1))
    inv["write_expired"] = fresh(expired)
    inv["write_cancelled"] = cancellation.invocation_cancel(invocation=w.approve(w.write("Water the plants")), actor="test")
    inv["write_failed"] = w.execute(w.approve(w.write("reject this one")))
    inv["write_unknown"] = w.execute(w.approve(w.write("lost in transit")))
    reconciled = w.execute(w.approve(w.write("lost then found")))
    assert reconcile(invocation=reconciled) == "committed"
    inv["write_reconciled"] = fresh(reconciled)
    inv["write_retrying"] = fresh(w.execute(w.approve(w.write("flaky network"))))
    # Cancelled while waiting for its next attempt: nothing in flight, so it ends at once.
    waiting = w.execute(w.approve(w.write("flaky again")))
    inv["write_cancelled_between_attempts"] = cancellation.invocation_cancel(invocation=waiting, actor="test",
                                                                            reason="changed my mind")
    original = w.write("Dinner at 8")
    confirmation = w.pending(original)
    edited = {"calendar_id": "primary", "title": "Dinner at 9"}
    new_digest = confirmation_preview_edit(confirmation=confirmation, edited_arguments=edited).digest
    replacement = confirmation_approve_with_edits(
        confirmation=confirmation, user=w.user, digest_seen=original.digest, edited_arguments=edited,
        new_digest_seen=new_digest, reason="nine is better",
    )
    checker, _ = type(w.user).objects.get_or_create(username=f"{w.user.username}-checker")  # a new title: another person checks it
    confirmation_approve(confirmation=w.pending(replacement), user=checker, digest_seen=new_digest, reason="checked")
    inv["write_edited_original"] = fresh(original)
    inv["write_edited_replacement"] = w.execute(replacement)
    return inv


EXPECTED_STATES = {
    "read_observed": "OBSERVED", "read_authorized": "AUTHORIZED", "parse_rejected": "PARSE_REJECTED",
    "validation_rejected": "VALIDATION_REJECTED", "normalization_rejected": "VALIDATION_REJECTED",
    "unknown_tool": "VALIDATION_REJECTED", "authorization_rejected": "AUTHORIZATION_REJECTED",
    "read_confirmed_observed": "OBSERVED", "write_pending": "AUTHORIZED", "write_prepared": "PREPARED",
    "write_observed": "OBSERVED", "write_denied": "AUTHORIZATION_REJECTED", "write_expired": "CANCELLED_BEFORE_COMMIT",
    "write_cancelled": "CANCELLED_BEFORE_COMMIT", "write_failed": "FAILED_BEFORE_COMMIT",
    "write_unknown": "OUTCOME_UNKNOWN", "write_reconciled": "OBSERVED", "write_retrying": "EXECUTING",
    "write_cancelled_between_attempts": "FAILED_BEFORE_COMMIT",
    "write_edited_original": "CANCELLED_BEFORE_COMMIT", "write_edited_replacement": "OBSERVED",
}


@pytest.fixture
def approver(django_user_model):
    return django_user_model.objects.create_user("auditor-approver", password="x")


@pytest.fixture
def world(approver):
    return ServiceWorld(user=approver)


@pytest.fixture
def inv(world) -> dict[str, Invocation]:
    """The mixed workload; it must audit clean before anything is planted."""
    built = build_mixed_workload(world)
    assert {name: i.state for name, i in built.items()} == EXPECTED_STATES
    assert list(audit()) == []
    return built


# --- raw SQL (no service, no ORM save) ------------------------------------------------------------


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _columns(model, values: dict) -> tuple[list[str], list]:
    columns, params = [], []
    for name, value in values.items():
        field = model._meta.get_field(name)
        columns.append(_q(field.column))
        params.append(field.get_db_prep_save(value, connection))  # the backend's encoding (uuid, json, bytes)
    return columns, params


def sql_update(model, pk, **values) -> None:
    columns, params = _columns(model, values)
    pk_field = model._meta.pk
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_q(model._meta.db_table)} SET {', '.join(f'{c} = %s' for c in columns)} "
            f"WHERE {_q(pk_field.column)} = %s",
            [*params, pk_field.get_db_prep_value(pk, connection)],
        )
        assert cursor.rowcount == 1


def sql_insert_event(invocation, *, seq: int, src: str, dst: str, kind: str = "planted", bump: bool = True) -> None:
    """INSERT one event row; ``bump`` also sets ``invocation.event_seq`` to it (an unguarded UPDATE)."""
    columns, params = _columns(Event, {
        "invocation": invocation.pk, "seq": seq, "at": timezone.now(), "from_state": src, "to_state": dst,
        "kind": kind, "data": {"planted": True}, "actor": "raw-sql", "trace_id": "0" * 32, "span_id": "0" * 16,
    })
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_q(Event._meta.db_table)} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})",
            params,
        )
    if bump:
        sql_update(Invocation, invocation.pk, event_seq=seq)


def last_seq(invocation) -> int:
    return Invocation.objects.values_list("event_seq", flat=True).get(pk=invocation.pk)


def found(**kwargs) -> dict[str, set[str]]:
    """invocation id → the kinds reported for it."""
    result: dict[str, set[str]] = {}
    for v in audit(**kwargs):
        assert isinstance(v, Violation) and v.kind in KINDS and v.detail
        result.setdefault(v.invocation_id, set()).add(v.kind)
    return result


def details(invocation, kind: str) -> str:
    return " | ".join(v.detail for v in audit(kinds=[kind]) if v.invocation_id == str(invocation.pk))


# --- one test per kind ----------------------------------------------------------------------------


def test_it_finds_an_edge_not_in_the_table(inv):
    target = inv["read_authorized"]  # AUTHORIZED; the trigger would refuse AUTHORIZED → OBSERVED on the row
    sql_insert_event(target, seq=last_seq(target) + 1, src="AUTHORIZED", dst="OBSERVED", kind="observed")
    skipped = inv["write_pending"]  # a log that jumps: the event claims to start from PREPARED
    sql_insert_event(skipped, seq=last_seq(skipped) + 1, src="PREPARED", dst="PREPARED", kind="attempt_started")

    assert found() == {str(target.pk): {"edge_not_in_table"}, str(skipped.pk): {"edge_not_in_table"}}
    text = details(target, "edge_not_in_table")
    assert "AUTHORIZED → OBSERVED is not an edge" in text
    assert "the invocation is AUTHORIZED but its event log ends in OBSERVED" in text
    assert "starts from PREPARED but the log was in AUTHORIZED" in details(skipped, "edge_not_in_table")
    assert [v.invocation_id for v in audit_mod.edges_not_in_table()] == sorted(
        [str(target.pk), str(skipped.pk)], key=lambda pk: Invocation.objects.get(pk=pk).created_at
    )


def test_it_finds_an_execution_without_an_approved_confirmation(inv):
    target = inv["write_pending"]  # decision "confirm", the confirmation still pending
    n = last_seq(target)
    # Walk it to EXECUTING by allowed edges only: the trigger and the edge check stay quiet.
    sql_update(Invocation, target.pk, state="PREPARED")
    sql_insert_event(target, seq=n + 1, src="AUTHORIZED", dst="PREPARED", kind="prepared")
    sql_update(Invocation, target.pk, state="EXECUTING")
    sql_insert_event(target, seq=n + 2, src="PREPARED", dst="EXECUTING", kind="execution_started")

    assert found() == {str(target.pk): {"executed_without_authorization"}}
    assert "no approved confirmation has digest" in details(target, "executed_without_authorization")


def test_it_finds_an_execution_whose_recorded_decision_is_not_allow_or_confirm(inv):
    target = inv["read_observed"]
    sql_update(Invocation, target.pk, authorization={"decision": "deny", "reasons": []})
    # The overwritten record also lost its grants and decision time: invariant 4 fails too.
    assert found() == {str(target.pk): {"executed_without_authorization", "executed_beyond_grants"}}
    assert "decision is 'deny'" in details(target, "executed_without_authorization")


def test_it_finds_a_confirmation_whose_digest_is_not_the_invocations(inv):
    target = inv["write_prepared"]  # approved, not executed yet
    confirmation = Confirmation.objects.get(invocation=target, state="approved")
    sql_update(Confirmation, confirmation.pk, digest="0" * 64)

    assert found() == {str(target.pk): {"confirmation_digest_mismatch"}}
    assert f"approved confirmation {confirmation.pk} has digest {'0' * 64}" in details(target, "confirmation_digest_mismatch")
    assert [v.invocation_id for v in audit_mod.confirmation_digest_mismatches()] == [str(target.pk)]


def test_it_finds_a_committed_call_recorded_as_not_committed(inv):
    target = inv["write_observed"]  # EXECUTING → COMMITTED → OBSERVED
    sql_update(Invocation, target.pk, commit_status="not_committed")
    assert found() == {str(target.pk): {"committed_then_not_happened"}}
    assert "commit_status is not_committed" in details(target, "committed_then_not_happened")


def test_it_finds_a_committed_call_cancelled_afterwards(inv):
    target = inv["write_unknown"]  # OUTCOME_UNKNOWN → COMMITTED is allowed (reconciled) ...
    n = last_seq(target)
    sql_update(Invocation, target.pk, state="COMMITTED", commit_status="committed")
    sql_insert_event(target, seq=n + 1, src="OUTCOME_UNKNOWN", dst="COMMITTED", kind="committed")
    # ... but a later "cancel" may not turn it into "did not happen" (the row trigger refuses it,
    # so only the log says so).
    sql_insert_event(target, seq=n + 2, src="COMMITTED", dst="CANCELLED_BEFORE_COMMIT", kind="cancelled")

    assert found() == {str(target.pk): {"committed_then_not_happened", "edge_not_in_table"}}
    assert f"event #{n + 2} (cancelled) moves to CANCELLED_BEFORE_COMMIT after COMMITTED (event #{n + 1})" in details(
        target, "committed_then_not_happened"
    )


@pytest.mark.parametrize("tamper", ["digest", "clock", "proposal_bytes", "normalized_arguments"])
def test_it_finds_a_digest_that_does_not_reproduce(inv, tamper):
    target = fresh(inv["read_authorized"])  # {"date": "tomorrow", "city": "Lyon"}: depends on the recorded clock
    if tamper == "digest":
        sql_update(Invocation, target.pk, digest="f" * 64)
    elif tamper == "clock":
        context = dict(target.normalization_context)
        clock = timezone.datetime.fromisoformat(context["clock"])
        context["clock"] = (clock + timedelta(days=3)).isoformat()
        sql_update(Invocation, target.pk, normalization_context=context)
    elif tamper == "proposal_bytes":
        sql_update(Proposal, target.proposal_id, arguments_bytes=b'{"date": "tomorrow", "city": "Nice"}')
    else:
        sql_update(Invocation, target.pk, normalized_arguments={**target.normalized_arguments, "city": "Nice"})

    assert found() == {str(target.pk): {"digest_not_reproducible"}}
    text = details(target, "digest_not_reproducible")
    if tamper == "normalized_arguments":
        assert "the stored normalized_arguments hash to" in text
    else:
        assert "re-admission under the stored context gives digest" in text


def test_it_finds_a_context_that_cannot_be_rebuilt_and_skips_other_normalizer_versions(inv):
    broken, older = inv["read_authorized"], inv["read_observed"]
    context = dict(fresh(broken).normalization_context)
    del context["clock"]
    sql_update(Invocation, broken.pk, normalization_context=context)
    sql_update(Invocation, older.pk, normalization_context={**fresh(older).normalization_context, "normalizers_version": "0"})

    stats = Counter()
    assert {v.invocation_id: v.kind for v in audit(stats=stats)} == {str(broken.pk): "digest_not_reproducible"}
    assert "cannot be rebuilt" in details(broken, "digest_not_reproducible")
    assert stats["digests_unverifiable"] == 1  # recorded by other code: counted, not a violation


def test_it_finds_events_after_a_terminal_state(inv):
    target = inv["parse_rejected"]  # PROPOSED → PARSE_REJECTED
    sql_insert_event(target, seq=last_seq(target) + 1, src="PARSE_REJECTED", dst="PARSE_REJECTED", kind="late_output")

    assert found() == {str(target.pk): {"events_after_terminal"}}
    assert "1 event(s) after PARSE_REJECTED (event #2)" in details(target, "events_after_terminal")


def test_it_finds_a_gap_in_the_event_seqs(inv):
    gap, counter = inv["read_authorized"], inv["write_pending"]
    n = last_seq(gap)
    sql_insert_event(gap, seq=n + 2, src="AUTHORIZED", dst="AUTHORIZED", kind="note")  # #n+1 never written
    sql_update(Invocation, counter.pk, event_seq=last_seq(counter) + 1)  # a bump without its event

    assert found() == {str(gap.pk): {"seq_gap"}, str(counter.pk): {"seq_gap"}}
    assert f"missing [{n + 1}]" in details(gap, "seq_gap")
    assert "invocation.event_seq is" in details(counter, "seq_gap")


def _own_call(world, refs):
    """A model call of its own, so a planted change to its visible set touches one invocation."""
    return world._call(world.subject, refs)


def test_it_finds_an_invocation_of_a_tool_its_model_call_did_not_show(inv, world):
    call = _own_call(world, [world.weather.ref])
    target, _ = admission.proposal_admit(
        model_call=call, subject=world.subject, proposal_id="own_1", name=world.weather.ref,
        arguments_bytes=b'{"city": "Rome", "date": "today"}',
    )
    assert list(audit()) == []
    with connection.cursor() as cursor:  # the visible set loses the tool (no service would do this)
        cursor.execute(f"DELETE FROM {_q(ModelCallTool._meta.db_table)} WHERE model_call_id = %s",
                       [ModelCallTool._meta.get_field("model_call").get_db_prep_value(call.pk, connection)])
    assert found() == {str(target.pk): {"tool_not_visible"}}
    assert "was not in its model call's visible set (nothing)" in details(target, "tool_not_visible")
    assert [v.invocation_id for v in audit_mod.tools_not_visible()] == [str(target.pk)]


def test_it_finds_a_call_of_a_tool_owned_by_another_tenant(inv, world):
    owned = make_toolspec(name="weather.tenant_owned", publish=False, tenant=world.subject.tenant)
    owned = toolspec_publish(spec=owned)
    call = _own_call(world, [owned.ref])
    target, _ = admission.proposal_admit(
        model_call=call, subject=world.subject, proposal_id="owned_1", name=owned.ref,
        arguments_bytes=b'{"city": "Rome", "date": "today"}',
    )
    assert target.tool_spec_id == owned.pk
    assert list(audit_mod.tools_of_another_tenant()) == []  # its own tenant's tool: fine
    sql_update(Invocation, target.pk, tenant=make_tenant().pk)  # the call moved to another tenant
    assert [v.invocation_id for v in audit_mod.tools_of_another_tenant()] == [str(target.pk)]
    assert f"is owned by tenant #{world.subject.tenant_id}" in details(target, "tool_of_another_tenant")


@pytest.mark.parametrize("tamper", ["proposal_name", "tool_version"])
def test_it_finds_a_tool_matched_other_than_exactly(inv, tamper):
    target = fresh(inv["read_authorized"])
    if tamper == "proposal_name":  # "latest" matching: a name without its version
        sql_update(Proposal, target.proposal_id, name="weather.get_forecast")
        expected = "the proposal named 'weather.get_forecast', not 'weather-get_forecast_v1' or 'weather.get_forecast@1'"
    else:
        sql_update(Invocation, target.pk, tool_version=2)
        expected = "the invocation records weather.get_forecast@2, the model call showed weather.get_forecast@1"
    assert found() == {str(target.pk): {"tool_not_visible"}}
    assert expected in details(target, "tool_not_visible")


def _executed_with(grant_id: str) -> set[str]:
    return {
        str(i.pk) for i in Invocation.objects.filter(events__to_state="EXECUTING").distinct()
        if grant_id in (i.authorization.get("internal") or {}).get("used_grant_ids", [])
    }


def _weather_grant(target) -> tuple[Grant, timezone.datetime]:
    record = fresh(target).authorization
    grant = Grant.objects.get(pk=record["internal"]["used_grant_ids"][0])
    return grant, timezone.datetime.fromisoformat(record["decided_at"])


@pytest.mark.parametrize("tamper", ["revoked_before", "created_after", "scope_changed"])
def test_it_finds_an_execution_not_covered_by_a_grant_valid_at_decision_time(inv, tamper):
    target = inv["read_observed"]
    grant, decided_at = _weather_grant(target)
    if tamper == "revoked_before":
        sql_update(Grant, grant.pk, revoked_at=decided_at - timedelta(seconds=1))
        expected = "was revoked at"
    elif tamper == "created_after":
        sql_update(Grant, grant.pk, created_at=decided_at + timedelta(hours=1))
        expected = "was created after the decision"
    else:
        sql_update(Grant, grant.pk, scope_kind="exact", scope_values=["Berlin"])
        expected = "differs from the recorded snapshot in scope_kind, scope_values"
    executed = _executed_with(str(grant.pk))
    assert str(target.pk) in executed
    assert found() == {pk: {"executed_beyond_grants"} for pk in executed}
    assert expected in details(target, "executed_beyond_grants")


@pytest.mark.parametrize("tamper", ["no_grant_recorded", "unknown_grant", "expired_snapshot", "scope_snapshot"])
def test_it_finds_an_execution_whose_recorded_grant_does_not_cover_it(inv, tamper):
    target = fresh(inv["read_observed"])
    record = json.loads(json.dumps(target.authorization))
    snapshot = record["capabilities"][0]
    if tamper == "no_grant_recorded":
        record["capabilities"] = []
        expected = "no grant of weather.read is recorded for the call"
    elif tamper == "unknown_grant":
        snapshot["grant_id"] = str(uuid.uuid4())
        expected = f"grant {snapshot['grant_id']} does not exist"
    elif tamper == "expired_snapshot":
        snapshot["expires_at"] = (timezone.datetime.fromisoformat(record["decided_at"]) - timedelta(minutes=1)).isoformat()
        expected = "the grant has expired (grant_expired)"
    else:  # the grant row is untouched; the snapshot claims a scope that does not cover Paris
        snapshot["scope_kind"], snapshot["scope_values"] = "exact", ["Berlin"]
        expected = "the resource is outside the granted scope (scope_mismatch)"
    sql_update(Invocation, target.pk, authorization=record)
    assert found() == {str(target.pk): {"executed_beyond_grants"}}
    assert expected in details(target, "executed_beyond_grants")
    assert [v.invocation_id for v in audit_mod.executions_beyond_grants()] == [str(target.pk)]


def test_it_accepts_a_grant_revoked_after_the_decision(inv):
    grant, decided_at = _weather_grant(inv["read_observed"])
    sql_update(Grant, grant.pk, revoked_at=timezone.now() + timedelta(seconds=1))
    assert list(audit()) == []


# --- --since, paging, the command -------------------------------------------------------------------


def plant_gap(invocation) -> None:
    sql_insert_event(invocation, seq=last_seq(invocation) + 2, src=invocation.state, dst=invocation.state, kind="note")


def test_since_excludes_invocations_created_before_it(inv):
    old, new = inv["read_authorized"], inv["write_pending"]
    plant_gap(old)
    plant_gap(new)
    sql_update(Invocation, old.pk, created_at=timezone.now() - timedelta(days=3))

    assert set(found(since=timezone.now() - timedelta(days=1))) == {str(new.pk)}
    assert set(found(since=parse_since("4d"))) == {str(old.pk), str(new.pk)}
    assert set(found()) == {str(old.pk), str(new.pk)}
    stats = Counter()
    list(audit(since=timezone.now() - timedelta(days=1), stats=stats))
    assert stats["invocations"] == Invocation.objects.count() - 1

    with pytest.raises(CommandError):
        call_command("audit_invariants", "--since", "24h", stdout=io.StringIO(), stderr=io.StringIO())
    sql_update(Invocation, new.pk, created_at=timezone.now() - timedelta(days=2))
    out = io.StringIO()
    call_command("audit_invariants", "--since", "24h", stdout=out, stderr=io.StringIO())
    assert "no violations" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("audit_invariants", "--since", (timezone.now() - timedelta(days=5)).date().isoformat(),
                     stdout=io.StringIO(), stderr=io.StringIO())


def test_pages_of_any_size_see_every_invocation_once_even_with_equal_timestamps(inv):
    planted = [inv["read_authorized"], inv["write_pending"], inv["write_prepared"], inv["parse_rejected"]]
    for invocation in planted:
        plant_gap(invocation)
    same = timezone.now() - timedelta(hours=1)
    for invocation in Invocation.objects.all()[:7]:  # ties on created_at: the keyset falls back to the id
        sql_update(Invocation, invocation.pk, created_at=same)
    expected = sorted(str(i.pk) for i in planted)
    total = Invocation.objects.count()
    for size in (1, 2, 3, 7, 1000):
        stats, pages = Counter(), []
        ids = [v.invocation_id for v in audit(kinds=["seq_gap"], chunk_size=size, stats=stats, progress=pages.append)]
        assert sorted(ids) == expected and len(ids) == len(set(ids))
        assert stats["invocations"] == total
        assert pages == [min(total, size * (k + 1)) for k in range(len(pages))] and pages[-1] == total


def test_the_command_exits_0_when_clean_and_1_with_a_violation(inv, monkeypatch):
    out = io.StringIO()
    call_command("audit_invariants", stdout=out, stderr=io.StringIO())
    assert "no violations" in out.getvalue()

    target = inv["parse_rejected"]
    sql_insert_event(target, seq=last_seq(target) + 1, src="PARSE_REJECTED", dst="PARSE_REJECTED", kind="late_output")
    out = io.StringIO()
    with pytest.raises(CommandError) as err:
        call_command("audit_invariants", stdout=out, stderr=io.StringIO())
    assert err.value.returncode == 1
    assert f"events_after_terminal\t{target.pk}\t" in out.getvalue()
    assert "  events_after_terminal: 1" in out.getvalue() and "  seq_gap: 0" in out.getvalue()

    # What the shell sees (manage.py → run_from_argv → sys.exit(returncode)); keep the test's connection open.
    from django.core.management import base

    from audit.management.commands.audit_invariants import Command

    monkeypatch.setattr(base.connections, "close_all", lambda: None)
    command = Command(stdout=io.StringIO(), stderr=io.StringIO())
    with pytest.raises(SystemExit) as exit_:
        command.run_from_argv(["manage.py", "audit_invariants", "--skip-checks"])
    assert exit_.value.code == 1
    clean = Command(stdout=io.StringIO(), stderr=io.StringIO())
    clean.run_from_argv(["manage.py", "audit_invariants", "--skip-checks", "--kind", "seq_gap"])  # returns: exit 0


def test_the_command_reports_progress_on_stderr(inv):
    err, out = io.StringIO(), io.StringIO()
    call_command("audit_invariants", "--progress-every", "5", "--chunk-size", "5", stdout=out, stderr=err)
    total = Invocation.objects.count()
    lines = err.getvalue().splitlines()
    assert "checked 5 invocations… (0 violation(s) so far)" in lines
    assert sum(line.startswith("checked ") and "…" in line for line in lines) == total // 5
    assert any(line.startswith(f"checked {total} invocations (") for line in lines)
    assert "checked" not in out.getvalue()  # stdout carries only the report


def test_the_command_prints_json_and_limits_the_listing(inv):
    planted = [inv["read_authorized"], inv["write_pending"], inv["write_prepared"]]
    for invocation in planted:
        plant_gap(invocation)
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit_invariants", "--json", "--limit-report", "2", stdout=out, stderr=io.StringIO())
    report = json.loads(out.getvalue())
    assert report["ok"] is False and report["total"] == 3
    assert report["summary"] == {**{k: 0 for k in KINDS}, "seq_gap": 3}
    assert len(report["violations"]) == 2 and report["truncated"] == {"seq_gap": 1}
    assert {v["invocation_id"] for v in report["violations"]} <= {str(i.pk) for i in planted}
    assert report["checked"]["invocations"] == Invocation.objects.count()

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("audit_invariants", "--limit-report", "1", stdout=out, stderr=io.StringIO())
    assert out.getvalue().count("seq_gap\t") == 1 and "seq_gap: 3 (2 not listed" in out.getvalue()


def test_the_command_refuses_a_since_it_cannot_read(db):
    with pytest.raises(CommandError) as err:
        call_command("audit_invariants", "--since", "last tuesday", stdout=io.StringIO(), stderr=io.StringIO())
    assert err.value.returncode == 2


@pytest.mark.parametrize("text,expected", [
    ("24h", timedelta(hours=24)), ("7d", timedelta(days=7)), ("90m", timedelta(minutes=90)),
    ("2w", timedelta(weeks=2)), ("1d12h", timedelta(days=1, hours=12)), ("30s", timedelta(seconds=30)),
])
def test_parse_since_reads_durations(text, expected):
    now = timezone.now()
    assert parse_since(text, now=now) == now - expected


def test_parse_since_reads_iso_dates_and_datetimes():
    assert parse_since("2026-07-19").isoformat() == "2026-07-19T00:00:00+00:00"
    assert parse_since("2026-07-19T14:00:00+08:00").isoformat() == "2026-07-19T14:00:00+08:00"
    assert parse_since("2026-07-19 06:00").isoformat() == "2026-07-19T06:00:00+00:00"
    for bad in ("", "yesterday", "24x", "2026-13-01"):
        with pytest.raises(ValueError):
            parse_since(bad)


def test_a_violation_names_its_invocation_by_id(inv):
    plant_gap(inv["write_prepared"])
    (violation,) = audit()
    assert Invocation.objects.filter(pk=uuid.UUID(violation.invocation_id)).exists()
    assert violation.as_dict() == {"kind": "seq_gap", "invocation_id": str(inv["write_prepared"].pk), "detail": violation.detail}
