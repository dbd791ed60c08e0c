"""Database triggers that enforce the lifecycle's invariants wherever the write comes from.

Generated from the same data the Python code uses (the transition table, the states admission
can stop in, the immutable ToolSpec columns), for PostgreSQL and SQLite:

* an invocation's state changes only along an edge of the table (UPDATE);
* an invocation is born only in a state admission reaches (INSERT) — nobody inserts a COMMITTED
  call. Its event chain is written in the same transaction by ``admission.record_admission``;
  that the chain is consistent (seqs 1..n without gaps, each edge in the table, ending in the
  row's state) is checked by ``manage.py audit_invariants``, not by a trigger: a per-row check of
  the events at commit would cost a query per admission on the hottest path;
* events are append-only;
* published ToolSpecs are immutable, their owning tenant included (a separate trigger, installed
  by the migration after the one that added the column). Migrations call ``install``/``uninstall``; a change
to the table needs a new migration that re-installs the guards — and so does any migration that
makes SQLite rebuild a guarded table (most AlterFields), since the rebuild drops its triggers.
"""
from __future__ import annotations

from contextlib import contextmanager

from toolops.model_io.mcp_definitions import WATCH_TRANSITIONS
from toolops.runtime.states import ALL_EDGES, BIRTH_STATES

INVOCATION_TABLE = "invocations_app_invocation"
EVENT_TABLE = "invocations_app_event"
TOOLSPEC_TABLE = "specs_app_toolspec"
TOOLSPEC_IMMUTABLE_COLUMNS = (
    "name", "version", "title", "description", "input_schema", "schema_dialect", "format_assertion",
    "side_effect_class", "normalizers", "required_capabilities", "timeout_policy", "retry_policy",
    "confirmation_policy", "result_policy", "executor", "idempotency_retention_seconds", "expired_key_policy",
    "published_at",
)


def _edge_list() -> str:
    return ", ".join(f"'{src.value}>{dst.value}'" for src, dst in sorted(ALL_EDGES))


