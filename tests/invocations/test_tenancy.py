"""Tenancy in the staff console: approvers and resolvers act per (tenant, ToolSpec), the dashboard per tenant.

Two tenants, ``acme`` and ``globex``, call the same global ToolSpecs. A person holding the tool
permission plus ``approve_calls`` / ``resolve_calls`` / ``view_calls`` on acme sees and decides
acme's calls only — in the queues, the count badges, the detail and record pages, the decision
POSTs and the dashboard — and another tenant's rows answer 404 (not even confirmed to exist).
"""
from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import Http404
from guardian.shortcuts import assign_perm
from rest_framework.test import APIClient

from control.selectors import (
    confirmation_get_for_user, confirmation_pending_count, confirmations_visible_to, record_visible_to,
    unknown_outcomes_visible_to,
)
from invocations_app.models import Confirmation, Event, StandingApproval
from invocations_app.standing_approvals import standing_approval_grant
from specs_app.services import personal_token_issue
from tests.builders import (
    CALENDAR_ARGS, Agent, admit_proposal, allow_approving, allow_resolving, make_demo_spec, make_grant, make_staff,
    make_subject, make_tenant,
)
from tests.control.test_support_console import PAYMENT_ARGS, client_for, make_finance_agent, make_unknown

pytestmark = pytest.mark.django_db

QUEUE = "/console/confirmations/"
UNKNOWN = "/console/unknown-outcomes/"


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def calendar():
    return make_demo_spec(name="calendar.create_event")


def planner(tenant_slug: str):
    subject = make_subject(tenant=make_tenant(slug=tenant_slug), name="planner")
    make_grant(subject=subject, capability="calendar.write", operation_class="create")
    return subject


@pytest.fixture
def acme():
    return planner("acme")


@pytest.fixture
def globex():
    return planner("globex")


def pending_of(subject, spec) -> Confirmation:
    invocation = admit_proposal(subject=subject, spec=spec, arguments=CALENDAR_ARGS)
    assert invocation.state == "AUTHORIZED", invocation.error_message
    return Confirmation.objects.get(invocation=invocation, state="pending")


@pytest.fixture
def pending_acme(acme, calendar):
    return pending_of(acme, calendar)


@pytest.fixture
def pending_globex(globex, calendar):
    return pending_of(globex, calendar)


@pytest.fixture
def acme_approver(calendar, acme):
    user = make_staff(username="acme-approver")
    allow_approving(user=user, spec=calendar, tenant=acme.tenant)
    return user


# --- the confirmation queue -----------------------------------------------------------------------

def test_it_shows_a_tenant_approver_only_that_tenants_confirmations(pending_acme, pending_globex, acme_approver):
    client = client_for(acme_approver)
    resp = client.get(QUEUE)
    assert [c.pk for c in resp.context["pending"]] == [pending_acme.pk]
    assert str(pending_globex.pk) not in resp.content.decode()
    assert client.get(f"{QUEUE}count.json").json() == {"pending": 1}
    assert list(confirmations_visible_to(user=acme_approver)) == [pending_acme]
    assert confirmation_pending_count(user=acme_approver) == 1


def test_it_answers_404_for_another_tenants_confirmation_and_changes_nothing(pending_acme, pending_globex, acme_approver):
    client = client_for(acme_approver)
    assert client.get(f"{QUEUE}{pending_globex.pk}/").status_code == 404
    for verb in ("approve", "deny"):
        resp = client.post(f"{QUEUE}{pending_globex.pk}/{verb}", {"digest_seen": pending_globex.digest, "reason": "not mine"})
        assert resp.status_code == 404, verb
    pending_globex.refresh_from_db()
    assert pending_globex.state == "pending" and pending_globex.decided_by is None
    with pytest.raises(Http404):
        confirmation_get_for_user(user=acme_approver, pk=pending_globex.pk)
    assert confirmation_get_for_user(user=acme_approver, pk=pending_acme.pk) == pending_acme


