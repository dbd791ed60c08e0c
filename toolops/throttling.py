"""Rate limits: per API token (DRF throttle) and failed admin logins per address and username.

Both count in the ``shared`` cache (Redis in production) so every web process sees one count.
When that cache is unreachable the limits fail open: an outage of the counter store must not
take the whole API down (the request still meets the database, which answers 503 if it is the
one that is down).
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import caches
from django.core.exceptions import ValidationError
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

logger = logging.getLogger(__name__)

CACHE_ERRORS = (RedisError, OSError)


class TokenRateThrottle(SimpleRateThrottle):
    """``TOOLOPS_API_RATE`` requests per API token (e.g. ``6000/min``); unauthenticated callers
    are refused by authentication before a rate matters, so they are not counted."""

    scope = "token"

    def __init__(self):
        self.cache = caches["shared"]
        super().__init__()

    def get_rate(self):
        # Read per request (not frozen at import like DRF's THROTTLE_RATES); "off" disables.
        rate = settings.TOOLOPS_API_RATE
        return None if rate in ("", "off") else rate

    def get_cache_key(self, request, view):
        token_id = getattr(request.user, "token_id", None)
        return None if token_id is None else f"throttle:token:{token_id}"

    def allow_request(self, request, view):
        try:
            return super().allow_request(request, view)
        except CACHE_ERRORS:
            logger.warning("rate-limit cache unavailable: request let through")
            return True


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
