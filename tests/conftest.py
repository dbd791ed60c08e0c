"""Shared test plumbing: service requirements that skip locally and fail in CI."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# The conformance corpora ship with the repository (each with its LICENSE and SOURCE.md);
# TOOLOPS_CORPORA only points the tests at another copy.
CORPORA = Path(os.environ.get("TOOLOPS_CORPORA", REPO_ROOT / "tests" / "corpora"))
SERVICES_REQUIRED = os.environ.get("TOOLOPS_REQUIRE_SERVICES") == "1"
# The project's own packages: the domain apps, the rooms around them (docs/architecture.md), the core.
DOMAIN_PACKAGES = ("specs_app", "invocations_app")
ROOM_PACKAGES = ("agent_api", "control", "mcp_server", "oauth", "worker", "webhooks", "audit", "devtools")
PROJECT_PACKAGES = ("toolops", *DOMAIN_PACKAGES, *ROOM_PACKAGES)


def require(available: bool, reason: str) -> None:
    """Skip when a real service is missing; under TOOLOPS_REQUIRE_SERVICES=1 that is an error."""
    if available:
        return
    if SERVICES_REQUIRED:
        pytest.fail(f"TOOLOPS_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_corpus(name: str) -> Path:
    """A corpus is part of the checkout, not a service: a missing one fails, it never skips."""
    path = CORPORA / name
    if not path.is_dir():
        pytest.fail(f"corpus {path} is missing: tests/corpora/ is part of the repository", pytrace=False)
    return path


def open_demo_services(settings, base: str) -> None:
    """Point the demo ToolSpecs at the demo services on ``base`` and open that address in the
    operator's allow-list (``settings.TOOLOPS_EGRESS_ALLOW``), as ``make run`` does: nothing is
    open by default. A process started after this gets the list as its ``TOOLOPS_EGRESS_ALLOW``
    (``tests/integration/conftest.py::_settings_env``)."""
    from worker.egress_net import allow_with

    settings.TOOLOPS_DEMO_SERVICES_URL = base
    settings.TOOLOPS_EGRESS_ALLOW = allow_with(settings.TOOLOPS_EGRESS_ALLOW, base)


def using_postgres() -> bool:
    from django.conf import settings

    return settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


def require_postgres() -> None:
    require(using_postgres(), "needs PostgreSQL: run with DATABASE_URL=postgres://...")


def require_redis() -> str:
    from django.conf import settings

    url = settings.REDIS_URL
    ok = False
    if url:
        try:
            import redis

            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            ok = True
        except Exception:  # noqa: BLE001 - any failure means "not available"
            ok = False
    require(ok, "needs Redis: set REDIS_URL=redis://127.0.0.1:6379/0")
    return url


@pytest.fixture(autouse=True)
def _fresh_process_caches():
    """Per-process caches hold rows that are immutable in production (published ToolSpec
    versions, capabilities, model calls); tests roll those rows back and make new ones with the
    same names, so each test starts with empty caches."""
    yield
    from specs_app import selectors as spec_selectors
    from toolops.runtime import normalizers
    from toolops.runtime.validation import clear_validator_cache

    clear_validator_cache()
    normalizers._rules_cache.clear()  # keyed by name@version, which tests reuse with other rules
    spec_selectors._CAPABILITIES.clear()
    from specs_app.services import verified_tokens

    verified_tokens.clear()  # tests roll token rows back and may issue the same secret again
    from oauth.tokens import remembered

    remembered.clear()  # OAuth access tokens, likewise
    from invocations_app.selectors import _tool_definition_seen

    _tool_definition_seen.cache_clear()
    from mcp_server.calls import _visible_tools

    _visible_tools.cache_clear()
    from worker.executors.mcp_client import forget_verified_pins

    forget_verified_pins()  # the same upstream URL and pinned definition serve many tests
    try:
        from invocations_app.admission import _visible_set
    except ImportError:
        return
    _visible_set.cache_clear()
