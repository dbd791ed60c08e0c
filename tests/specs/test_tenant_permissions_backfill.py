"""The data migration that keeps pre-tenancy approvers, resolvers and ToolSpec editors working."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission
from guardian.shortcuts import assign_perm

from invocations_app.approvers import approvable_tenants
from worker.support import resolvable_tenants
from specs_app.selectors import MANAGE_TOOLSPECS
from tests.builders import make_staff, make_tenant, make_toolspec

pytestmark = pytest.mark.django_db

backfill = importlib.import_module("specs_app.migrations.0005_tenant_permissions_backfill").backfill


def test_it_gives_existing_holders_the_tenant_side_of_their_permission_on_every_existing_tenant():
    acme, globex = make_tenant(slug="acme"), make_tenant(slug="globex")
    spec = make_toolspec()
    approver, resolver, editor, bystander = (make_staff(username=n) for n in ("approver", "resolver", "editor", "bystander"))
    assign_perm("specs_app.approve_toolspec", approver, spec)
    assign_perm("specs_app.resolve_toolspec", resolver)  # model-wide
    editor.user_permissions.add(Permission.objects.get(codename="change_toolspec"))
    support = Group.objects.create(name="support")
    assign_perm("specs_app.resolve_toolspec", support, spec)
    member = make_staff(username="member")
    member.groups.add(support)

    backfill(apps, None)
    backfill(apps, None)  # idempotent

    assert set(approvable_tenants(user=approver)) == {acme, globex}
    assert set(resolvable_tenants(user=resolver)) == {acme, globex}
    assert set(resolvable_tenants(user=member)) == {acme, globex}
    assert not approvable_tenants(user=resolver).exists() and not resolvable_tenants(user=bystander).exists()
    editor = type(editor).objects.get(pk=editor.pk)  # fresh permission cache
    assert editor.has_perm(MANAGE_TOOLSPECS) and not type(bystander).objects.get(pk=bystander.pk).has_perm(MANAGE_TOOLSPECS)
    later = make_tenant(slug="later")
    assert later not in set(approvable_tenants(user=approver))  # new tenants are granted explicitly
