"""The confirmation console and the grants admin through Django's test client (no browser).

Covers guardian scoping (approvers see and decide only tools they hold ``approve_toolspec``
on; tenant admins grant only inside their tenants), the 403 on a forged POST, the stale-digest
refusal, the reason rules and the audit rows (events, GrantChange).
"""
from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from guardian.shortcuts import assign_perm

from invocations_app.confirmations import confirmations_expire_due
from invocations_app.models import Confirmation, Event
from specs_app.models import Grant, GrantChange
from specs_app.services import grant_create, grant_revoke
from tests.builders import (
    allow_approving, logged_in_client, make_planner, messages_of, pending_confirmation,
    CALENDAR_ARGS, admit_proposal, make_capability, make_demo_spec, make_grant, make_staff, make_subject, make_tenant,
    make_toolspec,
)

pytestmark = pytest.mark.django_db

QUEUE = "/console/confirmations/"


@pytest.fixture
def calendar():
    return make_demo_spec(name="calendar.create_event")


@pytest.fixture
def agent():
    return make_planner()


@pytest.fixture
def pending(calendar, agent) -> Confirmation:
    return pending_confirmation(subject=agent, spec=calendar, arguments=CALENDAR_ARGS)


@pytest.fixture
def approver(calendar):
    user = make_staff(username="approver")
    allow_approving(user=user, spec=calendar)
    return user


client_for = logged_in_client


def decide(client, confirmation, verb, **form):
    return client.post(f"{QUEUE}{confirmation.pk}/{verb}", {"next": QUEUE, **form}, follow=True)


# --- the queue ---------------------------------------------------------------------------------

def test_it_shows_an_approver_the_pending_call_with_readable_arguments_and_digest(pending, approver):
    resp = client_for(approver).get(QUEUE)
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "calendar.create_event@1" in html
    assert "title: Quarterly planning" in html and "calendar_id: primary" in html
    assert "start: 2026-07-21 09:00 +02:00 (Europe/Paris)" in html  # a time with its zone (approval_display)
    assert f'title="{pending.digest}"' in html, "full digest in the title attribute"
    assert f'>{pending.digest[:12]}</code>' in html, "short digest shown"
    assert f'name="digest_seen" value="{pending.digest}"' in html
    assert "planner" in html and "acme" in html and str(pending.run_id)[:8] in html
    assert [c.pk for c in resp.context["pending"]] == [pending.pk]


def test_it_reads_the_queue_in_a_constant_number_of_queries(pending, calendar, agent, approver):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = client_for(approver)
    client.get(QUEUE)  # warm the session and content-type caches
    with CaptureQueriesContext(connection) as one:
        client.get(QUEUE)
    for title in ("Retro", "1:1", "Demo"):
        admit_proposal(subject=agent, spec=calendar, arguments={**CALENDAR_ARGS, "title": title})
    with CaptureQueriesContext(connection) as four:
        assert len(client.get(QUEUE).context["pending"]) == 4
    assert len(four) == len(one), [q["sql"] for q in four.captured_queries]


def test_it_lists_pending_oldest_first_then_recently_decided(calendar, agent, approver):
    first = admit_proposal(subject=agent, spec=calendar, arguments=CALENDAR_ARGS)
    second = admit_proposal(subject=agent, spec=calendar, arguments={**CALENDAR_ARGS, "title": "Retro"})
    third = admit_proposal(subject=agent, spec=calendar, arguments={**CALENDAR_ARGS, "title": "1:1"})
    decided = Confirmation.objects.get(invocation=second)
    assert decide(client_for(approver), decided, "deny", reason="duplicate").status_code == 200
    resp = client_for(approver).get(QUEUE)
    assert [c.invocation_id for c in resp.context["pending"]] == [first.pk, third.pk]
    assert [c.pk for c in resp.context["decided"]] == [decided.pk]


def test_it_shows_an_empty_queue_to_staff_without_the_guardian_permission(pending):
    stranger = make_staff(username="stranger")
    resp = client_for(stranger).get(QUEUE)
    assert resp.status_code == 200
    assert resp.context["pending"] == [] and resp.context["decided"] == []
    assert 'data-testid="queue-empty"' in resp.content.decode()
    assert pending.digest not in resp.content.decode()
    assert client_for(stranger).get(f"{QUEUE}count.json").json() == {"pending": 0}