def _state_edge_guard(vendor: str, *, name: str, table: str, edges: str, what: str) -> list[str]:
    """A trigger refusing any ``state`` change of ``table`` outside ``edges`` (``'SRC>DST', …``).

    One shape for every lifecycle kept as a table of edges (invocations, imported MCP tools).
    """
    if vendor == "postgresql":
        return [
            f"""
        CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$
        BEGIN
          IF NEW.state IS DISTINCT FROM OLD.state
             AND (OLD.state || '>' || NEW.state) NOT IN ({edges}) THEN
            RAISE EXCEPTION '{what} % -> % is not allowed', OLD.state, NEW.state
              USING ERRCODE = 'check_violation';
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
            f"""CREATE TRIGGER {name} BEFORE UPDATE OF state ON {table}
            FOR EACH ROW EXECUTE FUNCTION {name}()""",
        ]
    if vendor == "sqlite":
        return [f"""CREATE TRIGGER {name} BEFORE UPDATE OF state ON {table}
            WHEN NEW.state IS NOT OLD.state AND (OLD.state || '>' || NEW.state) NOT IN ({edges})
            BEGIN SELECT RAISE(ABORT, '{what} is not allowed'); END"""]
    raise RuntimeError(f"ToolOps supports PostgreSQL and SQLite, not {vendor}")


def _invocation_state_guard(vendor: str) -> list[str]:
    return _state_edge_guard(vendor, name="invocations_invocation_guard_state", table=INVOCATION_TABLE,
                             edges=_edge_list(), what="invocation state edge")


BIRTH_TRIGGER = "invocations_invocation_guard_birth"


def _birth_list() -> str:
    return ", ".join(f"'{state.value}'" for state in sorted(BIRTH_STATES))


def _postgres_birth_trigger() -> str:
    return f"""CREATE TRIGGER {BIRTH_TRIGGER} BEFORE INSERT ON {INVOCATION_TABLE}
            FOR EACH ROW EXECUTE FUNCTION {BIRTH_TRIGGER}()"""


def _sqlite_birth_trigger() -> str:
    return f"""CREATE TRIGGER {BIRTH_TRIGGER} BEFORE INSERT ON {INVOCATION_TABLE}
            WHEN NEW.state NOT IN ({_birth_list()})
            BEGIN SELECT RAISE(ABORT, 'an invocation is born only in a state admission reaches'); END"""


def _postgres_sql() -> list[str]:
    changed = " OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in TOOLSPEC_IMMUTABLE_COLUMNS)
    return _invocation_state_guard("postgresql") + [
        f"""
        CREATE OR REPLACE FUNCTION {BIRTH_TRIGGER}() RETURNS trigger AS $$
        BEGIN
          IF NEW.state NOT IN ({_birth_list()}) THEN
            RAISE EXCEPTION 'an invocation is born only in a state admission reaches, not %', NEW.state
              USING ERRCODE = 'check_violation';
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
        _postgres_birth_trigger(),
        """
        CREATE OR REPLACE FUNCTION invocations_event_append_only() RETURNS trigger AS $$
        BEGIN
          RAISE EXCEPTION 'events are append-only' USING ERRCODE = 'check_violation';
        END $$ LANGUAGE plpgsql""",
        f"""CREATE TRIGGER invocations_event_append_only BEFORE UPDATE OR DELETE ON {EVENT_TABLE}
            FOR EACH ROW EXECUTE FUNCTION invocations_event_append_only()""",
        f"""
        CREATE OR REPLACE FUNCTION specs_toolspec_guard_published() RETURNS trigger AS $$
        BEGIN
          IF OLD.status <> 'draft' AND (NEW.status = 'draft' OR {changed}) THEN
            RAISE EXCEPTION 'tool spec %@% is published and immutable', OLD.name, OLD.version
              USING ERRCODE = 'check_violation';
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
        f"""CREATE TRIGGER specs_toolspec_guard_published BEFORE UPDATE ON {TOOLSPEC_TABLE}
            FOR EACH ROW EXECUTE FUNCTION specs_toolspec_guard_published()""",
    ]


def _sqlite_sql() -> list[str]:
    changed = " OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in TOOLSPEC_IMMUTABLE_COLUMNS)
    # No DELETE guard on SQLite events: Django flushes SQLite test databases with DELETE.
    return _invocation_state_guard("sqlite") + [
        _sqlite_birth_trigger(),
        f"""CREATE TRIGGER invocations_event_append_only BEFORE UPDATE ON {EVENT_TABLE}
            BEGIN SELECT RAISE(ABORT, 'events are append-only'); END""",
        f"""CREATE TRIGGER specs_toolspec_guard_published BEFORE UPDATE ON {TOOLSPEC_TABLE}
            WHEN OLD.status <> 'draft' AND (NEW.status = 'draft' OR {changed})
            BEGIN SELECT RAISE(ABORT, 'tool spec is published and immutable'); END""",
    ]


_DROP = {
    "postgresql": [
        f"DROP TRIGGER IF EXISTS invocations_invocation_guard_state ON {INVOCATION_TABLE}",
        f"DROP TRIGGER IF EXISTS {BIRTH_TRIGGER} ON {INVOCATION_TABLE}",
        f"DROP TRIGGER IF EXISTS invocations_event_append_only ON {EVENT_TABLE}",
        f"DROP TRIGGER IF EXISTS specs_toolspec_guard_published ON {TOOLSPEC_TABLE}",
    ],
    "sqlite": [
        "DROP TRIGGER IF EXISTS invocations_invocation_guard_state",
        f"DROP TRIGGER IF EXISTS {BIRTH_TRIGGER}",
        "DROP TRIGGER IF EXISTS invocations_event_append_only",
        "DROP TRIGGER IF EXISTS specs_toolspec_guard_published",
    ],
}


def install(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    statements = {"postgresql": _postgres_sql, "sqlite": _sqlite_sql}.get(vendor)
    if statements is None:
        raise RuntimeError(f"ToolOps supports PostgreSQL and SQLite, not {vendor}")
    for sql in _DROP[vendor] + statements():
        schema_editor.execute(sql, params=None)


def uninstall(apps, schema_editor) -> None:
    for sql in _DROP.get(schema_editor.connection.vendor, []):
        schema_editor.execute(sql, params=None)


def uninstall_birth_guard(apps, schema_editor) -> None:
    """Reverse of the migration that added the INSERT guard (the other guards stay)."""
    drop = {"postgresql": f"DROP TRIGGER IF EXISTS {BIRTH_TRIGGER} ON {INVOCATION_TABLE}",
            "sqlite": f"DROP TRIGGER IF EXISTS {BIRTH_TRIGGER}"}.get(schema_editor.connection.vendor)
    if drop:
        schema_editor.execute(drop, params=None)


@contextmanager
def birth_guard_suspended(connection):
    """Insert invocations in any state inside this block: synthetic histories only
    (``load_bulk``, tests that build a row in a given state without its history).

    Must run inside a transaction, which keeps the suspension invisible to everyone else (on
    PostgreSQL ``ALTER TABLE … DISABLE TRIGGER`` also locks the table until commit). The guard
    is back before the block ends; if the block raises, rolling the transaction back restores it.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("birth_guard_suspended needs a transaction (transaction.atomic())")
    postgres = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if postgres:
            # ALTER TABLE refuses while deferred FK checks are queued on the table: run them as
            # they come inside the block, and defer them again after it.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"ALTER TABLE {INVOCATION_TABLE} DISABLE TRIGGER {BIRTH_TRIGGER}")
        else:
            cursor.execute(f"DROP TRIGGER {BIRTH_TRIGGER}")
    yield
    with connection.cursor() as cursor:
        if postgres:
            cursor.execute(f"ALTER TABLE {INVOCATION_TABLE} ENABLE TRIGGER {BIRTH_TRIGGER}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        else:
            cursor.execute(_sqlite_birth_trigger())


# --- a published ToolSpec keeps its owner ----------------------------------------------------
# Its own trigger rather than a column of ``TOOLSPEC_IMMUTABLE_COLUMNS``: older migrations call
# ``install`` before ``tenant_id`` exists. Moving a published tool to another tenant (or making it
# global) would list it — and its recorded calls' catalog — to people of another tenant.
TOOLSPEC_OWNER_TRIGGER = "specs_toolspec_guard_published_owner"


def _toolspec_owner_guard(vendor: str) -> list[str]:
    if vendor == "postgresql":
        return [
            f"""
        CREATE OR REPLACE FUNCTION {TOOLSPEC_OWNER_TRIGGER}() RETURNS trigger AS $$
        BEGIN
          IF OLD.status <> 'draft' AND NEW.tenant_id IS DISTINCT FROM OLD.tenant_id THEN
            RAISE EXCEPTION 'tool spec %@% is published: its tenant cannot change', OLD.name, OLD.version
              USING ERRCODE = 'check_violation';
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
            f"""CREATE TRIGGER {TOOLSPEC_OWNER_TRIGGER} BEFORE UPDATE OF tenant_id ON {TOOLSPEC_TABLE}
            FOR EACH ROW EXECUTE FUNCTION {TOOLSPEC_OWNER_TRIGGER}()""",
        ]
    if vendor == "sqlite":
        return [f"""CREATE TRIGGER {TOOLSPEC_OWNER_TRIGGER} BEFORE UPDATE OF tenant_id ON {TOOLSPEC_TABLE}
            WHEN OLD.status <> 'draft' AND NEW.tenant_id IS NOT OLD.tenant_id
            BEGIN SELECT RAISE(ABORT, 'tool spec is published: its tenant cannot change'); END"""]
    raise RuntimeError(f"ToolOps supports PostgreSQL and SQLite, not {vendor}")


def install_toolspec_owner_guard(apps, schema_editor) -> None:
    uninstall_toolspec_owner_guard(apps, schema_editor)
    for sql in _toolspec_owner_guard(schema_editor.connection.vendor):
        schema_editor.execute(sql, params=None)


def uninstall_toolspec_owner_guard(apps, schema_editor) -> None:
    on = f" ON {TOOLSPEC_TABLE}" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TOOLSPEC_OWNER_TRIGGER}{on}", params=None)


# --- imported MCP tools: the watch state moves only along WATCH_TRANSITIONS -------------------
# Installed by specs_app's migration that creates the table (not by ``install``: older
# migrations call that before the table exists).
UPSTREAMTOOL_TABLE = "specs_app_upstreamtool"


def _watch_edge_list() -> str:
    return ", ".join(f"'{src}>{dst}'" for src, dst in sorted(WATCH_TRANSITIONS))


def install_upstream_watch(apps, schema_editor) -> None:
    uninstall_upstream_watch(apps, schema_editor)
    for sql in _state_edge_guard(schema_editor.connection.vendor, name="specs_upstreamtool_guard_state",
                                 table=UPSTREAMTOOL_TABLE, edges=_watch_edge_list(), what="upstream tool watch edge"):
        schema_editor.execute(sql, params=None)


def uninstall_upstream_watch(apps, schema_editor) -> None:
    on = f" ON {UPSTREAMTOOL_TABLE}" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP TRIGGER IF EXISTS specs_upstreamtool_guard_state{on}", params=None)
