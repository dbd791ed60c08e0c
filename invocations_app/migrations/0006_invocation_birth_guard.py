"""Guard INSERT too: an invocation is born only in a state admission reaches (toolops/db_guards.py)."""
from django.db import migrations

from toolops import db_guards


class Migration(migrations.Migration):
    dependencies = [
        ("invocations_app", "0005_confirmation_arguments_text_in_console"),
    ]

    operations = [migrations.RunPython(db_guards.install, db_guards.uninstall_birth_guard)]