def test_it_scopes_by_tool_version_not_by_model_permission(pending, calendar, agent):
    other = make_demo_spec(name="weather.get_forecast")
    user = make_staff(username="weather-approver")
    allow_approving(user=user, spec=other)
    assert client_for(user).get(QUEUE).context["pending"] == []
    assert client_for(user).get(f"{QUEUE}{pending.pk}/").status_code == 403


def test_it_refuses_a_direct_post_without_the_permission_and_changes_nothing(pending):
    stranger = make_staff(username="stranger")
    client = client_for(stranger)
    for verb in ("approve", "deny"):
        resp = client.post(f"{QUEUE}{pending.pk}/{verb}", {"digest_seen": pending.digest, "reason": "forged"})
        assert resp.status_code == 404, verb  # no rights in its tenant: not even told it exists
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.decided_by is None
    assert pending.invocation.state == "AUTHORIZED"
    assert not Event.objects.filter(invocation=pending.invocation, kind__startswith="confirmation_").exclude(
        kind="confirmation_requested"
    ).exists()


def test_it_lets_superusers_see_and_decide_everything(pending):
    boss = make_staff(username="boss", superuser=True)
    assert [c.pk for c in client_for(boss).get(QUEUE).context["pending"]] == [pending.pk]
    resp = decide(client_for(boss), pending, "approve", digest_seen=pending.digest)
    assert resp.status_code == 200
    pending.invocation.refresh_from_db()
    assert pending.invocation.state == "PREPARED"


def test_it_requires_a_staff_login(pending):
    anonymous = Client()
    resp = anonymous.get(QUEUE)
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    resp = anonymous.post(f"{QUEUE}{pending.pk}/approve", {"digest_seen": pending.digest})
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    from django.contrib.auth.models import User

    civilian = User.objects.create_user("civilian", password="x")
    allow_approving(user=civilian, spec=pending.tool_spec)
    resp = client_for(civilian).post(f"{QUEUE}{pending.pk}/approve", {"digest_seen": pending.digest})
    assert resp.status_code == 302 and "/login/" in resp["Location"]
    pending.refresh_from_db()
    assert pending.state == "pending"


def test_it_enforces_csrf_on_decisions(pending, approver):
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    resp = client.post(f"{QUEUE}{pending.pk}/approve", {"digest_seen": pending.digest})
    assert resp.status_code == 403
    pending.refresh_from_db()
    assert pending.state == "pending"


def test_it_answers_get_on_a_decision_url_with_405(pending, approver):
    assert client_for(approver).get(f"{QUEUE}{pending.pk}/approve").status_code == 405


# --- decisions ---------------------------------------------------------------------------------

def test_it_approves_the_digest_and_the_invocation_is_prepared(pending, approver):
    resp = decide(client_for(approver), pending, "approve", digest_seen=pending.digest, reason="planned with the team")
    assert resp.status_code == 200
    assert any("Approved calendar.create_event@1" in m and "PREPARED" in m for m in messages_of(resp))
    pending.refresh_from_db()
    assert (pending.state, pending.decided_by, pending.reason) == ("approved", approver, "planned with the team")
    assert pending.invocation.state == "PREPARED"
    event = Event.objects.get(invocation=pending.invocation, kind="confirmation_approved")
    assert event.actor == "user:approver"
    assert event.data["digest"] == pending.digest and event.data["reason"] == "planned with the team"


def test_it_refuses_a_stale_digest_with_a_message_and_changes_nothing(pending, approver):
    resp = decide(client_for(approver), pending, "approve", digest_seen="0" * 64)
    assert resp.status_code == 200
    assert resp.redirect_chain[-1][0] == f"{QUEUE}{pending.pk}/", "back to the detail page to review"
    [message] = messages_of(resp)
    assert "Not approved" in message and "000000000000" in message and pending.digest[:12] in message
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.invocation.state == "AUTHORIZED"


def test_it_requires_a_reason_to_deny(pending, approver):
    resp = decide(client_for(approver), pending, "deny", reason="   ")
    assert any("a reason is required" in m for m in messages_of(resp))
    pending.refresh_from_db()
    assert pending.state == "pending" and pending.invocation.state == "AUTHORIZED"


