"""The named statements of toolops/sql.py (the one home of hand-built SQL) against the ORM.

Each test runs on the database of this run, and ``test_they_hold_on_the_other_engine`` runs this
file again on the other one (SQLite when this run is on PostgreSQL, PostgreSQL when it is on
SQLite), so every statement is checked on both engines.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from invocations_app.models import Confirmation, Invocation, Proposal, Run, ToolMessage
from specs_app.models import Tenant, ToolSpec
from tests.builders import admit_proposal, make_calendar_spec, make_grant, make_subject
from tests.conftest import REPO_ROOT, require, using_postgres
from toolops.sql import (column_attnames, execute_one, field_max_length, has_field, increment_by_pk, model_field,
                         permission_codenames, select_locked_with_related, state_message_and_pending_expiry,
                         update_bumping_counter)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def waiting() -> Invocation:
    """A calendar call waiting for a person (a pending confirmation)."""
    subject = make_subject()
    make_grant(capability="calendar.write", operation_class="create", subject=subject)
    invocation = admit_proposal(subject=subject, spec=make_calendar_spec(), arguments={"calendar_id": "team", "title": "x"})
    assert invocation.confirmations.filter(state=Confirmation.Status.PENDING).exists()
    return invocation


def test_increment_by_pk_adds_to_the_column_of_one_row(waiting):
    run = waiting.run
    before = Run.objects.get(pk=run.pk).result_bytes_used
    execute_one(*increment_by_pk(Run, "result_bytes_used", run.pk, 1234), fetch=False)
    execute_one(*increment_by_pk(Run, "result_bytes_used", run.pk, 6), fetch=False)
    assert Run.objects.get(pk=run.pk).result_bytes_used == before + 1240


def test_update_bumping_counter_bumps_and_returns_only_from_the_expected_state(waiting):
    seq, state = waiting.event_seq, waiting.state
    with transaction.atomic():
        rows = execute_one(*update_bumping_counter(Invocation, waiting.pk, {"error_message": "noted"}, counter="event_seq",
                                                   by=2, expected_state=state))
    assert [tuple(r) for r in rows] == [(seq + 2, state)]
    stored = Invocation.objects.get(pk=waiting.pk)
    assert (stored.event_seq, stored.error_message) == (seq + 2, "noted")
    # Another writer moved it first: nothing changes, nothing comes back.
    assert execute_one(*update_bumping_counter(Invocation, waiting.pk, {}, counter="event_seq", by=1,
                                               expected_state="OBSERVED")) == []
    assert Invocation.objects.get(pk=waiting.pk).event_seq == seq + 2


def test_select_locked_with_related_loads_what_select_related_would(waiting):
    related = (("tool_spec", ToolSpec), ("run", Run), ("proposal", Proposal), ("tenant", Tenant))
    with transaction.atomic():
        lean = select_locked_with_related(Invocation, related, waiting.pk)
        with CaptureQueriesContext(connection) as reads:
            loaded = [getattr(lean, name) for name, _ in related]
        assert len(reads) == 0  # attached, as select_related attaches them
    orm = Invocation.objects.select_related("tool_spec", "run", "proposal", "tenant").get(pk=waiting.pk)
    for field in column_attnames(Invocation):
        assert getattr(lean, field) == getattr(orm, field), field
    for (name, model), obj in zip(related, loaded):
        for field in column_attnames(model):
            assert getattr(obj, field) == getattr(getattr(orm, name), field), (name, field)
    assert select_locked_with_related(Invocation, related, "00000000-0000-0000-0000-000000000000") is None


def test_state_message_and_pending_expiry_reads_the_three_in_one_statement(waiting):
    confirmation = waiting.confirmations.get(state=Confirmation.Status.PENDING)
    with CaptureQueriesContext(connection) as reads:
        row = state_message_and_pending_expiry(Invocation, ToolMessage, Confirmation, invocation_id=waiting.pk,
                                               subject_id=waiting.subject_id, message_format="mcp",
                                               pending=Confirmation.Status.PENDING)
    assert len(reads) <= 1  # PostgreSQL's prepared statements are logged by toolops.sql; SQLite's by Django
    message = ToolMessage.objects.filter(invocation=waiting, format="mcp").values_list("message_bytes", flat=True).first()
    assert row == (waiting.state, message, confirmation.expires_at)
    other = make_subject()
    assert state_message_and_pending_expiry(Invocation, ToolMessage, Confirmation, invocation_id=waiting.pk,
                                            subject_id=other.pk, message_format="mcp",
                                            pending=Confirmation.Status.PENDING) is None


def test_the_storage_facts_match_the_models():
    assert field_max_length(Proposal, "name") == Proposal._meta.get_field("name").max_length > 0
    assert model_field(Invocation, "pk") is Invocation._meta.pk
    assert model_field(Run, "subject") is Run._meta.get_field("subject")
    assert column_attnames(Tenant)[0] == "id" and "slug" in column_attnames(Tenant)
    assert has_field(Invocation, "tool_spec") and not has_field(Invocation, "no_such_field")
    assert "approve_calls" in permission_codenames(Tenant)


def test_they_hold_on_the_other_engine(tmp_path):
    """This file again, on the other engine, in a fresh interpreter (settings are read at start)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PYTEST_ADDOPTS")}
    if using_postgres():
        env["TOOLOPS_VAR_DIR"] = str(tmp_path)  # SQLite in a fresh var/
    else:
        url = os.environ.get("TOOLOPS_OTHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/toolops_sql_other")
        require(_reachable(url), f"the other engine: no PostgreSQL at {url}")
        env["DATABASE_URL"] = url
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__,
                           "-k", "not other_engine"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout


def _reachable(url: str) -> bool:
    try:
        import psycopg
        server = url.replace("postgres://", "postgresql://").rsplit("/", 1)[0] + "/postgres"  # the test database is made later
        with psycopg.connect(server, connect_timeout=3):
            return True
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False
