"""The bare Celery task of bench/execution.py: N single-row INSERTs, nothing else."""
from __future__ import annotations

from celery import shared_task
from django.db import connection

BARE_TABLE = "bench_bare_write"


@shared_task(name="bench.bare_write", ignore_result=True)
def bare_write_task(batch: str, n: int, writes: int) -> None:
    with connection.cursor() as cur:
        for _ in range(writes):
            cur.execute(f"INSERT INTO {BARE_TABLE} (batch, n) VALUES (%s, %s)", [batch, n])
