"""Every console page works under the Content-Security-Policy: Chromium reports no violation.

The policy (settings.CONTENT_SECURITY_POLICY) allows scripts only from our origin or with the
response's nonce; each page is loaded as a superuser, its scripts run (the live counters poll),
and both the console log and ``securitypolicyviolation`` events are collected.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from invocations_app.models import Confirmation
from tests.builders import CALENDAR_ARGS, admit_proposal, make_demo_spec, make_staff
from tests.builders import make_grant, make_subject, make_tenant

pytestmark = pytest.mark.browser

COLLECT_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`));
"""


@pytest.fixture
def pending() -> Confirmation:
    calendar = make_demo_spec(name="calendar.create_event")
    subject = make_subject(tenant=make_tenant(slug="acme"), name="planner")
    make_grant(subject=subject, capability="calendar.write", operation_class="create", scope_kind="exact", scope_values=["primary"])
    invocation = admit_proposal(subject=subject, spec=calendar, arguments=CALENDAR_ARGS)
    return Confirmation.objects.get(invocation=invocation, state="pending")


def _console_pages(pending: Confirmation) -> list[str]:
    inv = pending.invocation_id
    return [
        "/", "/console/", "/console/confirmations/", f"/console/confirmations/{pending.pk}/",
        "/console/unknown-outcomes/", f"/console/calls/{inv}/",
        "/invocations_app/invocation/", f"/invocations_app/invocation/{inv}/change/", "/invocations_app/run/",
        "/specs_app/toolspec/", "/specs_app/toolspec/add/", "/specs_app/grant/", "/specs_app/grant/add/",
        "/specs_app/subject/add/", "/auth/user/", "/api/docs/",
    ]


def test_no_console_page_violates_the_content_security_policy(page, live_server, login, pending):
    page.add_init_script(COLLECT_VIOLATIONS)
    messages: list[str] = []
    page.on("console", lambda msg: messages.append(f"{msg.type}: {msg.text}"))
    page.on("pageerror", lambda exc: messages.append(f"pageerror: {exc}"))

    page.goto(f"{live_server.url}/login/")
    assert "script-src 'self'" in page.context.request.get(f"{live_server.url}/login/").headers["content-security-policy"]
    admin_user = make_staff(username="root", superuser=True)
    login(admin_user)
    visited = {}
    for path in _console_pages(pending):
        response = page.goto(live_server.url + path)
        assert response.status == 200, (path, response.status)
        page.wait_for_load_state("networkidle")
        visited[path] = page.evaluate("window.__csp")

    # Scripts did run under the policy: the index's live counter and the queue's countdown.
    page.goto(live_server.url + "/console/confirmations/")
    expect(page.get_by_test_id("time-left").first).to_contain_text("min")
    page.goto(live_server.url + "/api/docs/")
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("ToolOps API", timeout=15_000)
    expect(page.locator("#swagger-ui .opblock").first).to_be_visible()

    violations = {path: v for path, v in visited.items() if v}
    csp_messages = [m for m in messages if "Content Security Policy" in m or "Content-Security-Policy" in m]
    assert not violations and not csp_messages, (violations, csp_messages)
    assert not [m for m in messages if m.startswith("pageerror")], messages
    assert User.objects.filter(username="root").exists()
