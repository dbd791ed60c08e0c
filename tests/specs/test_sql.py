"""toolops.sql: lean inserts and reads must store and return exactly what the ORM would."""
from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils.translation import gettext_lazy
from django.utils import timezone

from specs_app.models import Grant, Subject, Tenant
from specs_app.selectors import grant_snapshots
from tests.builders import make_capability, make_grant, make_subject
from tests.conftest import require_postgres
from toolops.sql import (PipelineAbortedEcho, execute_counted_then, insert_rows, select_rows, select_with_parent,
                              update_by_pk_counted)

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_inserts_several_models_at_once_with_the_orm_values():
    tenant = Tenant.objects.create(slug=f"t-{uuid.uuid4().hex[:6]}", name="Batch")
    capability = make_capability(name="batch.read")
    subject = Subject(tenant=tenant, name="batch-agent")  # keys set client-side, so rows can refer to each other
    grant = Grant(tenant=tenant, subject=subject, capability=capability, scope_kind="exact", scope_values=["a", {"b": 1}],
                  limits={"calls_per_minute": 3}, reason="batch", expires_at=timezone.now() + timedelta(days=1))
    insert_rows([subject], [grant])

    stored = Grant.objects.get(pk=grant.pk)
    assert (stored.subject_id, stored.scope_values, stored.limits) == (subject.pk, ["a", {"b": 1}], {"calls_per_minute": 3})
    assert stored.created_at == grant.created_at  # auto_now_add stamped once, as save() does
    assert stored.expires_at == grant.expires_at
    assert not grant._state.adding  # the instances know they are saved


def test_a_failing_statement_writes_nothing():
    tenant = Tenant.objects.create(slug=f"t-{uuid.uuid4().hex[:6]}", name="Batch")
    fresh = Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name="fresh")
    duplicate = Tenant(slug=tenant.slug, name="duplicate slug")
    with pytest.raises(IntegrityError):
        insert_rows([fresh], [duplicate])
    assert not Tenant.objects.filter(slug=fresh.slug).exists()


def test_after_a_failure_the_connection_is_clean_and_usable():
    tenant = Tenant.objects.create(slug=f"t-{uuid.uuid4().hex[:6]}", name="Batch")
    with pytest.raises(IntegrityError):
        insert_rows([Tenant(slug=tenant.slug, name="duplicate slug")])
    if connection.vendor == "postgresql":  # the pipeline's BEGIN was ended, not left aborted
        import psycopg

        assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    again = Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name="after the failure")
    insert_rows([again])
    assert Tenant.objects.filter(slug=again.slug).exists()


def test_a_failed_pipeline_logs_no_echo_of_its_error(caplog):
    # The caller gets the error; psycopg's "pipeline aborted" on the way out is only its echo,
    # and a concurrent duplicate proposal (a unique violation in admission's pipeline) is a
    # normal path: no WARNING for it. psycopg logs the echo when it meets the error while the
    # block is still sending — as a duplicate that waited on the other's row lock does; the
    # pause makes that certain here, instead of depending on timing.
    import logging
    import time

    import psycopg

    require_postgres()  # only PostgreSQL sends statements in a pipeline

    def psycopg_warnings() -> list[str]:
        caplog.clear()
        connection.ensure_connection()
        with caplog.at_level("WARNING"), pytest.raises(psycopg.errors.DivisionByZero):
            with psycopg.Cursor(connection.connection) as cursor, connection.connection.pipeline():
                cursor.execute("SELECT 1 / 0")
                time.sleep(0.5)  # its error is back: the next statement meets it mid-pipeline
                cursor.execute("SELECT 1")
                cursor.execute("SELECT 2")
        return [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]

    assert psycopg_warnings() == []
    logger = logging.getLogger("psycopg")
    echo = next(f for f in logger.filters if isinstance(f, PipelineAbortedEcho))
    logger.removeFilter(echo)  # the control: without the filter, psycopg does log the echo
    try:
        assert any("pipeline aborted" in m for m in psycopg_warnings())
    finally:
        logger.addFilter(echo)


def test_the_echo_filter_passes_every_other_psycopg_warning():
    import logging

    import psycopg

    echo = PipelineAbortedEcho()

    def record(msg, *args):
        return logging.LogRecord("psycopg", logging.WARNING, __file__, 1, msg, args, None)

    assert not echo.filter(record("error ignored terminating %r: %s", "<Pipeline>", psycopg.errors.PipelineAborted("pipeline aborted")))
    assert echo.filter(record("error ignored terminating %r: %s", "<Pipeline>", psycopg.OperationalError("server closed")))
    assert echo.filter(record("error ignored in rollback on %s: %s", "<conn>", psycopg.errors.PipelineAborted("x")))
    assert echo.filter(record("connection lost"))


