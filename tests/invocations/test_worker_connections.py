"""Workers keep their database connection between tasks (BASELINES.md: ~220 vs ~715 tasks/s).

Celery's Django fixup closes every connection around every task unless ``CELERY_DB_REUSE_MAX``
is set; ``toolops/celery.py`` recycles a connection the way Django does per request instead.
These tests call the exact hooks Celery calls before and after a task.
"""
from __future__ import annotations

import time
from unittest import mock

import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from toolops.celery import _recycle_db_connections, app

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _restore_close_at():
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
