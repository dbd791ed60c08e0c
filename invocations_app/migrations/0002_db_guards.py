"""Install the DB triggers: allowed state edges, append-only events, immutable published specs."""
from django.db import migrations

from toolops import db_guards


class Migration(migrations.Migration):
    dependencies = [
        ("invocations_app", "0001_initial"),
        ("specs_app", "0001_initial"),
    ]

    operations = [migrations.RunPython(db_guards.install, db_guards.uninstall)]
