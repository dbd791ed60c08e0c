"""PostgreSQL: the ``toolops_invocation_state`` announcement (0012) is made only for the states
that change what a waiting MCP handler answers — final states and OUTCOME_UNKNOWN. A claim
(→ EXECUTING), an approval (→ PREPARED) or a commit on the way to OBSERVED answers nothing new,
so no listener is woken for it (a waiter still re-reads at least every ``FALLBACK_SECONDS``).
An inline read then costs one notification instead of two. Other databases: nothing.

The states are written out here, as a migration must keep its meaning;
``tests/mcp_server/test_mcp_wakeups.py`` checks they are the state table's."""
from django.db import migrations

TABLE = "invocations_app_invocation"
ANSWER_STATES = (
    "AUTHORIZATION_REJECTED", "CANCELLED_BEFORE_COMMIT", "FAILED_AFTER_COMMIT", "FAILED_BEFORE_COMMIT",
    "OBSERVED", "OUTCOME_UNKNOWN", "PARSE_REJECTED", "VALIDATION_REJECTED",
)


def _trigger(when: str) -> str:
    return f"""
        CREATE TRIGGER {TABLE}_notify_state AFTER UPDATE OF state ON {TABLE}
        FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {TABLE}_notify_state()
    """


def answers_only(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    states = ", ".join(f"'{state}'" for state in ANSWER_STATES)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_notify_state ON {TABLE}")
    schema_editor.execute(_trigger(f"OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ({states})"))


def every_change(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_notify_state ON {TABLE}")
    schema_editor.execute(_trigger("OLD.state IS DISTINCT FROM NEW.state"))


class Migration(migrations.Migration):

    dependencies = [('invocations_app', '0015_standing_approval_currency')]

    operations = [migrations.RunPython(answers_only, every_change)]
