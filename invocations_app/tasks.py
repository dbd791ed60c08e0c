"""Celery tasks: thin wrappers that call services (safe to deliver twice)."""
from __future__ import annotations

from celery import shared_task

from .confirmations import confirmations_expire_due


@shared_task(name="invocations.confirmations_expire_due", ignore_result=True)
def confirmations_expire_due_task() -> int:
    """Periodic: expire pending confirmations past their time (each expiry is race-safe)."""
    return confirmations_expire_due()
