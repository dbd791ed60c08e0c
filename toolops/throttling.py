"""Rate limits: per API token (every front door) and failed admin logins per address and username.

Both count in the ``shared`` cache (Redis in production) so every process sees one count: the
web processes (the agent API and the Approvals API, through ``TokenRateThrottle``) and the MCP
process (``mcp_server.rate_limit``) spend one token's requests from the same counter,
``token_rate_window``. When that cache is unreachable the limits fail open: an outage of the
counter store must not take the whole API down (the request still meets the database, which
answers 503 if it is the one that is down).
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured, ValidationError
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from toolops.settings_table import parse_rate

logger = logging.getLogger(__name__)

CACHE_ERRORS = (RedisError, OSError)


class TokenRateThrottle(BaseThrottle):
    """At most ``TOOLOPS_API_RATE`` requests per API token per window (``6000/min``: 6000 per
    calendar minute), counted in the shared cache: the REST side (agent API, Approvals API) of
    the one per-token limit every front door spends (``token_rate_window``). DRF's own throttle keeps every request's
    timestamp in a list it reads and rewrites whole each time: at thousands per minute that
    list is the most expensive thing a request does. Unauthenticated callers are refused by
    authentication before a rate matters, so they are not counted.

    The shared count is of permits *claimed*, in blocks (``PERMITS``): a process claims a
    1/64 share of what the window has left and spends it without asking again, so a busy
    token costs the cache a round trip every few dozen requests instead of every request.
    A claim is granted only up to the limit, so all processes together never let more than
    the limit through; near the limit the shares shrink to single permits, and permits a
    process claimed but did not use are lost at the window's end (a token may be refused a
    little before its exact limit, never after it)."""

    def allow_request(self, request, view):
        window = token_rate_window(getattr(request.user, "token_id", None))
        if window is None:
            return True
        self.wait_seconds = window.retry_after
        return window.take()

    def wait(self):
        return getattr(self, "wait_seconds", None)


@dataclass(frozen=True)
class RateWindow:
    """The window one token's request counts in: its counter ``key`` (the same for every front
    door and process), the ``limit`` and the seconds until the window ends (``retry_after``)."""

    key: str
    limit: int
    timeout: int
    retry_after: int

    def take(self) -> bool:
        """Spend one of the window's permits; False when the token is over its limit. May ask
        the shared cache (a round trip, up to its socket timeout): not for an event loop."""
        return PERMITS.take(self.key, limit=self.limit, timeout=self.timeout)

    def take_held(self) -> bool:
        """Spend a permit this process already holds; False when it holds none (then ``take``
        decides). No I/O."""
        return PERMITS.take_held(self.key, limit=self.limit)


def token_rate_window(token_id: int | str | None) -> RateWindow | None:
    """The window of ``TOOLOPS_API_RATE`` a request with this token counts in now; None when the
    limit is off or the caller holds no token. ``token_id``: an agent token's id, or
    ``person:<id>`` for a person's token (``agent_api.auth``)."""
    if token_id is None:
        return None
    return rate_window(f"token:{token_id}", settings.TOOLOPS_API_RATE)  # read per request: "off" disables


def rate_window(counter: str, rate: str) -> RateWindow | None:
    """The window of ``rate`` (``<n>/<period>``; "" or "off": None) that ``counter`` counts in now."""
    if rate in ("", "off"):
        return None
    limit, window = _parse_rate(rate)
    now = time.time()
    return RateWindow(key=f"throttle:{counter}:{int(now // window)}", limit=limit, timeout=window + 1,
                      retry_after=max(1, int(window - now % window)))


