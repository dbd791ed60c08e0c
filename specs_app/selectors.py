"""Reads for tool specs and identities."""
from __future__ import annotations

import time
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q, QuerySet
from django.db.models.signals import post_delete, post_save
from django.utils import timezone
from guardian.shortcuts import get_objects_for_user, get_users_with_perms

from toolops.sql import permission_codenames, select_rows
from toolops.errors import ApplicationError
from toolops.runtime.admission import ToolView
from toolops.decisions.approval_policy import ApprovalPolicy
from toolops.decisions.authorization import GrantSnapshot, Limits
from toolops.model_io.mcp_definitions import QUARANTINED
from toolops.runtime.person_names import InvisibleCharacter, person_key, person_key_lenient
from toolops.model_io.rendering import RenderableTool
from toolops.decisions.requirements import Requirement, requirements_for

from specs_app.models import Capability, Grant, Subject, Tenant, ToolSpec

# A capability's id and operation class are fixed when it is created (the admin makes the class
# read-only), so a found one is cached; a missing one is not. Correcting a class means deleting
# the capability and creating it again under the same name, with a new id: an entry is forgotten
# on save or delete in this process and expires after CAPABILITY_CACHE_SECONDS in the others, or
# their grant lookups would go on asking for the old id and find no grant.
CAPABILITY_CACHE_SECONDS = 60.0
_CAPABILITIES: dict[str, tuple[int, str, float]] = {}


def _forget_capability(sender, instance, **kwargs) -> None:
    _CAPABILITIES.pop(instance.name, None)


post_save.connect(_forget_capability, sender=Capability, dispatch_uid="capabilities-forget-on-save")
post_delete.connect(_forget_capability, sender=Capability, dispatch_uid="capabilities-forget-on-delete")


# Tenant object permissions (django-guardian). Held model-wide, each covers every tenant.
APPROVE_CALLS = "specs_app.approve_calls"
RESOLVE_CALLS = "specs_app.resolve_calls"
VIEW_CALLS = "specs_app.view_calls"
CONNECT_AGENTS = "specs_app.connect_agents"  # issue 33: OAuth consent for an MCP client
MANAGE_TOOLSPECS = "specs_app.manage_toolspecs_tenant"


def tenants_for_user(*, user, permission: str | list[str]) -> QuerySet[Tenant]:
    """Tenants on which ``user`` holds ``permission`` (any of a list): as a guardian object
    permission, or model-wide (every tenant); superusers hold every permission on every tenant."""
    if not (user.is_authenticated and user.is_active):  # guardian has no anonymous user here
        return Tenant.objects.none()
    return get_objects_for_user(user, permission, klass=Tenant, any_perm=isinstance(permission, list))


def tenant_people(*, tenant: Tenant) -> QuerySet:
    """Active people of ``tenant``: users holding any of its permissions (``Tenant.Meta.permissions``)
    on it — a guardian object permission of their own or of a group — or model-wide (every
    tenant: platform staff), and superusers. Whoever may approve, resolve or see its calls is one."""
    codenames = permission_codenames(Tenant)
    on_tenant = get_users_with_perms(tenant, only_with_perms_in=codenames, with_group_users=True, with_superusers=True)
    model_wide = Permission.objects.filter(content_type__app_label="specs_app", content_type__model="tenant",
                                           codename__in=codenames)
    return get_user_model().objects.filter(is_active=True).filter(
        Q(pk__in=on_tenant.values("pk")) | Q(user_permissions__in=model_wide) | Q(groups__permissions__in=model_wide)
    ).distinct()