def test_a_statement_skipped_after_a_failure_runs_in_the_next_list():
    # A pipeline skips what follows a failure — a statement's first prepare included — so the
    # driver must not take that statement for prepared the next time it is sent.
    tenant = Tenant.objects.create(slug=f"t-{uuid.uuid4().hex[:6]}", name="Batch")
    skipped = [Subject(tenant=tenant, name=f"skipped-{i}") for i in range(7)]  # a shape sent nowhere else
    with pytest.raises(IntegrityError):
        insert_rows([Tenant(slug=tenant.slug, name="duplicate slug")], skipped)
    insert_rows([Subject(tenant=tenant, name=f"again-{i}") for i in range(7)])
    assert sorted(Subject.objects.filter(tenant=tenant).values_list("name", flat=True)) == [f"again-{i}" for i in range(7)]


def test_statements_are_logged_as_django_logs_queries():
    fresh = Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name="logged")
    with CaptureQueriesContext(connection) as queries:
        insert_rows([fresh])
    assert any('INSERT INTO "specs_app_tenant"' in q["sql"] for q in queries.captured_queries)


def test_values_that_are_not_plain_str_are_prepared_by_their_field():
    # A lazy translation in a CharField is a Promise, not a str: the field's prep makes it one.
    fresh = Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name=gettext_lazy("lazy name"))
    insert_rows([fresh])
    assert Tenant.objects.get(slug=fresh.slug).name == "lazy name"


def test_inside_a_transaction_it_joins_it():
    fresh = Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name="fresh")
    with pytest.raises(RuntimeError), transaction.atomic():
        insert_rows([fresh])
        raise RuntimeError("roll back")
    assert not Tenant.objects.filter(slug=fresh.slug).exists()


def test_select_rows_converts_like_the_orm():
    subject = make_subject()
    grant = make_grant(subject=subject, tenant=subject.tenant, scope_kind="exact", scope_values=["Paris"],
                       limits={"calls_per_run": 2})
    Grant.objects.filter(pk=grant.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    grant.refresh_from_db()
    columns = ("id", "subject", "scope_values", "limits", "expires_at", "created_at")
    rows = select_rows(Grant, columns, where="id = %s", params=[("id", grant.pk)])
    assert rows == [[getattr(grant, "subject_id" if c == "subject" else c) for c in columns]]


def test_grant_snapshots_read_live_grants_of_the_subject_and_the_tenant():
    subject = make_subject()
    other = make_subject(tenant=subject.tenant)
    mine = make_grant(subject=subject, tenant=subject.tenant)
    tenant_wide = make_grant(subject=None, tenant=subject.tenant)
    make_grant(subject=other, tenant=subject.tenant)  # someone else's
    revoked = make_grant(subject=subject, tenant=subject.tenant)
    Grant.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())

    snapshots = grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["weather.read"])
    assert {s.grant_id for s in snapshots} == {str(mine.pk), str(tenant_wide.pk)}
    assert {s.subject_id for s in snapshots} == {str(subject.pk), None}
    assert grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["no.such.capability"]) == []


def test_a_capability_recreated_under_its_name_is_found_here_at_once_and_elsewhere_within_the_cache_time(monkeypatch):
    """Correcting a capability's class means deleting it and creating it again: a new id under the
    same name. Grant lookups go by id, so a cached old id would find no grant for good."""
    from specs_app import selectors
    from specs_app.models import Capability

    subject = make_subject()
    old_capability = make_capability(name="ledger.post", operation_class="read")
    assert grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["ledger.post"]) == []  # caches its id

    old_capability.delete()  # in this process: the cache is told
    assert "ledger.post" not in selectors._CAPABILITIES
    fixed = make_grant(subject=subject, capability="ledger.post", operation_class="create")
    assert [s.grant_id for s in grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["ledger.post"])] == [
        str(fixed.pk)]

    # Another process deletes and re-creates it (raw SQL: no signal reaches this cache).
    table = connection.ops.quote_name(Capability._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {table} SET name = %s WHERE name = %s", ["ledger.post.retired", "ledger.post"])
    again = make_grant(subject=subject, capability="ledger.post", operation_class="create")
    selectors._CAPABILITIES["ledger.post"] = (fixed.capability_id, "create", time.monotonic() + 60)  # as it was cached
    assert [s.grant_id for s in grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["ledger.post"])] == [
        str(fixed.pk)]  # within the cache time: the old id still answers
    later = time.monotonic() + selectors.CAPABILITY_CACHE_SECONDS + 1
    monkeypatch.setattr(selectors.time, "monotonic", lambda: later)  # the entry has expired
    assert [s.grant_id for s in grant_snapshots(tenant=subject.tenant, subject=subject, capabilities=["ledger.post"])] == [
        str(again.pk)]


