"""Workers keep their database connection between tasks (docs/explanation/benchmarks.md: ~220 vs ~715 tasks/s).

Celery's Django fixup closes every connection around every task unless ``CELERY_DB_REUSE_MAX``
is set; ``toolops/celery.py`` recycles a connection the way Django does per request instead.
These tests call the exact hooks Celery calls before and after a task, with the database
settings a worker process runs with (``worker_init`` drops the web processes' pool).
"""
from __future__ import annotations

import time
from unittest import mock

import psycopg
import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.conf import settings
from django.db import DatabaseError, connection

from tests.conftest import require_postgres
from toolops.celery import _recycle_db_connections, _worker_keeps_its_connection, app

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def worker_settings():
    """This process runs as a worker does: what ``worker_init`` sets, undone afterwards."""
    db = settings.DATABASES["default"]
    saved_options, saved_age = dict(db.get("OPTIONS", {})), db["CONN_MAX_AGE"]
    connection.close()
    _worker_keeps_its_connection()
    yield
    connection.close()
    db["OPTIONS"], db["CONN_MAX_AGE"] = saved_options, saved_age


def test_a_worker_process_has_no_pool_and_a_persistent_connection():
    assert "pool" not in settings.DATABASES["default"].get("OPTIONS", {})
    assert getattr(connection, "pool", None) is None  # SQLite has no pool at all
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == settings.UNPOOLED_CONN_MAX_AGE > 0


def _terminate_backend(pid: int) -> None:
    """What a database restart does to a kept connection, from a second connection."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_worker_survives_its_connection_being_killed_between_tasks():
    require_postgres()
    _recycle_db_connections(task=None)  # prerun of task 1
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        first_pid = cur.fetchone()[0]
    _recycle_db_connections(task=None)  # postrun of task 1: kept
    _terminate_backend(first_pid)
    _recycle_db_connections(task=None)  # prerun of task 2: the health check runs on first use
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] != first_pid


def test_a_worker_survives_its_connection_dying_inside_a_task():
    """The task that meets the dead connection fails (its retry is Celery's business); the
    postrun hook closes the unusable connection and the next task gets a fresh one."""
    require_postgres()
    _recycle_db_connections(task=None)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        first_pid = cur.fetchone()[0]
    connection.health_check_done = True  # mid-task: no second health check before this query
    _terminate_backend(first_pid)
    with pytest.raises(DatabaseError):
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    _recycle_db_connections(task=None)  # postrun
    _recycle_db_connections(task=None)  # prerun of the next task
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        assert cur.fetchone()[0] != first_pid


@pytest.fixture(autouse=True)
def _restore_close_at(worker_settings):
    saved = connection.close_at
    yield
    connection.close_at = saved


def test_celerys_django_fixup_does_not_close_the_connection_around_tasks():
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    with mock.patch.object(connection, "close") as close:
        for _ in range(10):  # prerun + postrun of five tasks
            fixup.close_database()
    close.assert_not_called()


def test_a_connection_older_than_conn_max_age_is_recycled_between_tasks():
    connection.ensure_connection()
    with mock.patch.object(connection, "close") as close:
        _recycle_db_connections(task=None)
        close.assert_not_called()  # fresh and healthy: kept
        connection.close_at = time.monotonic() - 1  # past CONN_MAX_AGE
        _recycle_db_connections(task=None)
        close.assert_called_once()


def test_an_eager_task_leaves_the_callers_connection_alone():
    eager = mock.Mock()
    eager.request.is_eager = True
    connection.ensure_connection()
    connection.close_at = time.monotonic() - 1
    with mock.patch.object(connection, "close") as close:
        _recycle_db_connections(task=eager)
    close.assert_not_called()
