"""Binary results past their retention: the beat's purge drops the bytes in batches, keeps the
record (media type, size, SHA-256), and the result URL answers 410 ``result_expired`` (issue 13).

Rows are planted directly (``PlantedWorld``); the purge and the endpoint are the real ones, on
PostgreSQL.
"""
from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from rest_framework.test import APIClient

from invocations_app.models import ResultBinary
from invocations_app.retention import binaries_purge_expired
from worker.tasks import purge_expired_binaries_task
from tests.builders import Agent, PlantedWorld, make_token
from toolops.runtime.states import State

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def _binary(world: PlantedWorld, *, expires_in: timedelta) -> ResultBinary:
    inv = world.invocation(State.OBSERVED)
    now = timezone.now()
    return ResultBinary.objects.create(invocation=inv, media_type="image/png", body=PNG, size_bytes=len(PNG),
                                       sha256=hashlib.sha256(PNG).hexdigest(), created_at=now, expires_at=now + expires_in)


@pytest.fixture
def world():
    return PlantedWorld()


@pytest.fixture
def agent(world):
    _, token = make_token(subject=world.subject)
    return Agent(APIClient(), token)


def test_the_purge_drops_only_expired_bytes_and_keeps_the_record(world):
    expired = [_binary(world, expires_in=timedelta(seconds=-1)) for _ in range(3)]
    live = _binary(world, expires_in=timedelta(hours=1))
    assert binaries_purge_expired(batch=2) == 3  # two batches: 2 + 1
    for row in expired:
        row.refresh_from_db()
        assert bytes(row.body) == b"" and row.purged_at is not None
        assert (row.media_type, row.size_bytes, row.sha256) == ("image/png", len(PNG), hashlib.sha256(PNG).hexdigest())
    live.refresh_from_db()
    assert bytes(live.body) == PNG and live.purged_at is None
    assert binaries_purge_expired() == 0  # nothing left: a purged row is not purged again


def test_the_beat_task_is_scheduled_and_purges(world):
    assert django_settings.CELERY_BEAT_SCHEDULE["purge-expired-binaries"]["task"] == "invocations.purge_expired_binaries"
    row = _binary(world, expires_in=timedelta(seconds=-5))
    assert purge_expired_binaries_task.run() == 1
    row.refresh_from_db()
    assert row.purged_at is not None


@pytest.mark.parametrize("purge", [False, True], ids=["expired", "purged"])
def test_the_result_url_answers_410_result_expired(world, agent, purge):
    row = _binary(world, expires_in=timedelta(seconds=-1))
    if purge:
        binaries_purge_expired()
    resp = agent.get(f"/api/v1/invocations/{row.invocation_id}/binary")
    assert resp.status_code == 410 and resp["Content-Type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["code"] == "result_expired" and problem["status"] == 410
    assert (problem["media_type"], problem["size_bytes"], problem["sha256"]) == ("image/png", len(PNG), row.sha256)
    assert problem["purged"] is purge


def test_a_live_binary_is_still_served(world, agent):
    row = _binary(world, expires_in=timedelta(hours=1))
    binaries_purge_expired()
    resp = agent.get(f"/api/v1/invocations/{row.invocation_id}/binary")
    assert resp.status_code == 200 and resp.content == PNG