def test_select_with_parent_loads_both_rows_like_select_related():
    subject = make_subject()
    grant = make_grant(subject=subject, scope_kind="exact", scope_values=["a", {"b": 1}], limits={"calls_per_minute": 3},
                       expires_at=timezone.now() + timedelta(days=1))
    [lean] = select_with_parent(Grant, "subject", "a.id = %s AND b.tenant_id = %s",
                                [(Grant._meta.pk, grant.pk), (Subject._meta.get_field("tenant"), subject.tenant_id)])
    orm = Grant.objects.select_related("subject").get(pk=grant.pk)
    for field in Grant._meta.concrete_fields:
        assert getattr(lean, field.attname) == getattr(orm, field.attname), field.name
    for field in Subject._meta.concrete_fields:
        assert getattr(lean.subject, field.attname) == getattr(orm.subject, field.attname), field.name
    with CaptureQueriesContext(connection) as queries:
        assert lean.subject.pk == subject.pk  # the parent came with the row
    assert not queries.captured_queries and not lean._state.adding
    assert select_with_parent(Grant, "subject", "a.id = %s AND b.tenant_id = %s",
                              [(Grant._meta.pk, grant.pk), (Subject._meta.get_field("tenant"), subject.tenant_id + 1)]) == []


def test_many_rows_go_as_equal_inserts_whose_text_psycopg_caches():
    """More than 50 values (admission's six 10-column events) go as INSERTs of nearly equal
    size, each at most 50 values, so psycopg parses each text once instead of on every
    proposal; all rows land. Here 13 four-column rows: 52 values, two statements (7 + 6).
    PostgreSQL only: elsewhere the statements go one by one, and fewer are better."""
    require_postgres()
    per_row = len(Tenant._meta.concrete_fields)
    tenants = [Tenant(slug=f"t-{uuid.uuid4().hex[:6]}", name=f"chunk {i}") for i in range(50 // per_row + 1)]
    with CaptureQueriesContext(connection) as queries:
        insert_rows(tenants)
    assert set(Tenant.objects.filter(slug__in=[t.slug for t in tenants]).values_list("name", flat=True)) == {t.name for t in tenants}
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    statements = [s for sql in inserts for s in sql.split(";\n")]
    rows = [s.count("), (") + 1 for s in statements]
    assert sum(rows) == len(tenants) and len(rows) == 2 and all(n * per_row <= 50 for n in rows), (rows, per_row)
    assert len(set(rows)) <= 2 and max(rows) - min(rows) <= 1  # equal chunks: at most two statement texts


def test_a_counted_statement_runs_first_and_hands_on_its_count_with_the_other_statements_rows():
    tenant = Tenant.objects.create(slug=f"t-{uuid.uuid4().hex[:6]}", name="before")
    counts = []
    with CaptureQueriesContext(connection) as queries:
        renaming = update_by_pk_counted(tenant, {"name": "after"}, then=counts.append)
        rows = execute_counted_then(renaming, 'SELECT "name" FROM "specs_app_tenant" WHERE "id" = %s', [tenant.pk])
    assert [tuple(row) for row in rows] == [("after",)]  # the second statement saw the first's write
    assert counts == [1] and tenant.name == "after"  # the count, and the fields set on the instance
    if connection.vendor == "postgresql":
        assert len(queries.captured_queries) == 1  # one pipeline: one round trip


def test_a_counted_statement_that_changes_nothing_hands_on_zero_and_leaves_the_instance():
    from specs_app.models import Capability

    capability = make_capability(name=f"count.{uuid.uuid4().hex[:6]}")
    ghost = Capability(pk=capability.pk + 10_000, name="ghost")  # no such row
    counts = []
    closing = update_by_pk_counted(ghost, {"description": "never"}, then=counts.append)
    assert [tuple(row) for row in execute_counted_then(closing, "SELECT 1", [])] == [(1,)]
    assert counts == [0] and ghost.description != "never"
