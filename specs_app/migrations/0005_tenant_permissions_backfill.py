"""Keep existing deployments working after approving and resolving became per (tenant, ToolSpec).

Before, ``approve_toolspec`` / ``resolve_toolspec`` on a ToolSpec alone let a user decide that
tool's calls of *every* tenant, and a model-level ``add/change_toolspec`` let staff edit every
ToolSpec. This migration keeps exactly what each person could do, for the tenants that exist now:

* every user or group holding ``approve_toolspec`` (on any ToolSpec, or model-wide) is given
  ``approve_calls`` on each existing tenant (guardian object permission); the same for
  ``resolve_toolspec`` → ``resolve_calls``;
* every user or group holding model-level ``add_toolspec`` or ``change_toolspec`` is given
  ``manage_toolspecs_tenant`` model-wide (every existing ToolSpec is global, which needs it);
* ``view_invocation`` held model-wide stays the platform-wide read of calls (dashboard, records).

Tenants created later get no approver automatically: grant ``approve_calls`` / ``resolve_calls``
on them (Tenant admin → Object permissions, or ``assign_perm``). Narrow the backfilled rows the
same way once the real per-tenant approvers are known. Reversing removes nothing (the new
permissions are dropped with the model options, and the rows are harmless without them).
"""
from django.db import migrations

NEW_TENANT_PERMISSIONS = {
    "approve_calls": "Can approve confirmations of this tenant's calls",
    "resolve_calls": "Can resolve unknown outcomes of this tenant's calls",
    "view_calls": "Can see this tenant's calls (dashboard, call records)",
    "manage_toolspecs_tenant": "Can edit ToolSpecs owned by this tenant (model-wide: also global ones)",
}
# ToolSpec permission → Tenant permission given on every existing tenant to its holders.
CARRIED_OVER = {"approve_toolspec": "approve_calls", "resolve_toolspec": "resolve_calls"}


def backfill(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    User = apps.get_model("auth", "User")
    Group = apps.get_model("auth", "Group")
    UserObjectPermission = apps.get_model("guardian", "UserObjectPermission")
    GroupObjectPermission = apps.get_model("guardian", "GroupObjectPermission")
    Tenant = apps.get_model("specs_app", "Tenant")

    tenant_ct, _ = ContentType.objects.get_or_create(app_label="specs_app", model="tenant")
    spec_ct, _ = ContentType.objects.get_or_create(app_label="specs_app", model="toolspec")
    # post_migrate creates permissions only after every migration: create the new ones here.
    new = {codename: Permission.objects.get_or_create(content_type=tenant_ct, codename=codename, defaults={"name": name})[0]
           for codename, name in NEW_TENANT_PERMISSIONS.items()}
    tenant_pks = [str(pk) for pk in Tenant.objects.values_list("pk", flat=True)]

    for spec_codename, tenant_codename in CARRIED_OVER.items():
        old = Permission.objects.filter(content_type=spec_ct, codename=spec_codename).first()
        if old is None:
            continue
        users = set(UserObjectPermission.objects.filter(permission=old).values_list("user_id", flat=True))
        users |= set(User.objects.filter(user_permissions=old).values_list("pk", flat=True))
        groups = set(GroupObjectPermission.objects.filter(permission=old).values_list("group_id", flat=True))
        groups |= set(Group.objects.filter(permissions=old).values_list("pk", flat=True))
        perm = new[tenant_codename]
        for user_id in users:
            for pk in tenant_pks:
                UserObjectPermission.objects.get_or_create(user_id=user_id, permission=perm, content_type=tenant_ct, object_pk=pk)
        for group_id in groups:
            for pk in tenant_pks:
                GroupObjectPermission.objects.get_or_create(group_id=group_id, permission=perm, content_type=tenant_ct, object_pk=pk)

    editors = Permission.objects.filter(content_type=spec_ct, codename__in=["add_toolspec", "change_toolspec"])
    manage = new["manage_toolspecs_tenant"]
    for user in User.objects.filter(user_permissions__in=editors).distinct():
        user.user_permissions.add(manage)
    for group in Group.objects.filter(permissions__in=editors).distinct():
        group.permissions.add(manage)


class Migration(migrations.Migration):

    dependencies = [
        ("specs_app", "0004_tenant_scoped_permissions_and_tools"),
        ("guardian", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