def test_it_denies_with_a_reason_and_the_invocation_is_rejected(pending, approver):
    resp = decide(client_for(approver), pending, "deny", reason="not this quarter")
    assert any(m.startswith("Denied") for m in messages_of(resp))
    pending.refresh_from_db()
    assert (pending.state, pending.reason, pending.decided_by) == ("denied", "not this quarter", approver)
    assert pending.invocation.state == "AUTHORIZATION_REJECTED"
    assert pending.invocation.error_code == "confirmation_denied"
    event = Event.objects.get(invocation=pending.invocation, kind="confirmation_denied")
    assert event.actor == "user:approver" and event.data["reason"] == "not this quarter"


def test_it_reports_a_confirmation_that_was_already_decided(pending, approver):
    client = client_for(approver)
    decide(client, pending, "approve", digest_seen=pending.digest)
    resp = decide(client, pending, "deny", reason="too late")
    assert any("already approved by approver" in m for m in messages_of(resp))
    pending.refresh_from_db()
    assert pending.state == "approved" and pending.invocation.state == "PREPARED"


def test_it_lists_a_confirmation_expired_by_the_beat_task_among_the_decided(pending, approver):
    Confirmation.objects.filter(pk=pending.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    resp = client_for(approver).get(QUEUE)
    assert resp.context["pending"] == [] and resp.context["decided"] == []  # overdue: not offered, not expired by a read
    confirmations_expire_due()
    resp = client_for(approver).get(QUEUE)
    assert [c.state for c in resp.context["decided"]] == ["expired"]
    pending.invocation.refresh_from_db()
    assert pending.invocation.state == "CANCELLED_BEFORE_COMMIT"


def test_it_shows_the_detail_page_with_the_full_digest_and_the_timeline(pending, approver):
    resp = client_for(approver).get(f"{QUEUE}{pending.pk}/")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert f'data-testid="digest">{pending.digest}</code>' in html
    assert pending.arguments["title"] == "Quarterly planning"
    assert 'data-field="title"><th>title</th>' in html and 'data-testid="argument-value">Quarterly planning<' in html
    assert "confirmation_requested" in html
    assert f'name="digest_seen" value="{pending.digest}"' in html


# --- filters and the live count ------------------------------------------------------------------

def test_it_filters_by_tool_and_tenant(pending, calendar, approver):
    other_tenant = make_subject(tenant=make_tenant(slug="globex"), name="assistant")
    make_grant(subject=other_tenant, capability="calendar.write", operation_class="create")
    other = Confirmation.objects.get(invocation=admit_proposal(subject=other_tenant, spec=calendar, arguments=CALENDAR_ARGS))
    client = client_for(approver)
    assert {c.pk for c in client.get(QUEUE).context["pending"]} == {pending.pk, other.pk}
    assert [c.pk for c in client.get(QUEUE, {"tenant": "globex"}).context["pending"]] == [other.pk]
    assert [c.pk for c in client.get(QUEUE, {"tool": calendar.pk, "tenant": "acme"}).context["pending"]] == [pending.pk]
    assert client.get(QUEUE, {"tool": calendar.pk + 100}).context["pending"] == []
    assert client.get(QUEUE, {"tool": "nonsense"}).status_code == 200
    assert client.get(f"{QUEUE}count.json", {"tenant": "globex"}).json() == {"pending": 1}
    html = client.get(QUEUE).content.decode()
    assert re.search(r'<option value="globex"\s*>globex</option>', html)


def test_it_counts_pending_confirmations_as_json(pending, approver):
    resp = client_for(approver).get(f"{QUEUE}count.json")
    assert resp["Content-Type"] == "application/json"
    assert "no-cache" in resp["Cache-Control"] or "no-store" in resp["Cache-Control"]
    assert resp.json() == {"pending": 1}


def test_it_links_the_queue_from_the_admin_index(pending, approver):
    html = client_for(approver).get("/").content.decode()
    assert 'data-testid="queue-link"' in html and reverse("confirmations:count") in html


# --- grants admin ----------------------------------------------------------------------------------

GRANT_ADD = "/specs_app/grant/add/"


def grant_form(**overrides) -> dict:
    form = {
        "scope_kind": "any", "scope_values": "[]", "limits": "{}", "effect": "allow", "tool_refs": "[]",
        "expires_at_0": "", "expires_at_1": "", "reason": "needed for the weekly report",
    }
    form.update(overrides)
    return form


@pytest.fixture
def weather():
    return make_toolspec()  # weather.get_forecast@1, needs weather.read


def test_it_creates_a_grant_pinned_to_the_current_versions_with_a_grant_change(weather, agent):
    boss = make_staff(username="boss", superuser=True)
    capability = make_capability(name="weather.read")
    resp = client_for(boss).post(GRANT_ADD, grant_form(capability=capability.pk, tenant=agent.tenant_id, subject=agent.pk))
    assert resp.status_code == 302, resp.context["adminform"].form.errors if resp.context else resp
    grant = Grant.objects.get(capability=capability)
    assert (grant.subject, grant.granted_by, grant.tool_refs) == (agent, boss, ["weather.get_forecast@1"])
    change = GrantChange.objects.get(grant=grant)
    assert (change.action, change.actor, change.reason) == ("granted", boss, "needed for the weekly report")
    assert change.data["tool_refs"] == ["weather.get_forecast@1"]


def test_it_requires_a_reason_and_valid_limits_for_a_grant(weather, agent):
    boss = make_staff(username="boss", superuser=True)
    capability = make_capability(name="weather.read")
    base = {"capability": capability.pk, "tenant": agent.tenant_id, "subject": agent.pk}
    resp = client_for(boss).post(GRANT_ADD, grant_form(**base, reason="  "))
    assert resp.status_code == 200 and "reason" in resp.context["adminform"].form.errors
    resp = client_for(boss).post(GRANT_ADD, grant_form(**base, limits='{"calls_per_hour": 5}'))
    assert "unknown limit keys: calls_per_hour" in str(resp.context["adminform"].form.errors["limits"])
    resp = client_for(boss).post(GRANT_ADD, grant_form(**base, scope_kind="exact", scope_values="[]"))
    assert "scope_values" in resp.context["adminform"].form.errors
    unused = make_capability(name="files.delete", operation_class="delete")
    resp = client_for(boss).post(GRANT_ADD, grant_form(**{**base, "capability": unused.pk}))
    assert "no published tool needs files.delete" in str(resp.context["adminform"].form.errors["tool_refs"])
    other_subject = make_subject(tenant=make_tenant(slug="elsewhere"))
    resp = client_for(boss).post(GRANT_ADD, grant_form(**{**base, "subject": other_subject.pk}))
    assert "subject" in resp.context["adminform"].form.errors
    assert not Grant.objects.filter(capability=capability).exists() and not GrantChange.objects.exists()


@pytest.fixture
def tenant_admin(agent):
    user = make_staff(username="acme-admin")
    assign_perm("specs_app.manage_grants_tenant", user, agent.tenant)
    return user


def test_it_limits_a_tenant_admin_to_grants_of_their_tenant(weather, agent, tenant_admin):
    other = make_subject(tenant=make_tenant(slug="globex"), name="globex-bot")
    theirs = make_grant(subject=agent)
    not_theirs = make_grant(subject=other)
    client = client_for(tenant_admin)
    listing = client.get("/specs_app/grant/")
    assert listing.status_code == 200
    shown = {g.pk for g in listing.context["cl"].result_list}
    assert theirs.pk in shown and not_theirs.pk not in shown
    assert shown == set(Grant.objects.filter(tenant=agent.tenant).values_list("pk", flat=True))
    assert client.get(f"/specs_app/grant/{not_theirs.pk}/change/").status_code == 302  # "does not exist" → index
    form = client.get(GRANT_ADD).context["adminform"].form
    assert list(form.fields["tenant"].queryset) == [agent.tenant]
    assert list(form.fields["subject"].queryset) == [agent]
    capability = make_capability(name="weather.read")
    resp = client.post(GRANT_ADD, grant_form(capability=capability.pk, tenant=other.tenant_id, subject=other.pk))
    assert resp.status_code == 200 and {"tenant", "subject"} <= set(resp.context["adminform"].form.errors)
    resp = client.post(GRANT_ADD, grant_form(capability=capability.pk, tenant=agent.tenant_id, subject=""))
    assert resp.status_code == 302
    assert Grant.objects.filter(tenant=agent.tenant, subject=None, granted_by=tenant_admin).count() == 1
    assert Grant.objects.filter(tenant=other.tenant).count() == 1


def test_it_rechecks_the_tenant_in_the_service(agent, tenant_admin):
    other = make_tenant(slug="globex")
    capability = make_capability(name="weather.read")
    with pytest.raises(PermissionDenied):
        grant_create(user=tenant_admin, capability=capability, tenant=other, subject=None, scope_kind="any",
                     scope_values=[], limits={}, effect="allow", tool_refs=[], expires_at=None, reason="sneaky")
    grant = make_grant(subject=make_subject(tenant=other))
    with pytest.raises(PermissionDenied):
        grant_revoke(grant=grant, user=tenant_admin, reason="sneaky")
    assert not GrantChange.objects.exists() and Grant.objects.get(pk=grant.pk).revoked_at is None


def test_it_keeps_the_grants_admin_from_staff_without_a_tenant(agent):
    make_grant(subject=agent)
    client = client_for(make_staff(username="nobody"))
    assert client.get("/specs_app/grant/").status_code == 403
    assert client.get(GRANT_ADD).status_code == 403


def test_it_revokes_with_a_reason_through_the_action(agent, tenant_admin):
    grant = make_grant(subject=agent)
    client = client_for(tenant_admin)
    action = {"action": "revoke", "_selected_action": [str(grant.pk)], "index": "0"}
    resp = client.post("/specs_app/grant/", {**action, "reason": ""}, follow=True)
    assert any("type a reason" in m for m in messages_of(resp))
    assert Grant.objects.get(pk=grant.pk).revoked_at is None
    resp = client.post("/specs_app/grant/", {**action, "reason": "contract ended"}, follow=True)
    assert any("Revoked 1 grant(s)" in m for m in messages_of(resp))
    grant.refresh_from_db()
    assert (grant.revoked_by, grant.revoke_reason) == (tenant_admin, "contract ended") and grant.revoked_at
    resp = client.post("/specs_app/grant/", {**action, "reason": "again"}, follow=True)
    assert any("1 already revoked" in m for m in messages_of(resp))
    assert list(GrantChange.objects.filter(grant=grant).values_list("action", "actor__username", "reason")) == [
        ("revoked", "acme-admin", "contract ended")
    ]


def test_it_edits_only_the_expiry_and_records_it(agent, tenant_admin):
    grant = make_grant(subject=agent)
    client = client_for(tenant_admin)
    url = f"/specs_app/grant/{grant.pk}/change/"
    form = client.get(url).context["adminform"].form
    assert set(form.fields) == {"expires_at", "change_reason"}
    # The read-only audit inline still posts its management form, as the browser does.
    post = {"expires_at_0": "2031-01-01", "expires_at_1": "00:00:00", "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0", "changes-MIN_NUM_FORMS": "0", "changes-MAX_NUM_FORMS": "0"}
    resp = client.post(url, {**post, "change_reason": ""})
    assert resp.status_code == 200 and "change_reason" in resp.context["adminform"].form.errors
    resp = client.post(url, {**post, "change_reason": "extended by contract"})
    assert resp.status_code == 302
    grant.refresh_from_db()
    assert grant.expires_at.isoformat() == "2031-01-01T00:00:00+00:00"
    change = GrantChange.objects.get(grant=grant)
    assert (change.action, change.actor, change.reason) == ("edited", tenant_admin, "extended by contract")
    assert change.data == {"field": "expires_at", "from": None, "to": "2031-01-01T00:00:00+00:00"}
    assert "extended by contract" in client.get(url).content.decode(), "the audit trail is on the grant page"


def test_it_never_deletes_a_grant(agent):
    grant = make_grant(subject=agent)
    boss = client_for(make_staff(username="boss", superuser=True))
    assert boss.get(f"/specs_app/grant/{grant.pk}/delete/").status_code == 403
    assert boss.post(f"/specs_app/grant/{grant.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Grant.objects.filter(pk=grant.pk).exists()


def test_it_shows_capabilities_in_the_admin():
    make_capability(name="calendar.write", operation_class="create")
    boss = client_for(make_staff(username="boss", superuser=True))
    resp = boss.get("/specs_app/capability/")
    assert resp.status_code == 200 and "calendar.write" in resp.content.decode()
    assert json.loads(boss.get(f"{QUEUE}count.json").content) == {"pending": 0}
