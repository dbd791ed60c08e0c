"""Who may decide a tenant's confirmations: the one rule, for every front door and every message.

A person decides a call when they are an active staff user holding django-guardian's
``specs_app.approve_toolspec`` on its ToolSpec *and* ``specs_app.approve_calls`` on its tenant
(each as an object permission or model-wide); active staff superusers decide every call. The
console's queue and pages, the Approvals API, standing approvals (list and revoke), the
decision-link page and the approvers a ``confirmation.requested`` webhook names all ask here, so
none of them can show or offer a call the others would refuse.
"""
from __future__ import annotations

from django.db.models import QuerySet
from guardian.shortcuts import get_objects_for_user, get_users_with_perms

from specs_app.models import Tenant, ToolSpec
from specs_app.selectors import APPROVE_CALLS, tenants_for_user

APPROVE_PERMISSION = "specs_app.approve_toolspec"


def _staff(user) -> bool:
    # Guardian has no anonymous user here, and only active staff reach the console or hold a personal token.
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def approvable_toolspecs(*, user) -> QuerySet[ToolSpec]:
    """ToolSpec versions whose confirmations ``user`` may see and decide (with ``approvable_tenants``)."""
    if not _staff(user):
        return ToolSpec.objects.none()
    return get_objects_for_user(user, APPROVE_PERMISSION, klass=ToolSpec)


def approvable_tenants(*, user) -> QuerySet[Tenant]:
    """Tenants whose confirmations ``user`` may see and decide (for the ToolSpecs of ``approvable_toolspecs``)."""
    if not _staff(user):
        return Tenant.objects.none()
    return tenants_for_user(user=user, permission=APPROVE_CALLS)


def approvable(rows: QuerySet, *, user) -> QuerySet:
    """``rows`` (of a model with ``tenant`` and ``tool_spec``) narrowed to the pairs ``user`` may decide."""
    if not _staff(user):
        return rows.none()
    if user.is_superuser:
        return rows
    return rows.filter(tool_spec__in=approvable_toolspecs(user=user), tenant__in=approvable_tenants(user=user))


def may_approve(*, user, tenant_id, tool_spec_id) -> bool:
    """Whether ``user`` may see and decide the calls of this (tenant, ToolSpec) pair."""
    if not _staff(user):
        return False
    if user.is_superuser:
        return True
    return (approvable_tenants(user=user).filter(pk=tenant_id).exists()
            and approvable_toolspecs(user=user).filter(pk=tool_spec_id).exists())


def confirmation_approvers(confirmation) -> list:
    """Whom a chat bot should ping about ``confirmation``: the people named on its ToolSpec
    (``approve_toolspec`` held on it, directly or through a group) who may decide it by
    ``may_approve`` — so never an approver of another tenant, nor someone who cannot log in.
    Holding the permission model-wide, or being a superuser, does not name anyone here (they
    would be told of every tenant's call)."""
    named = get_users_with_perms(confirmation.tool_spec, only_with_perms_in=["approve_toolspec"],
                                 with_group_users=True, with_superusers=False)
    return sorted((u for u in named if may_approve(user=u, tenant_id=confirmation.tenant_id,
                                                    tool_spec_id=confirmation.tool_spec_id)), key=lambda u: u.pk)
