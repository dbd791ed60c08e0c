"""People and roles per tenant (issue 32): roles are guardian permission sets; the People pages."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from guardian.shortcuts import assign_perm

from invocations_app.approvers import may_approve
from specs_app.models import RoleChange
from specs_app.people import assign_role, person_add, remove_role, roles_of, tenant_roster
from worker.support import resolvable_toolspecs
from tests.builders import PASSWORD, make_demo_spec, make_staff, make_tenant, make_toolspec

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def acme():
    return make_tenant(slug="acme")


@pytest.fixture
def tools(acme):
    """Two tools of acme (one global, one its own) and one of another tenant."""
    other = make_tenant(slug="globex")
    return (make_demo_spec(name="calendar.create_event"), make_toolspec(name="acme.crm", tenant=acme),
            make_toolspec(name="globex.crm", tenant=other))


@pytest.fixture
def admin_of_acme(acme):
    user = make_staff(username="ada")
    assign_perm("specs_app.manage_grants_tenant", user, acme)
    return user


def test_an_approver_of_one_tool_passes_the_existing_approval_check_for_that_tool_only(acme, tools, admin_of_acme):
    calendar, crm, _ = tools
    bob = get_user_model().objects.create_user("bob", "bob@example.invalid", PASSWORD)
    assign_role(actor=admin_of_acme, tenant=acme, person=bob, role="approver", tools=[calendar], reason="on call")
    bob.refresh_from_db()
    assert bob.is_staff
    assert may_approve(user=bob, tenant_id=acme.pk, tool_spec_id=calendar.pk)
    assert not may_approve(user=bob, tenant_id=acme.pk, tool_spec_id=crm.pk)
    [holding] = roles_of(tenant=acme, person=bob)
    assert holding.role.key == "approver" and [t.ref for t in holding.tools] == [calendar.ref]
    change = RoleChange.objects.get()
    assert (change.action, change.role, change.actor, change.person, change.tools, change.reason) == (
        "assigned", "approver", admin_of_acme, bob, [calendar.ref], "on call")


def test_support_of_every_tool_covers_all_the_tenants_tools_and_removing_it_takes_them_back(acme, tools, admin_of_acme):
    calendar, crm, foreign = tools
    sue = make_staff(username="sue")
    assign_role(actor=admin_of_acme, tenant=acme, person=sue, role="support")
    assert set(resolvable_toolspecs(user=sue)) == {calendar, crm}
    [holding] = roles_of(tenant=acme, person=sue)
    assert holding.tools is None  # every tool
    assert remove_role(actor=admin_of_acme, tenant=acme, person=sue, role="support", reason="left") is True
    assert roles_of(tenant=acme, person=sue) == []
    assert not resolvable_toolspecs(user=sue).exists()
    assert remove_role(actor=admin_of_acme, tenant=acme, person=sue, role="support") is False
    assert list(RoleChange.objects.order_by("at").values_list("action", flat=True)) == ["assigned", "removed"]


def test_a_global_tools_permission_stays_while_the_person_approves_it_in_another_tenant(acme, tools, admin_of_acme):
    calendar, _, _ = tools
    globex = make_tenant(slug="initech")
    root = make_staff(username="root", superuser=True)
    bob = make_staff(username="bob")
    assign_role(actor=root, tenant=acme, person=bob, role="approver", tools=[calendar])
    assign_role(actor=root, tenant=globex, person=bob, role="approver", tools=[calendar])
    remove_role(actor=admin_of_acme, tenant=acme, person=bob, role="approver")
    assert may_approve(user=bob, tenant_id=globex.pk, tool_spec_id=calendar.pk)
    assert not may_approve(user=bob, tenant_id=acme.pk, tool_spec_id=calendar.pk)


def test_only_tenant_admins_name_people_and_never_with_another_tenants_tool(acme, tools, admin_of_acme):
    _, _, foreign = tools
    bob = make_staff(username="bob")
    with pytest.raises(PermissionDenied):
        assign_role(actor=bob, tenant=acme, person=bob, role="tenant_admin")
    with pytest.raises(ValidationError) as refused:
        assign_role(actor=admin_of_acme, tenant=acme, person=bob, role="approver", tools=[foreign])
    assert "globex.crm@1" in str(refused.value)
    assert not RoleChange.objects.exists() and roles_of(tenant=acme, person=bob) == []


def test_a_tenant_admin_cannot_take_their_own_admin_role(acme, tools):
    root = make_staff(username="root", superuser=True)
    ada = make_staff(username="ada")
    assign_role(actor=root, tenant=acme, person=ada, role="tenant_admin")
    with pytest.raises(ValidationError, match="your own Tenant admin role"):
        remove_role(actor=ada, tenant=acme, person=ada, role="tenant_admin")
    assert [h.role.key for h in roles_of(tenant=acme, person=ada)] == ["tenant_admin"]
    assert remove_role(actor=root, tenant=acme, person=ada, role="tenant_admin") is True


def test_a_platform_admin_named_in_a_role_is_shown_with_that_role_only(acme, tools):
    calendar, _, _ = tools
    root = make_staff(username="root", superuser=True)
    assign_role(actor=root, tenant=acme, person=root, role="approver", tools=[calendar])
    [holding] = roles_of(tenant=acme, person=root)
    assert holding.role.key == "approver" and [t.ref for t in holding.tools] == [calendar.ref]


def test_adding_a_new_person_by_email_is_atomic(acme, tools, admin_of_acme):
    calendar, _, foreign = tools
    with pytest.raises(ValidationError):
        person_add(actor=admin_of_acme, tenant=acme, role="approver", email="new@example.invalid", tools=[foreign])
    assert not get_user_model().objects.filter(username="new@example.invalid").exists()
    person, link, _ = person_add(actor=admin_of_acme, tenant=acme, role="approver", email="new@example.invalid",
                                 tools=[calendar])
    assert person.username == "new@example.invalid" and not person.has_usable_password() and link.count("/") == 2
    assert [p.user for p in tenant_roster(tenant=acme)] == [person]


# --- the console pages -------------------------------------------------------------------------

def test_from_the_tenant_page_a_new_person_is_an_approver_in_two_page_loads(client, acme, tools, admin_of_acme):
    calendar, _, _ = tools
    client.force_login(admin_of_acme)
    tenant_page = client.get("/console/tenants/acme/")
    assert tenant_page.status_code == 200
    add_url = re.search(r'href="([^"]+)" data-testid="add-person"', tenant_page.content.decode()).group(1)
    assert client.get(add_url).status_code == 200  # page load 1: the form
    answer = client.post(add_url, {"email": "carol@example.invalid", "role": "approver", "tools": [calendar.pk],
                                    "reason": "payments desk"})  # page load 2: the answer
    assert answer.status_code == 200
    body = answer.content.decode()
    assert "carol@example.invalid</strong> is now\n    Approver" in body
    link = re.search(r'data-testid="set-password-link">([^<]+)<', body).group(1)
    carol = get_user_model().objects.get(username="carol@example.invalid")
    assert may_approve(user=carol, tenant_id=acme.pk, tool_spec_id=calendar.pk)
    # The link sets the password once (Django's reset token), after which carol signs in.
    client.logout()
    form = client.get(link.split("testserver")[1], follow=True)
    set_url = form.redirect_chain[-1][0]
    done = client.post(set_url, {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert done.status_code == 302
    assert client.login(username="carol@example.invalid", password=PASSWORD)


def test_the_add_form_says_what_is_wrong_and_writes_nothing(client, acme, tools, admin_of_acme):
    client.force_login(admin_of_acme)
    answer = client.post("/console/tenants/acme/people/add", {"role": "approver"})
    assert answer.status_code == 400
    assert "choose an existing person or type the e-mail" in answer.content.decode()
    assert not RoleChange.objects.exists()


def test_other_tenants_people_pages_are_404_and_non_admins_see_none(client, acme, tools, admin_of_acme):
    make_tenant(slug="umbrella")
    client.force_login(admin_of_acme)
    assert client.get("/console/tenants/umbrella/").status_code == 404
    assert client.post("/console/tenants/umbrella/people/add", {"email": "x@example.invalid", "role": "viewer"}).status_code == 404
    approver = make_staff(username="bob")
    assign_perm("specs_app.approve_calls", approver, acme)
    client.force_login(approver)
    assert client.get("/console/tenants/acme/").status_code == 404


def test_the_tenant_page_lists_roles_and_removes_one(client, acme, tools, admin_of_acme):
    calendar, _, _ = tools
    bob = make_staff(username="bob")
    assign_role(actor=admin_of_acme, tenant=acme, person=bob, role="approver", tools=[calendar])
    client.force_login(admin_of_acme)
    body = client.get("/console/tenants/acme/").content.decode()
    assert 'data-person="bob" data-role="approver"' in body and calendar.ref in body
    assert 'data-person="ada" data-role="tenant_admin"' not in body  # ada holds only manage_grants_tenant
    answer = client.post(f"/console/tenants/acme/people/{bob.pk}/approver/remove", {"reason": "moved"})
    assert answer.status_code == 302
    assert roles_of(tenant=acme, person=bob) == []


def test_the_profile_says_what_an_approver_may_decide(client, acme, tools, admin_of_acme):
    calendar, crm, _ = tools
    bob = make_staff(username="bob")
    assign_role(actor=admin_of_acme, tenant=acme, person=bob, role="approver", tools=[calendar])
    client.force_login(bob)
    body = client.get("/console/profile/").content.decode()
    decide = body.split('data-testid="may-decide"')[1].split("</div>")[0]
    assert "Acme" in decide and calendar.ref in decide and crm.ref not in decide


# --- landing by role, no "You don't have permission", no plumbing lists ----------------------

NO_PERMISSION = "have permission to view or edit anything"
# The model lists that are plumbing, by their list's link (the index and sidebar rows).
PLUMBING = ('href="/invocations_app/webhookdelivery/"', 'href="/invocations_app/modelcall/"', 'href="/specs_app/apitoken/"',
            'href="/specs_app/upstreamtool/"', 'href="/specs_app/personaltoken/"')


def sign_in(client, user) -> str:
    """Sign in through the login form as a person does; the page they land on (its path)."""
    client.logout()
    page = client.get("/login/")
    assert page.status_code == 200
    landed = client.post("/login/", {"username": user.username, "password": PASSWORD,
                                     "next": page.context["next"]}, follow=True)
    assert landed.status_code == 200
    return landed.redirect_chain[-1][0], landed.content.decode()


@pytest.mark.parametrize("role, landing", [
    ("approver", "/console/confirmations/"),
    ("support", "/console/unknown-outcomes/"),
    ("tenant_admin", "/console/tenants/acme/"),
    ("viewer", "/console/"),
])
def test_each_role_lands_on_its_page_and_sees_no_permission_refusal_nor_plumbing(client, acme, tools, admin_of_acme, role,
                                                                                landing):
    person = make_staff(username=f"p-{role}")
    assign_role(actor=admin_of_acme, tenant=acme, person=person, role=role)
    where, body = sign_in(client, person)
    assert where == landing
    index = client.get("/").content.decode()
    for page in (body, index):
        assert NO_PERMISSION not in page
        assert not [name for name in PLUMBING if name in page]


def test_an_explicit_next_is_kept_and_a_platform_admin_lands_on_the_index_with_every_list(client, acme, tools):
    root = make_staff(username="root", superuser=True)
    where, body = sign_in(client, root)
    assert where == "/"
    assert all(name in body for name in PLUMBING)
    assert ">Webhook deliveries<" in body and ">API tokens<" in body and "deliverys" not in body
    client.logout()
    answer = client.post("/login/?next=/console/profile/", {"username": "root", "password": PASSWORD}, follow=True)
    assert answer.redirect_chain[-1][0] == "/console/profile/"


def test_a_new_person_is_mailed_their_link_when_the_deployment_sends_mail(client, acme, tools, admin_of_acme, settings,
                                                                         mailoutbox):
    settings.TOOLOPS_NOTIFY_BY_EMAIL = True
    client.force_login(admin_of_acme)
    answer = client.post("/console/tenants/acme/people/add", {"email": "dan@example.invalid", "role": "viewer"})
    assert 'data-testid="invitation-mailed"' in answer.content.decode()
    [mail] = mailoutbox
    link = re.search(r'data-testid="set-password-link">([^<]+)<', answer.content.decode()).group(1)
    assert mail.to == ["dan@example.invalid"] and link in mail.body
    settings.TOOLOPS_NOTIFY_BY_EMAIL = False
    answer = client.post("/console/tenants/acme/people/add", {"email": "eve@example.invalid", "role": "viewer"})
    assert 'data-testid="invitation-mailed"' not in answer.content.decode() and len(mailoutbox) == 1
