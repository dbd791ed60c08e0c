"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server.

Playwright's sync API keeps an asyncio loop running in the test thread, so Django would refuse
ORM calls from the test body (SynchronousOnlyOperation). The ``browser`` fixture allows them
while it is alive and restores the environment afterwards, so tests outside this package keep
Django's guard.

The data builders (``make_demo_spec``, ``admit_proposal``, ``make_staff``) live in ``tests.builders``.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.builders import PASSWORD
from tests.conftest import require

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Staff sign in with a password; Django's PBKDF2 spends ~0.2 s of CPU per hash by design
    (once at creation, once per login). Nothing here tests the hasher."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- browser ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    require(CHROMIUM.exists() and shutil.which(str(CHROMIUM)) is not None,
            "needs Chromium at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    chromium = playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    )
    try:
        yield chromium
    finally:
        chromium.close()
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, locale="en-US", timezone_id="UTC")
    context.set_default_timeout(10_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def login(page, live_server):
    """``login(user)`` signs in through the admin login form; returns the page."""

    def _login(user: User):
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#user-tools")
        return page

    return _login
