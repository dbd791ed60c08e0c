"""Counting limits of grants (calls per minute, calls per run, rolling amount), exact across machines.

``reserve`` checks and records one use atomically, so N concurrent callers racing for the last
units of a limit get exactly the allowed number of successes. Two backends, never process
memory: Redis (a Lua script, atomic on the server) when ``REDIS_URL`` is set, else the
database (the grant row locked FOR UPDATE while counting and inserting). A use is counted
when the call is authorized, including calls that then wait for a human: a denied or expired
confirmation does not give the unit back (conservative, and simple to audit).
"""
from __future__ import annotations

import functools
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from specs_app.models import Grant
from toolops.decisions.authorization import GrantSnapshot

from invocations_app.models import GrantUsage

MINUTE = timedelta(minutes=1)


def counts_usage(grant: GrantSnapshot) -> bool:
    """Whether the grant has a limit that needs a shared counter."""
    lim = grant.limits
    return any(v is not None for v in (lim.calls_per_minute, lim.calls_per_run, lim.max_amount_per_window))


def _window(grant: GrantSnapshot) -> timedelta:
    return timedelta(seconds=grant.limits.amount_window_seconds or 86400)


class DatabaseCounter:
    """Uses are rows of ``GrantUsage``; the grant row lock serializes reservations per grant."""

    name = "database"

    def reserve(self, *, grant: GrantSnapshot, run_id, invocation_id, amount: int, now: datetime) -> list[str]:
        if not counts_usage(grant):
            return []
        lim = grant.limits
        with transaction.atomic():
            # Lock order: always the grant row first, so concurrent reservations queue here.
            Grant.objects.select_for_update().filter(pk=grant.grant_id).values_list("pk", flat=True).get()
            uses = GrantUsage.objects.filter(grant_id=grant.grant_id)
            failures = []
            if lim.calls_per_minute is not None and uses.filter(at__gt=now - MINUTE).count() + 1 > lim.calls_per_minute:
                failures.append("rate_limited")
            if lim.calls_per_run is not None and uses.filter(run_id=run_id).count() + 1 > lim.calls_per_run:
                failures.append("run_call_limit")
            if lim.max_amount_per_window is not None:
                spent = uses.filter(at__gt=now - _window(grant)).aggregate(s=Sum("amount"))["s"] or 0
                if spent + amount > lim.max_amount_per_window:
                    failures.append("amount_over_window_limit")
            if not failures:
                GrantUsage.objects.create(grant_id=grant.grant_id, run_id=run_id, invocation_id=invocation_id, amount=amount, at=now)
        return failures

    def release(self, *, grant: GrantSnapshot, run_id, invocation_id, amount: int) -> None:
        """Give back a reservation made for ``invocation_id`` (all-or-nothing reservations)."""
        GrantUsage.objects.filter(grant_id=grant.grant_id, invocation_id=invocation_id).delete()


# KEYS: 1 minute zset, 2 per-run counter, 3 amount zset.
# ARGV: now_ms, calls_per_minute, calls_per_run, amount, window_ms, max_amount, member (-1 = no limit)
_RESERVE_LUA = """
local now = tonumber(ARGV[1]); local cpm = tonumber(ARGV[2]); local cpr = tonumber(ARGV[3])
local amt = tonumber(ARGV[4]); local win = tonumber(ARGV[5]); local amax = tonumber(ARGV[6]); local member = ARGV[7]
local fails = {}
if cpm >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
  if redis.call('ZCARD', KEYS[1]) + 1 > cpm then table.insert(fails, 'rate_limited') end
end
if cpr >= 0 then
  if tonumber(redis.call('GET', KEYS[2]) or '0') + 1 > cpr then table.insert(fails, 'run_call_limit') end
end
if amax >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - win)
  local total = 0
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do total = total + tonumber(string.match(m, '|(%-?%d+)$')) end
  if total + amt > amax then table.insert(fails, 'amount_over_window_limit') end
end
if #fails > 0 then return fails end
if cpm >= 0 then redis.call('ZADD', KEYS[1], now, member); redis.call('PEXPIRE', KEYS[1], 60000) end
if cpr >= 0 then redis.call('INCR', KEYS[2]); redis.call('EXPIRE', KEYS[2], 30 * 86400) end
if amax >= 0 then redis.call('ZADD', KEYS[3], now, member .. '|' .. amt); redis.call('PEXPIRE', KEYS[3], win) end
return fails
"""


class RedisCounter:
    """One Lua script per reservation: check every counting limit, then record, atomically."""

    name = "redis"

    def __init__(self, url: str, prefix: str = "toolops:usage"):
        import redis

        self.client = redis.Redis.from_url(url)
        self.script = self.client.register_script(_RESERVE_LUA)
        self.prefix = prefix

    def reserve(self, *, grant: GrantSnapshot, run_id, invocation_id, amount: int, now: datetime) -> list[str]:
        if not counts_usage(grant):
            return []
        lim = grant.limits
        base = f"{self.prefix}:{grant.grant_id}"
        keys = [f"{base}:minute", f"{base}:run:{run_id}", f"{base}:amount"]

        def opt(v):
            return -1 if v is None else int(v)

        args = [
            int(now.timestamp() * 1000), opt(lim.calls_per_minute), opt(lim.calls_per_run), int(amount),
            int(_window(grant).total_seconds() * 1000), opt(lim.max_amount_per_window), str(invocation_id),
        ]
        return [f.decode() if isinstance(f, bytes) else f for f in self.script(keys=keys, args=args)]

    def release(self, *, grant: GrantSnapshot, run_id, invocation_id, amount: int) -> None:
        """Give back a reservation made for ``invocation_id`` (all-or-nothing reservations)."""
        if not counts_usage(grant):
            return
        lim = grant.limits
        base = f"{self.prefix}:{grant.grant_id}"
        pipe = self.client.pipeline(transaction=True)
        if lim.calls_per_minute is not None:
            pipe.zrem(f"{base}:minute", str(invocation_id))
        if lim.calls_per_run is not None:
            pipe.decr(f"{base}:run:{run_id}")
        if lim.max_amount_per_window is not None:
            pipe.zrem(f"{base}:amount", f"{invocation_id}|{int(amount)}")
        pipe.execute()


@functools.lru_cache(maxsize=1)
def default_counter():
    """Redis when configured (shared by every process and machine), else the database."""
    return _redis_counter(settings.REDIS_URL) if settings.REDIS_URL else DatabaseCounter()


@functools.lru_cache(maxsize=4)
def _redis_counter(url: str) -> RedisCounter:
    # One client (and connection pool) per process, not one per decision; redis-py's pool
    # notices a fork and reconnects in the child, so prefork workers are safe.
    return RedisCounter(url)