class _Permits:
    """This process's permits per counter key (a token's window): claimed from the shared count,
    not yet spent."""

    SHARE = 64  # a claim takes 1/SHARE of the permits the window had left at the last claim
    MAX_KEYS = 4096  # past this, keys of other windows are dropped (their permits are lost)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.slots: dict[str, list[int]] = {}  # key -> [limit, permits left, shared count at the last claim]

    def take_held(self, key: str, *, limit: int) -> bool:
        """Spend a permit already claimed for ``key``; False when none is held (no I/O)."""
        with self.lock:
            return self._spend(self.slots.get(key), limit)

    def take(self, key: str, *, limit: int, timeout: int) -> bool:
        with self.lock:
            slot = self.slots.get(key)
            if slot is None or slot[0] != limit:
                self._make_room(key)
                slot = self.slots[key] = [limit, 0, 0]
            if self._spend(slot, limit):
                return True
            block = max(1, (limit - slot[2]) // self.SHARE)
        try:
            count = _increment("shared", key, timeout=timeout, by=block)
        except CACHE_ERRORS:
            logger.warning("rate-limit cache unavailable: request let through")
            return True
        granted = min(block, limit - (count - block))  # the part of this claim within the limit
        with self.lock:
            slot[2] = max(slot[2], count)
            if granted <= 0:
                return False
            slot[1] += granted - 1
        return True

    @staticmethod
    def _spend(slot: list[int] | None, limit: int) -> bool:
        if slot is None or slot[0] != limit or slot[1] <= 0:
            return False
        slot[1] -= 1
        return True

    def _make_room(self, key: str) -> None:
        if len(self.slots) < self.MAX_KEYS:
            return
        window = key.rsplit(":", 1)[-1]
        for old in [k for k in self.slots if k.rsplit(":", 1)[-1] != window]:
            del self.slots[old]
        if len(self.slots) >= self.MAX_KEYS:  # that many tokens busy in one window
            self.slots.clear()


PERMITS = _Permits()


def _parse_rate(rate: str) -> tuple[int, int]:
    """Checked at start-up already (toolops/settings_table.py); a test may set a bad one at run time."""
    try:
        return parse_rate(rate)
    except ValueError as exc:
        raise ImproperlyConfigured(f"TOOLOPS_API_RATE={rate!r}: {exc}") from None


def _increment(alias: str, key: str, *, timeout: int, by: int = 1) -> int:
    """The key's new count, created at ``by`` with ``timeout``; one round trip on Redis.

    Django's cache API has no "increment, creating if missing" (its ``incr`` checks existence
    first: two round trips, and ``add`` + ``incr`` three), so on Redis the count goes through a
    client of our own on the cache's server, under the cache's own key name."""
    cache = caches[alias]
    if isinstance(cache, RedisCache):
        config = settings.CACHES[alias]
        options = config.get("OPTIONS", {})
        client = _redis_client(_write_server(config["LOCATION"]), options.get("socket_connect_timeout"),
                               options.get("socket_timeout"))
        full_key = cache.make_and_validate_key(key)
        pipe = client.pipeline(transaction=False)
        pipe.incrby(full_key, by)
        pipe.expire(full_key, timeout, nx=True)
        return pipe.execute()[0]
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key, by)
    except ValueError:  # expired between add and incr
        cache.add(key, by, timeout=timeout)
        return by


def _write_server(location) -> str:
    """Django's RedisCache writes to the first of its servers (a list or a comma-separated string)."""
    servers = location if isinstance(location, (list, tuple)) else location.split(",")
    return servers[0].strip()


@functools.lru_cache(maxsize=4)
def _redis_client(url: str, connect_timeout: float | None, timeout: float | None) -> redis.Redis:
    # One client (and connection pool) per process and server; redis-py reconnects after a fork.
    return redis.Redis.from_url(url, socket_connect_timeout=connect_timeout, socket_timeout=timeout)


def _login_keys(request, username: str) -> list[str]:
    address = (request.META.get("REMOTE_ADDR") or "unknown") if request is not None else "unknown"
    return [f"login-failures:addr:{address}", f"login-failures:user:{username.casefold()[:150]}"]


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin login form, refusing attempts once an address or a username has failed
    ``LOGIN_FAILURES_MAX`` times within ``LOGIN_FAILURES_WINDOW`` seconds (a correct password
    included: guessing must stop, not just fail). A success clears the username's count."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "throttled": "Too many failed logins from this address or for this user. Try again later.",
    }

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        keys = _login_keys(self.request, username)
        cache = caches["shared"]
        try:
            counts = cache.get_many(keys)
        except CACHE_ERRORS:
            logger.warning("login-throttle cache unavailable: attempt not counted")
            return super().clean()
        if any(int(n) >= settings.LOGIN_FAILURES_MAX for n in counts.values()):
            self.throttled = True
            raise ValidationError(self.error_messages["throttled"], code="throttled")
        try:
            return super().clean()
        except ValidationError:
            for key in keys:
                try:
                    cache.add(key, 0, timeout=settings.LOGIN_FAILURES_WINDOW)
                    cache.incr(key)
                except (ValueError, *CACHE_ERRORS):
                    pass  # the key expired between add and incr, or the cache went away
            raise
