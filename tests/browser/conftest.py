"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server.

Playwright's sync API keeps an asyncio loop running in the test thread, so Django would refuse
ORM calls from the test body (SynchronousOnlyOperation). The ``browser`` fixture allows them
while it is alive and restores the environment afterwards, so tests outside this package keep
Django's guard.

The data helpers here (``make_calendar_spec``, ``propose``, ``make_staff``) are shared with the
test-client tests in ``tests/invocations/test_console.py``.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from invocations_app.models import Invocation
from invocations_app.admission import proposal_admit
from invocations_app.runs import model_call_create, run_create
from specs_app.demo import DEMO_TOOLSPECS
from specs_app.models import Subject, ToolSpec
from specs_app.services import toolspec_publish
from tests.builders import make_capability
from tests.conftest import require

CHROMIUM = Path("/usr/bin/chromium")
PASSWORD = "correct horse battery staple"
DEMO_CAPABILITIES = {"calendar.write": "create", "payments.transfer": "create", "weather.read": "read", "web.read": "read"}


# --- data ------------------------------------------------------------------------------------

def make_demo_spec(name: str) -> ToolSpec:
    """Publish version 1 of one of the demo ToolSpecs (API.md), with its capability."""
    data = next(d for d in DEMO_TOOLSPECS if d["name"] == name)
    for entry in data["required_capabilities"]:
        make_capability(name=entry["capability"], operation_class=DEMO_CAPABILITIES[entry["capability"]])
    return toolspec_publish(spec=ToolSpec.objects.create(version=1, **data))


def make_calendar_spec() -> ToolSpec:
    """``calendar.create_event@1``: write_idempotent, confirmation required (900 s), needs calendar.write."""
    return make_demo_spec("calendar.create_event")


def propose(subject: Subject, spec: ToolSpec, arguments: dict, *, timezone_name: str = "Europe/Paris") -> Invocation:
    """One model call showing ``spec`` and one proposal of ``arguments`` through the admission service."""
    run = run_create(subject=subject, budgets={}, timezone_name=timezone_name, locale="en-US", metadata={}, trace=None)
    call = model_call_create(run=run, tool_refs=[spec.ref], fmt="openai", context=[])
    invocation, _ = proposal_admit(
        model_call=call, subject=subject, proposal_id="call_1", name=spec.ref,
        arguments_bytes=json.dumps(arguments).encode(),
    )
    return invocation


def make_staff(username: str, *, superuser: bool = False) -> User:
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.invalid", PASSWORD)
    return User.objects.create_user(username, f"{username}@example.invalid", PASSWORD, is_staff=True)


CALENDAR_ARGS = {"calendar_id": "primary", "title": "Quarterly planning", "start": "2026-07-21T09:00:00+02:00", "duration_minutes": 45}


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
