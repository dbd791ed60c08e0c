"""Retention: dropping what has outlived its promise (docs/concepts/results.md: "binary results are references
with an expiry").

``binaries_purge_expired`` (beat: ``invocations.purge_expired_binaries``, every
``TOOLOPS_BINARY_PURGE_SECONDS``) empties the bytes of binary results past ``expires_at``
(``TOOLOPS_BINARY_RETENTION_SECONDS`` after they were stored), in batches of
``TOOLOPS_BINARY_PURGE_BATCH`` rows, each batch its own short transaction taken with
``FOR UPDATE SKIP LOCKED`` so two beats never fight over a row. The row stays: media type,
size, SHA-256 and the times — the record still says what the model was shown — and the result
URL answers ``410 result_expired`` (``tool_messages.result_binary``).
"""
from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from invocations_app.models import ResultBinary


def binaries_purge_expired(*, now=None, batch: int | None = None, max_batches: int = 100) -> int:
    """Empty every expired binary result's bytes; returns how many rows were purged."""
    now = now or timezone.now()
    batch = batch or settings.TOOLOPS_BINARY_PURGE_BATCH
    purged = 0
    for _ in range(max_batches):  # the next beat picks up whatever is left
        with transaction.atomic():
            ids = list(ResultBinary.objects.select_for_update(skip_locked=True)
                       .filter(purged_at__isnull=True, expires_at__lte=now)
                       .order_by("expires_at").values_list("pk", flat=True)[:batch])
            if ids:
                ResultBinary.objects.filter(pk__in=ids).update(body=b"", purged_at=now)
        purged += len(ids)
        if len(ids) < batch:
            break
    return purged
