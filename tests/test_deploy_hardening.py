"""Deploy hardening from the environment (docs/how-to/deploy.md): `check --deploy` is clean
with the documented production variables, the HTTPS settings take effect behind a proxy, API
tokens are rate-limited (429 problem+json) and failed admin logins are throttled."""
from __future__ import annotations

import itertools
import os
import secrets
import subprocess
import sys
import time

import pytest
import requests
from django.contrib.auth.models import User

from django.core.cache import caches
from rest_framework.test import APIClient

from tests.builders import Agent, forget_rate_counts, make_token
from tests.conftest import REPO_ROOT
from tests.servers import gunicorn_server

# The production variables as docs/how-to/deploy.md documents them (plus a real secret key and host).
PRODUCTION_ENV = {
    "DEBUG": "0",
    "ALLOWED_HOSTS": "toolops.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://toolops.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
    "SESSION_COOKIE_SECURE": "1",
    "CSRF_COOKIE_SECURE": "1",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
}


def _env(**extra) -> dict:
    return {**os.environ, "SECRET_KEY": secrets.token_urlsafe(50), **PRODUCTION_ENV, **extra}


def test_check_deploy_is_clean_with_the_documented_production_variables():
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout


def test_check_deploy_warns_without_them():
    """The test above can fail: the same check with the defaults names what is missing."""
    env = {k: v for k, v in os.environ.items() if k not in PRODUCTION_ENV}
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in proc.stdout + proc.stderr


def test_behind_a_tls_proxy_gunicorn_redirects_http_and_sends_hsts_and_secure_cookies():
    with gunicorn_server(_env(), ready_path="/login/") as server:
        host = {"Host": "toolops.example.com"}
        plain = requests.get(server.url + "/login/", headers=host, allow_redirects=False, timeout=10)
        assert plain.status_code == 301 and plain.headers["Location"] == "https://toolops.example.com/login/"
        https = requests.get(server.url + "/login/", headers={**host, "X-Forwarded-Proto": "https"}, timeout=10)
        assert https.status_code == 200
        assert https.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        assert "secure" in https.headers["Set-Cookie"].lower()  # the CSRF cookie
        assert "frame-ancestors 'none'" in https.headers["Content-Security-Policy"]
        assert https.headers["X-Content-Type-Options"] == "nosniff"
        static = requests.get(server.url + "/static/admin/css/base.css", headers={**host, "X-Forwarded-Proto": "https"}, timeout=10)
        assert static.status_code == 200  # whitenoise, no proxy needed for static files


def test_an_unknown_proxy_header_format_fails_loudly_at_start():
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO_ROOT,
                          env=_env(SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto"), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "SECURE_PROXY_SSL_HEADER" in proc.stderr


@pytest.mark.parametrize("name", ["TOOLOPS_EGRESS_ALLOW", "TOOLOPS_WEBHOOK_EGRESS_ALLOW"])
def test_an_egress_allow_list_naming_a_host_fails_loudly_at_start(name):
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO_ROOT,
                          env=_env(**{name: "127.0.0.1:8767, hooks.internal:443"}), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and name in proc.stderr and "'hooks.internal:443' must be IP:PORT" in proc.stderr


# --------------------------------------------------------------------------- API rate limits


@pytest.mark.django_db
def test_an_api_token_over_its_rate_gets_429_rate_limited_with_retry_after(settings):
    settings.TOOLOPS_API_RATE = "3/hour"  # a window the test cannot straddle in practice
    busy = Agent(APIClient(), make_token()[1])
    other = Agent(APIClient(), make_token()[1])
    forget_rate_counts(rate=settings.TOOLOPS_API_RATE)
    answers = [busy.get("/api/v1/tools").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    resp = busy.get("/api/v1/tools")
    assert resp.status_code == 429 and resp["Content-Type"] == "application/problem+json"
    assert resp.json()["code"] == "rate_limited" and 0 < int(resp["Retry-After"]) <= 3600
    assert other.get("/api/v1/tools").status_code == 200  # per token, not global


def test_processes_claiming_permits_in_shares_never_let_more_than_the_limit_through(monkeypatch):
    """Two web processes (two ``_Permits``) spend one token's limit from the shared count: all
    they let through together is at most the limit and nearly all of it, and the shared count
    is asked far less often than once per request."""
    from toolops import throttling

    asked = []
    real_increment = throttling._increment

    def counting_increment(alias, key, **kwargs):
        asked.append(kwargs["by"])
        return real_increment(alias, key, **kwargs)

    monkeypatch.setattr(throttling, "_increment", counting_increment)
    key, limit = f"throttle:token:test-{secrets.token_hex(4)}:{int(time.time() // 3600)}", 6000
    first, second = throttling._Permits(), throttling._Permits()
    allowed = [p.take(key, limit=limit, timeout=3600) for _ in range(limit // 2) for p in (first, second)]
    asked_for_the_limit = len(asked)
    allowed += [p.take(key, limit=limit, timeout=3600) for _ in range(100) for p in (first, second)]
    caches["shared"].delete(key)
    assert sum(allowed) <= limit
    assert sum(allowed) >= limit - 2 * 64  # what one process may hold unspent when the other runs out
    assert allowed[-4:] == [False] * 4  # past the limit: refused
    assert asked_for_the_limit < limit // 10
    assert asked[0] == limit // throttling._Permits.SHARE and min(asked) == 1  # shares shrink near the limit


# --------------------------------------------------------------------------- admin login throttling

# Fresh addresses each run: the counts live in the shared cache for LOGIN_FAILURES_WINDOW.
_addresses = (f"2001:db8::{secrets.token_hex(2)}:{n}" for n in itertools.count(1))


def _login(client, username: str, password: str, address: str):
    return client.post("/login/", {"username": username, "password": password, "next": "/"}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_failed_admin_logins_are_throttled_per_username_and_per_address(client, settings):
    settings.LOGIN_FAILURES_MAX = 3
    name = f"ops-{secrets.token_hex(4)}"
    User.objects.create_user(name, password="right-password", is_staff=True)
    attacker = next(_addresses)
    for _ in range(3):
        assert "Please enter the correct username" in _login(client, name, "guess", attacker).content.decode()
    # Even the right password is refused now, from any address: guessing must stop.
    refused = _login(client, name, "right-password", next(_addresses))
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # The attacker's address is blocked for other usernames too.
    other = f"ops-{secrets.token_hex(4)}"
    User.objects.create_user(other, password="right-password", is_staff=True)
    assert "Too many failed logins" in _login(client, other, "right-password", attacker).content.decode()
    # Another user from another address logs in normally.
    assert _login(client, other, "right-password", next(_addresses)).status_code == 302
