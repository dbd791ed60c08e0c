"""Attempt leases: a claim grants the attempt's timeout plus ABANDON_GRACE; while it runs its worker
renews it to now + LEASE_SECONDS every LEASE_RENEW_SECONDS (one thread per process, one UPDATE
for all its attempts). Only a lapsed lease — the worker is gone — lets recovery touch an attempt.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from invocations_app.models import Attempt, Invocation
from toolops.decisions.deadlines import TimeoutPolicy
from toolops.runtime.states import State

logger = logging.getLogger(__name__)


# An open attempt older than its timeout plus this grace belongs to a worker that is gone
# (attempts recorded before leases existed; see LEASE_SECONDS for the rest).
ABANDON_GRACE = timedelta(seconds=5)


# The lease: a claim grants timeout + ABANDON_GRACE; while the attempt runs, its worker renews
# it to now + LEASE_SECONDS every LEASE_RENEW_SECONDS. Only a lapsed lease — the worker stopped
# renewing, i.e. it is gone — lets recovery touch the attempt, however slow the call is.
LEASE_SECONDS = 15.0


LEASE_RENEW_SECONDS = 3.0


WORKER = socket.gethostname()


def attempt_timeout(invocation: Invocation) -> float:
    return TimeoutPolicy.from_dict(invocation.tool_spec.timeout_policy or None).attempt_timeout_seconds


class _LeaseKeeper:
    """One thread per worker process renews the leases of every attempt the process is running.

    A single ``UPDATE … WHERE id IN (…)`` every LEASE_RENEW_SECONDS, only while something runs:
    a quick attempt costs a set insert and removal, no thread start and no extra connection.
    Started lazily in the process that uses it (a forked pool child starts its own).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: dict[object, int] = {}
        self.pid: int | None = None

    def hold(self, attempt_id) -> "_LeaseHold":
        return _LeaseHold(self, attempt_id)

    def _add(self, attempt_id) -> None:
        with self.lock:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="attempt-leases", daemon=True).start()
            self.active[attempt_id] = self.active.get(attempt_id, 0) + 1

    def _remove(self, attempt_id) -> None:
        with self.lock:
            left = self.active.get(attempt_id, 0) - 1
            if left > 0:
                self.active[attempt_id] = left
            else:
                self.active.pop(attempt_id, None)

    def _run(self) -> None:
        while True:
            time.sleep(LEASE_RENEW_SECONDS)
            with self.lock:
                ids = list(self.active)
            if not ids:
                continue
            try:
                Attempt.objects.filter(pk__in=ids, ended_at__isnull=True).update(
                    lease_expires_at=timezone.now() + timedelta(seconds=LEASE_SECONDS))
            except Exception:  # noqa: BLE001 - a failed renewal lets a lease lapse; it must not stop the keeper
                logger.exception("attempt lease renewal failed")
            finally:
                # Only slow attempts get here, every few seconds: a connection per round costs
                # little and none is left open (an idle session would hold its database busy).
                connection.close()


class _LeaseHold:
    def __init__(self, keeper: _LeaseKeeper, attempt_id) -> None:
        self.keeper, self.attempt_id = keeper, attempt_id

    def __enter__(self) -> "_LeaseHold":
        self.keeper._add(self.attempt_id)
        return self

    def __exit__(self, *exc) -> None:
        self.keeper._remove(self.attempt_id)


LEASES = _LeaseKeeper()


def attempt_lease_lapsed(attempt: Attempt, *, now: datetime | None = None) -> bool:
    """True when the attempt's worker is gone: its lease ran out (nobody renews it any more)."""
    now = now or timezone.now()
    if attempt.lease_expires_at is not None:
        return attempt.lease_expires_at < now
    return now - attempt.started_at > timedelta(seconds=attempt_timeout(attempt.invocation)) + ABANDON_GRACE


def stale_open_attempts(*, now: datetime | None = None):
    """Open attempts whose worker is gone (lease lapsed), never ones that are merely slow."""
    now = now or timezone.now()
    lapsed = Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True)
    for attempt in Attempt.objects.filter(lapsed, ended_at__isnull=True).select_related("invocation__tool_spec"):
        if attempt.invocation.state == State.EXECUTING and attempt_lease_lapsed(attempt, now=now):
            yield attempt