def test_it_lets_the_tenant_approver_decide_its_own_tenants_call(pending_acme, acme_approver, monkeypatch):
    monkeypatch.setattr("invocations_app.dispatch.execution_send", lambda *a, **k: None)  # no worker here
    resp = client_for(acme_approver).post(f"{QUEUE}{pending_acme.pk}/approve",
                                          {"digest_seen": pending_acme.digest, "reason": "expected", "next": QUEUE})
    assert resp.status_code == 302
    pending_acme.refresh_from_db()
    assert pending_acme.state == "approved" and pending_acme.decided_by == acme_approver


def test_the_tool_permission_alone_decides_nothing(pending_acme, calendar):
    """Holding approve_toolspec without approve_calls on any tenant (what a pre-tenancy grant
    made after the data migration would look like) shows nothing."""
    user = make_staff(username="tool-only")
    assign_perm("specs_app.approve_toolspec", user, calendar)
    assert client_for(user).get(f"{QUEUE}count.json").json() == {"pending": 0}
    assert client_for(user).get(f"{QUEUE}{pending_acme.pk}/").status_code == 404


def test_the_tenant_permission_alone_decides_nothing(pending_acme, acme):
    """approve_calls on the tenant without the tool's permission: the row is in one of the
    user's tenants, so it is 403 (not 404) and stays undecided."""
    user = make_staff(username="tenant-only")
    assign_perm("specs_app.approve_calls", user, acme.tenant)
    assert list(confirmations_visible_to(user=user)) == []
    with pytest.raises(PermissionDenied):
        confirmation_get_for_user(user=user, pk=pending_acme.pk)


def test_a_model_wide_tenant_permission_covers_every_tenant(pending_acme, pending_globex, calendar):
    user = make_staff(username="platform-approver")
    allow_approving(user=user, spec=calendar)  # approve_calls model-wide
    assert {c.pk for c in confirmations_visible_to(user=user)} == {pending_acme.pk, pending_globex.pk}


def test_a_superuser_sees_every_tenant(pending_acme, pending_globex):
    root = make_staff(username="root", superuser=True)
    assert client_for(root).get(f"{QUEUE}count.json").json() == {"pending": 2}


# --- standing approvals -----------------------------------------------------------------------------

@pytest.fixture
def acme_standing(pending_acme, acme_approver):
    return standing_approval_grant(confirmation=pending_acme, user=acme_approver, minutes=30, max_amount=None,
                                   max_calls=None, reason="the day's bookings")


@pytest.fixture
def globex_approver(calendar, globex):
    """An approver of the same tool, in the other tenant."""
    user = make_staff(username="globex-approver")
    allow_approving(user=user, spec=calendar, tenant=globex.tenant)
    return user


def over_the_api(user) -> Agent:
    """``user``'s Approvals API client (a personal token)."""
    return Agent(APIClient(), personal_token_issue(user=user, label="test")[1])


def assert_untouched(standing: StandingApproval) -> None:
    standing.refresh_from_db()
    assert standing.revoked_at is None and standing.revoked_by is None and standing.revoke_reason == ""
    assert not Event.objects.filter(kind="standing_approval_revoked").exists()


def test_another_tenants_approver_cannot_revoke_a_standing_approval_over_the_api(acme_standing, globex_approver):
    """The same tool permission in another tenant: 404, as for that tenant's confirmations, and
    nothing of the standing approval (who revoked, calls covered) is disclosed."""
    resp = over_the_api(globex_approver).post(f"/api/v1/standing-approvals/{acme_standing.pk}/revoke", {"reason": "probe"})
    assert resp.status_code == 404 and resp.json()["code"] == "not_found", resp.content
    assert "calls_covered" not in resp.json() and "revoked_by" not in resp.json()
    assert_untouched(acme_standing)


def test_another_tenants_approver_cannot_revoke_a_standing_approval_in_the_console(acme_standing, globex_approver):
    resp = client_for(globex_approver).post(f"/console/confirmations/standing/{acme_standing.pk}/revoke", {"reason": "probe"})
    assert resp.status_code == 404
    assert_untouched(acme_standing)


