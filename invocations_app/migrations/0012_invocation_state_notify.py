"""PostgreSQL: every committed change of an invocation's state is announced on the
``toolops_invocation_state`` channel (payload: the invocation id), so the MCP front door wakes a
waiting ``tools/call`` at once instead of polling (``mcp_server/wakeups.py``).
Other databases: nothing (the front door polls)."""
from django.db import migrations

CHANNEL = "toolops_invocation_state"
TABLE = "invocations_app_invocation"


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"""
        CREATE OR REPLACE FUNCTION {TABLE}_notify_state() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', NEW.id::text);
            RETURN NULL;
        END $$ LANGUAGE plpgsql;
    """)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_notify_state ON {TABLE}")
    schema_editor.execute(f"""
        CREATE TRIGGER {TABLE}_notify_state AFTER UPDATE OF state ON {TABLE}
        FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION {TABLE}_notify_state()
    """)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_notify_state ON {TABLE}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {TABLE}_notify_state()")


class Migration(migrations.Migration):

    dependencies = [('invocations_app', '0011_webhooks_and_decision_links')]

    operations = [migrations.RunPython(install, uninstall)]
