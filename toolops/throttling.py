"""Rate limits: per API token (DRF throttle) and failed admin logins per address and username.

Both count in the ``shared`` cache (Redis in production) so every web process sees one count.
When that cache is unreachable the limits fail open: an outage of the counter store must not
take the whole API down (the request still meets the database, which answers 503 if it is the
one that is down).
"""
from __future__ import annotations

import functools
import logging
import time

import redis
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured, ValidationError
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

logger = logging.getLogger(__name__)

CACHE_ERRORS = (RedisError, OSError)


class TokenRateThrottle(BaseThrottle):
    """At most ``TOOLOPS_API_RATE`` requests per API token per window (``6000/min``: 6000 per
    calendar minute), counted with one atomic increment per request. DRF's own throttle keeps
    every request's timestamp in a list it reads and rewrites whole each time: at thousands per
    minute that list is the most expensive thing a request does. Unauthenticated callers are
    refused by authentication before a rate matters, so they are not counted."""

    def allow_request(self, request, view):
        rate = settings.TOOLOPS_API_RATE  # read per request: "off" disables
        token_id = getattr(request.user, "token_id", None)
        if rate in ("", "off") or token_id is None:
            return True
        limit, window = _parse_rate(rate)
        now = time.time()
        self.wait_seconds = max(1, int(window - now % window))
        key = f"throttle:token:{token_id}:{int(now // window)}"
        try:
            count = _increment("shared", key, timeout=window + 1)
        except CACHE_ERRORS:
            logger.warning("rate-limit cache unavailable: request let through")
            return True
        return count <= limit

    def wait(self):
        return getattr(self, "wait_seconds", None)


_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def _parse_rate(rate: str) -> tuple[int, int]:
    count, _, period = rate.partition("/")
    try:
        return int(count), _PERIODS[period]
    except (ValueError, KeyError):
        raise ImproperlyConfigured(f"TOOLOPS_API_RATE={rate!r}: use <n>/<s|min|hour|day> or off") from None


def _increment(alias: str, key: str, *, timeout: int) -> int:
    """The key's new count, created at 1 with ``timeout``; one round trip on Redis.

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
        pipe.incr(full_key)
        pipe.expire(full_key, timeout, nx=True)
        return pipe.execute()[0]
    cache.add(key, 0, timeout=timeout)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=timeout)
        return 1


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