def test_the_tenants_own_approver_revokes_its_standing_approval(acme_standing, acme_approver):
    resp = over_the_api(acme_approver).post(f"/api/v1/standing-approvals/{acme_standing.pk}/revoke", {"reason": "done"})
    assert resp.status_code == 200 and resp.json()["revoked_by"] == "acme-approver", resp.content


def test_a_tenant_approver_without_the_tools_permission_is_refused_403(acme_standing, acme):
    """In one of the user's tenants, the row may be known to exist, not revoked."""
    user = make_staff(username="acme-other-tool")
    assign_perm("specs_app.approve_calls", user, acme.tenant)
    resp = over_the_api(user).post(f"/api/v1/standing-approvals/{acme_standing.pk}/revoke", {"reason": "probe"})
    assert resp.status_code == 403 and resp.json()["code"] == "forbidden"
    assert_untouched(acme_standing)


# --- unknown outcomes and the record page ------------------------------------------------------------

@pytest.fixture
def payments():
    return make_demo_spec(name="payments.transfer")


@pytest.fixture
def unknowns(payments):
    return (make_unknown(make_finance_agent(tenant_slug="acme"), payments, PAYMENT_ARGS),
            make_unknown(make_finance_agent(tenant_slug="globex"), payments, PAYMENT_ARGS))


def test_a_tenant_resolver_sees_and_resolves_only_that_tenants_unknown_outcomes(unknowns, payments):
    mine, theirs = unknowns
    user = make_staff(username="acme-support")
    allow_resolving(user=user, spec=payments, tenant=mine.tenant)
    client = client_for(user)
    assert [inv.pk for inv in client.get(UNKNOWN).context["rows"]] == [mine.pk]
    assert client.get(f"{UNKNOWN}count.json").json() == {"unknown": 1}
    assert list(unknown_outcomes_visible_to(user=user)) == [mine]
    seq = theirs.event_seq
    resp = client.post(f"{UNKNOWN}{theirs.pk}/mark-not-committed", {"reason": "not mine", "evidence": "x"})
    assert resp.status_code == 404
    theirs.refresh_from_db()
    assert theirs.state == "OUTCOME_UNKNOWN" and theirs.event_seq == seq
    assert not Event.objects.filter(invocation=theirs, actor=f"user:{user.username}").exists()


def test_the_record_page_is_limited_to_the_users_tenants(unknowns, payments):
    mine, theirs = unknowns
    resolver = make_staff(username="acme-support")
    allow_resolving(user=resolver, spec=payments, tenant=mine.tenant)
    viewer = make_staff(username="acme-viewer")
    assign_perm("specs_app.view_calls", viewer, mine.tenant)
    for user in (resolver, viewer):
        client = client_for(user)
        assert client.get(f"/console/calls/{mine.pk}/").status_code == 200, user
        assert client.get(f"/console/calls/{theirs.pk}/").status_code == 404, user
        assert record_visible_to(user=user, invocation=mine) and not record_visible_to(user=user, invocation=theirs)


# --- the dashboard -----------------------------------------------------------------------------------

def _testid(page: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}"[^>]*>(.*?)<', page, re.S)
    assert match, f"no element with data-testid={testid}"
    return match.group(1).strip()


def test_the_dashboard_counts_only_the_users_tenants(pending_acme, pending_globex, calendar, acme, globex):
    pending_of(globex, make_demo_spec(name="calendar.create_event", version=2))
    viewer = make_staff(username="acme-viewer")
    assign_perm("specs_app.view_calls", viewer, acme.tenant)
    page = client_for(viewer).get("/console/").content.decode()
    assert _testid(page, "pending-count") == "1"
    assert "calendar.create_event@2" not in page  # only globex called version 2
    root_page = client_for(make_staff(username="root", superuser=True)).get("/console/").content.decode()
    assert _testid(root_page, "pending-count") == "3"
    # The same process serves both from its cache without mixing them up.
    assert _testid(client_for(viewer).get("/console/").content.decode(), "pending-count") == "1"


def test_the_dashboard_refuses_staff_without_a_tenant(pending_acme):
    assert client_for(make_staff(username="nobody")).get("/console/").status_code == 403
