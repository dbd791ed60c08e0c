"""People and their roles in a tenant: named sets of the django-guardian permissions every check
already reads (``invocations_app.approvers``, ``worker.support``, the grant and ToolSpec admins,
the dashboard), so giving a role changes no check, only who passes it.

| role | on the tenant | on each chosen tool (or all the tenant's) | model-wide |
|---|---|---|---|
| Approver | ``approve_calls`` | ``approve_toolspec`` | — |
| Support | ``resolve_calls`` | ``resolve_toolspec`` | — |
| Tenant admin | ``manage_grants_tenant``, ``manage_toolspecs_tenant`` | — | view/add/change ToolSpec (scoped by the tenant permission) |
| Viewer | ``view_calls`` | — | — |

Every change is atomic and written to ``RoleChange`` (who, whom, which role and tools, why),
as grants are to ``GrantChange``. A role is read back from the permissions themselves
(``roles_of``), never from a copy that could drift from them.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from guardian.core import ObjectPermissionChecker
from guardian.shortcuts import (
    assign_perm, get_group_perms, get_objects_for_user, get_user_perms, get_users_with_perms, remove_perm,
)

from specs_app.models import RoleChange, Tenant, ToolSpec
from specs_app.selectors import toolspec_scope_q
from specs_app.services import grant_tenants_for_user


@dataclass(frozen=True)
class Role:
    key: str
    label: str
    does: str  # what the role lets a person do, in words
    tenant_permissions: tuple[str, ...]
    tool_permission: str = ""  # held on each chosen ToolSpec; empty: the role has no tools
    model_permissions: tuple[str, ...] = ()


ROLES: dict[str, Role] = {role.key: role for role in (
    Role("approver", "Approver", "decides confirmations of the chosen tools' calls",
         ("approve_calls",), "approve_toolspec"),
    Role("support", "Support", "resolves unknown outcomes of the chosen tools' calls",
         ("resolve_calls",), "resolve_toolspec"),
    Role("tenant_admin", "Tenant admin", "grants capabilities, edits the tenant's tools and names its people",
         ("manage_grants_tenant", "manage_toolspecs_tenant"), "",
         ("view_toolspec", "add_toolspec", "change_toolspec")),
    Role("viewer", "Viewer", "sees the dashboard and the records of the tenant's calls", ("view_calls",)),
)}


@dataclass(frozen=True)
class Holding:
    """One role a person holds in a tenant; ``tools`` None: every tool of the tenant."""

    role: Role
    tools: tuple[ToolSpec, ...] | None


def tenant_tools(*, tenant: Tenant) -> QuerySet[ToolSpec]:
    """The ToolSpec versions a role's tools are chosen from: the global ones and the tenant's own."""
    return ToolSpec.objects.filter(toolspec_scope_q(tenant_id=tenant.pk)).order_by("name", "-version")


def may_manage_people(*, user, tenant: Tenant) -> bool:
    """Tenant admins (``manage_grants_tenant`` on it, or model-wide) and superusers."""
    return grant_tenants_for_user(user=user).filter(pk=tenant.pk).exists()


def people_tenants(*, user) -> QuerySet[Tenant]:
    """The tenants whose people ``user`` may name."""
    return grant_tenants_for_user(user=user)


def _require_manage(actor, tenant: Tenant) -> None:
    if actor is None or not may_manage_people(user=actor, tenant=tenant):
        raise PermissionDenied(f"you may not name people of tenant {tenant.slug}")


def _role(key: str) -> Role:
    if key not in ROLES:
        raise ValidationError({"role": f"role must be one of {', '.join(ROLES)}"})
    return ROLES[key]


def _model_permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="specs_app", codename=codename)


def assign_role(*, actor, tenant: Tenant, person, role: str, tools: list[ToolSpec] | None = None, reason: str = "") -> Holding:
    """Give ``person`` ``role`` in ``tenant``: for a role with tools, on ``tools`` (None or empty:
    every tool of the tenant now). The person becomes staff (the console is for staff); audited
    as "assigned". Raises ``PermissionDenied`` unless ``actor`` manages the tenant's people, and
    ``ValidationError`` for an unknown role or a tool the tenant cannot see."""
    _require_manage(actor, tenant)
    spec = _role(role)
    if not person.is_active:
        raise ValidationError({"person": f"{person.get_username()} is inactive"})
    chosen = list(tools or [])
    if spec.tool_permission:
        allowed = set(tenant_tools(tenant=tenant).values_list("pk", flat=True))
        foreign = [t.ref for t in chosen if t.pk not in allowed]
        if foreign:
            raise ValidationError({"tools": f"not a tool of tenant {tenant.slug}: {', '.join(foreign)}"})
        covered = chosen or list(tenant_tools(tenant=tenant))
    elif chosen:
        raise ValidationError({"tools": f"the {spec.label} role has no tools to choose"})
    else:
        covered = []
    with transaction.atomic():
        if not person.is_staff:
            person.is_staff = True
            person.save(update_fields=["is_staff"])
        for codename in spec.tenant_permissions:
            assign_perm(f"specs_app.{codename}", person, tenant)
        for tool in covered:
            assign_perm(f"specs_app.{spec.tool_permission}", person, tool)
        for codename in spec.model_permissions:
            person.user_permissions.add(_model_permission(codename))
        RoleChange.objects.create(tenant=tenant, person=person, action="assigned", role=spec.key, actor=actor,
                                  reason=reason.strip(), tools=[t.ref for t in chosen])
    return Holding(spec, tuple(chosen) if chosen else None)


def remove_role(*, actor, tenant: Tenant, person, role: str, reason: str = "") -> bool:
    """Take ``role`` in ``tenant`` from ``person``; False when they did not hold it (nothing written).

    The tenant permissions go, and the tool permission on the tenant's own tools. On a global
    tool it goes only when the person holds the role in no other tenant (the same object
    permission serves them there)."""
    _require_manage(actor, tenant)
    spec = _role(role)
    if not any(h.role.key == spec.key for h in roles_of(tenant=tenant, person=person)):
        return False
    if spec.key == "tenant_admin" and person.pk == actor.pk and not actor.is_superuser:
        # Else the last admin could lock a tenant out of its own people and grants.
        raise ValidationError("you cannot take your own Tenant admin role: ask another tenant admin or a platform admin")
    with transaction.atomic():
        for codename in spec.tenant_permissions:
            remove_perm(f"specs_app.{codename}", person, tenant)
        elsewhere = _holds_elsewhere(person, spec, tenant)
        if spec.tool_permission:
            for tool in get_objects_for_user(person, f"specs_app.{spec.tool_permission}", klass=tenant_tools(tenant=tenant),
                                             with_superuser=False, accept_global_perms=False, use_groups=False):
                if tool.tenant_id == tenant.pk or not elsewhere:
                    remove_perm(f"specs_app.{spec.tool_permission}", person, tool)
        if spec.model_permissions and not elsewhere:
            person.user_permissions.remove(*[_model_permission(c) for c in spec.model_permissions])
        if any(h.role.key == spec.key for h in roles_of(tenant=tenant, person=person)):
            raise ValidationError(f"{person.get_username()} holds the {spec.label} role through a group: "
                                  "take them out of the group instead")
        RoleChange.objects.create(tenant=tenant, person=person, action="removed", role=spec.key, actor=actor,
                                  reason=reason.strip())
    return True


def _holds_elsewhere(person, spec: Role, tenant: Tenant) -> bool:
    first = f"specs_app.{spec.tenant_permissions[0]}"
    return get_objects_for_user(person, first, klass=Tenant, with_superuser=False, accept_global_perms=False,
                                use_groups=False).exclude(pk=tenant.pk).exists()


def roles_of(*, tenant: Tenant, person, checker: ObjectPermissionChecker | None = None) -> list[Holding]:
    """The roles ``person`` holds in ``tenant`` as object permissions of their own or their groups'
    (a model-wide permission is a platform role, not a tenant's): a role is held when every one
    of its tenant permissions is; its tools are those the tool permission is held on."""
    if person.is_superuser:  # the checker answers "everything" for a superuser: read what was assigned
        checker = _AssignedPerms(person)
    checker = checker or ObjectPermissionChecker(person)
    held = set(checker.get_perms(tenant))
    tools = list(tenant_tools(tenant=tenant))
    if tools:
        checker.prefetch_perms(tools)  # one query for all of them, not one per tool
    holdings = []
    for spec in ROLES.values():
        if not set(spec.tenant_permissions) <= held:
            continue
        if not spec.tool_permission:
            holdings.append(Holding(spec, None))
            continue
        on = tuple(t for t in tools if spec.tool_permission in checker.get_perms(t))
        holdings.append(Holding(spec, None if on and len(on) == len(tools) else on))
    return holdings


class _AssignedPerms:
    """The object permissions assigned to ``person`` and their groups, without guardian's
    superuser shortcut (a platform admin named in a role is shown with that role only)."""

    def __init__(self, person):
        self.person = person

    def get_perms(self, obj) -> list[str]:
        return list(set(get_user_perms(self.person, obj)) | set(get_group_perms(self.person, obj)))

    def prefetch_perms(self, objects) -> None:
        pass


@dataclass(frozen=True)
class Person:
    user: object
    holdings: list[Holding]


def tenant_roster(*, tenant: Tenant) -> list[Person]:
    """Everyone holding a role in ``tenant`` (object permissions, directly or through a group), by name."""
    codenames = sorted({c for r in ROLES.values() for c in r.tenant_permissions})
    users = get_users_with_perms(tenant, only_with_perms_in=codenames, with_group_users=True, with_superusers=False)
    roster = [Person(user, roles_of(tenant=tenant, person=user)) for user in users.order_by("username")]
    return [p for p in roster if p.holdings]


def role_history(*, tenant: Tenant, limit: int = 20) -> QuerySet[RoleChange]:
    return RoleChange.objects.filter(tenant=tenant).select_related("person", "actor")[:limit]


def person_invite(*, actor, tenant: Tenant, email: str):
    """A new staff user for ``email`` (their username) with no usable password; returns the user
    and the path part ``<uidb64>/<token>/`` of their set-password link (Django's password-reset
    token: single use, it stops working once the password is set, or after PASSWORD_RESET_TIMEOUT)."""
    _require_manage(actor, tenant)
    User = get_user_model()
    email = User.objects.normalize_email(email.strip())
    if User.objects.filter(username__iexact=email).exists() or User.objects.filter(email__iexact=email).exists():
        raise ValidationError({"email": f"{email} already has an account: choose them as an existing user"})
    user = User(username=email, email=email, is_staff=True)
    user.set_unusable_password()
    user.save()
    return user, set_password_path(user)


def person_add(*, actor, tenant: Tenant, role: str, person=None, email: str = "", tools: list[ToolSpec] | None = None,
               reason: str = "") -> tuple[object, str, Holding]:
    """"Add a person" in one step: an existing ``person``, or a new one invited by ``email``, given
    ``role`` (on ``tools``). Returns the user, their set-password link's path part (new people
    only, else "") and the role held. An e-mail that already names an account adds that account. Nothing is written when any part is refused."""
    if (person is None) == (not email):
        raise ValidationError({"person": "choose an existing person or type the e-mail of a new one (one of the two)"})
    with transaction.atomic():
        link = ""
        if person is None:
            person = _account_for(email)
        if person is None:
            person, link = person_invite(actor=actor, tenant=tenant, email=email)
        holding = assign_role(actor=actor, tenant=tenant, person=person, role=role, tools=tools, reason=reason)
    return person, link, holding


def _account_for(email: str):
    """The one existing account whose username or e-mail is ``email`` (case-insensitive), or None."""
    User = get_user_model()
    found = list(User.objects.filter(username__iexact=email.strip())[:2]) or list(User.objects.filter(email__iexact=email.strip())[:2])
    if len(found) > 1:
        raise ValidationError({"email": f"{email} names several accounts: ask a platform admin to tell them apart"})
    return found[0] if found else None


def set_password_path(user) -> str:
    return f"{urlsafe_base64_encode(force_bytes(user.pk))}/{default_token_generator.make_token(user)}/"