def tenant_person_named(*, tenant: Tenant, name: str):
    """The one person of ``tenant`` whose username or email reads as ``name`` to a person
    (``toolops.runtime.person_names``: NFKC, case-folded, UTS #39 skeleton), or ``unknown_person``.

    Refused (400 ``unknown_person``): a name with an invisible or control character, a name no
    person of the tenant reads as, and one two people read as (an admin must tell them apart).
    Reads the tenant's people's names once (two short columns): fine for the hundreds of people a
    tenant has; a tenant of tens of thousands would want the keys stored."""
    try:
        key = person_key(name)
    except InvisibleCharacter as exc:
        raise ApplicationError(f"on_behalf_of contains {exc}: name the person as they sign in (username or email)",
                               code="unknown_person", extra={"character": exc.character}) from None
    found = {pk for pk, username, email in tenant_people(tenant=tenant).values_list("pk", "username", "email")
             if key in (person_key_lenient(username), person_key_lenient(email) if email else None)}
    if not found:
        raise ApplicationError(f"on_behalf_of names no person of tenant {tenant.slug}: send the username or email "
                               "of a user who holds a permission on this tenant", code="unknown_person")
    if len(found) > 1:
        raise ApplicationError(f"on_behalf_of reads as {len(found)} people of tenant {tenant.slug} (names that look "
                               "alike, which nobody can tell apart on a page): ask an admin to rename one", code="unknown_person")
    return get_user_model().objects.get(pk=found.pop())


def toolspec_scope_q(*, tenant_id) -> Q:
    """ToolSpecs one tenant may see: the global ones and its own."""
    return Q(tenant__isnull=True) | Q(tenant_id=tenant_id)


def toolspecs_visible_to_subject(*, subject: Subject) -> QuerySet[ToolSpec]:
    """Published (not retired, not draft) ToolSpec versions the subject may be shown: the global
    ones and those its tenant owns, never another tenant's.

    Capability grants narrow what may *run*.
    """
    return (ToolSpec.objects.filter(status=ToolSpec.Status.PUBLISHED)
            .filter(toolspec_scope_q(tenant_id=subject.tenant_id)).order_by("name", "version"))


def toolspecs_offered_to_subject(*, subject: Subject) -> QuerySet[ToolSpec]:
    """The versions a model of this subject may be offered: those visible to it, less imported
    tools in quarantine (their upstream definition changed or vanished: every call is refused
    until an admin publishes a new version). Read afresh each time — a listing reflects a
    quarantine the moment the refresh records it (``specs_upstreamtool_state`` indexes those rows)."""
    return toolspecs_visible_to_subject(subject=subject).exclude(upstream__state__in=QUARANTINED)


def toolspecs_granted_to_subject(*, subject: Subject, now: datetime | None = None) -> list[ToolSpec]:
    """The subject's tools: for each tool name, the newest version offered to it
    (``toolspecs_offered_to_subject``) for whose every required capability the subject (or its
    whole tenant) holds a live grant, by name.

    A grant counts whatever its effect (``confirm`` still lets the tool be called, after a
    person decides), when it is unrevoked, unexpired, and its ``tool_refs`` are empty or name
    that version. Scope and limits are not checked here: they depend on the arguments, which
    authorization judges at call time. A tool with no required capability needs no grant.
    """
    now = now or timezone.now()
    held: dict[str, list[tuple[str, ...]]] = {}
    grants = (
        Grant.objects.filter(tenant_id=subject.tenant_id, revoked_at__isnull=True)
        .filter(Q(subject=subject) | Q(subject__isnull=True))
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("capability__name", "tool_refs")
    )
    for capability, refs in grants:
        held.setdefault(capability, []).append(tuple(refs or ()))

    def granted(spec: ToolSpec) -> bool:
        for requirement in spec.required_capabilities or []:
            name = requirement["capability"] if isinstance(requirement, dict) else requirement
            if not any(not refs or spec.ref in refs for refs in held.get(name, ())):
                return False
        return True

    newest: dict[str, ToolSpec] = {}
    for spec in toolspecs_offered_to_subject(subject=subject):
        if granted(spec) and (spec.name not in newest or spec.version > newest[spec.name].version):
            newest[spec.name] = spec
    return [newest[name] for name in sorted(newest)]


def tool_view(spec: ToolSpec, *, null_as_absent: tuple[str, ...] = ()) -> ToolView:
    """The slice of a ToolSpec that the pure admission pipeline needs.

    ``null_as_absent``: set when the model call showed an OpenAI strict rendering of it.
    """
    return ToolView(
        name=spec.name,
        version=spec.version,
        input_schema=spec.input_schema,
        schema_dialect=spec.schema_dialect or None,
        format_assertion=spec.format_assertion,
        normalizers=list(spec.normalizers or []),
        null_as_absent=tuple(null_as_absent),
    )


