"""A published ToolSpec keeps its owning tenant: a trigger refuses changing ``tenant_id`` of a
non-draft version (toolops/db_guards.py). Also re-installs the other ToolSpec guard, which SQLite
drops when a migration rebuilds the table (0004 added the tenant column)."""
from django.db import migrations

from toolops import db_guards


def install(apps, schema_editor):
    db_guards.install_toolspec_owner_guard(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [("specs_app", "0007_personal_tokens")]

    operations = [migrations.RunPython(install, db_guards.uninstall_toolspec_owner_guard)]