def toolspec_renderable(spec: ToolSpec) -> RenderableTool:
    """The model-visible part of a ToolSpec, for rendering in any format."""
    return RenderableTool(
        name=spec.name, version=spec.version, description=spec.description, input_schema=spec.input_schema,
        side_effect_class=spec.side_effect_class, title=spec.title or None,
    )


def grant_snapshots(*, tenant, subject, capabilities: list[str]) -> list[GrantSnapshot]:
    """Live (unrevoked) grants of ``tenant`` for ``capabilities`` held by ``subject`` or tenant-wide.

    Uses the partial index ``specs_grant_live_lookup``; cost depends on the subject's grants,
    not on the total number of grants. Expired grants are included so the decision can say so.
    """
    by_id = {cid: (name, op) for name, (cid, op) in _capabilities(capabilities).items()}
    if not by_id:
        return []
    # capability_id (not a join on the name) so the whole (tenant, capability, subject) index
    # applies; the names come from the capability cache. Lean SQL: this runs for every call.
    rows = select_rows(
        Grant, _GRANT_COLUMNS,
        where=f"tenant_id = %s AND capability_id IN ({', '.join(['%s'] * len(by_id))}) AND revoked_at IS NULL "
              "AND (subject_id IS NULL OR subject_id = %s)",
        params=[("tenant", tenant.pk), *(("capability", cid) for cid in by_id), ("subject", subject.pk)],
    )
    snapshots, legacy = [], settings.TOOLOPS_LEGACY_AMOUNT_CURRENCY
    for grant_id, capability_id, subject_id, scope_kind, scope_values, effect, tool_refs, limits, expires_at, policy in rows:
        name, operation_class = by_id[capability_id]
        snapshots.append(GrantSnapshot(
            grant_id=str(grant_id), capability=name, operation_class=operation_class, tenant=tenant.slug,
            subject_id=str(subject_id) if subject_id else None, scope_kind=scope_kind, scope_values=tuple(scope_values or ()),
            effect=effect, tool_refs=tuple(tool_refs or ()), expires_at=expires_at, revoked_at=None,
            # a row saved before money limits had a currency is read in the legacy one (docs/how-to/upgrade.md)
            limits=Limits.from_dict(limits, legacy_currency=legacy),
            policy=ApprovalPolicy.from_dict(policy, legacy_currency=legacy),
        ))
    return snapshots


_GRANT_COLUMNS = ("id", "capability", "subject", "scope_kind", "scope_values", "effect", "tool_refs", "limits", "expires_at",
                  "approval_policy")


def _capabilities(names: list[str]) -> dict[str, tuple[int, str]]:
    # The answer is built from local values: other threads may replace or drop entries meanwhile.
    now = time.monotonic()
    found: dict[str, tuple[int, str]] = {}
    for name in names:
        entry = _CAPABILITIES.get(name)
        if entry is not None and entry[2] > now:
            found[name] = entry[:2]
    missing = [n for n in names if n not in found]
    if missing:
        expires = now + CAPABILITY_CACHE_SECONDS
        for name, pk, op in Capability.objects.filter(name__in=missing).values_list("name", "pk", "operation_class"):
            found[name] = (pk, op)
            _CAPABILITIES[name] = (pk, op, expires)
    return found


def capability_classes(names: list[str]) -> dict[str, str]:
    """Capability name → operation class for the names that exist."""
    return {name: op for name, (_, op) in _capabilities(names).items()}


def call_requirements(*, spec: ToolSpec, arguments) -> list[Requirement]:
    """What a call of ``spec`` with these normalized arguments requires, per declared capability
    (amount, currency, scope values…); ``RequirementError`` for a ToolSpec that declares it wrongly."""
    declared = list(spec.required_capabilities or [])
    names = [entry["capability"] for entry in declared]
    return requirements_for(declared=declared, operation_classes=capability_classes(names), arguments=arguments,
                            normalizers=spec.normalizers)


def subjects_user_may_connect(*, user) -> QuerySet[Subject]:
    """The active agents ``user`` may let an MCP client act as (issue 33's OAuth consent): those
    of the tenants where they hold ``connect_agents`` (per tenant, model-wide, or as superuser)."""
    tenants = tenants_for_user(user=user, permission=CONNECT_AGENTS)
    return Subject.objects.filter(tenant__in=tenants, is_active=True).select_related("tenant").order_by("tenant__slug", "name")
