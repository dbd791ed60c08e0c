"""Several INSERTs in one round trip, for the two paths where the benchmarks show it pays.

The admission of a proposal writes a proposal, an invocation and its event chain; a call's
last transition writes its events, result body and tool messages. One ORM ``create()`` or
``bulk_create()`` each costs a round trip apiece plus BEGIN and COMMIT; ``insert_rows`` sends
them together. On PostgreSQL they go as prepared statements in one psycopg pipeline ended by
one Sync: one round trip, all or nothing, one commit (inside the caller's transaction they
simply join it). Other databases (SQLite) run the statements one by one inside one
transaction: the same rows, more round trips. Values are prepared by the model fields exactly
as ``save()`` does. Measured (bench/admission.py, same run): the same rows by ``bulk_create``
per model in one transaction bring the admission ratio from ~0.7–0.9 down to ~0.4–0.5.

The worker's per-attempt writes (``insert_returning_keys``, ``update_by_pk``) and the indexed
reads every proposal makes (``select_rows``: the grant snapshot, the "already posted?" probe) are
lean statements too: their ORM equivalents (``bulk_create``, ``QuerySet.update``,
``values_list``) were measured at +0.8 ms CPU per execution and +1.8 ms per ``proposal_admit``
(in-process, ``process_time``), most of it query compilation. What stays below Django's public
surface, and why, is listed in docs/architecture.md.

No model signals fire and generated primary keys are not read back: use ``insert_rows`` for
models whose primary key is set client-side, or whose generated key nobody needs (events).
"""
from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import psycopg
from django.db import connections, models, transaction


def insert_rows(*groups: Sequence[models.Model], then: Sequence[tuple[str, list]] = (),
                keys_for: Sequence[models.Model] = (), using: str = "default") -> None:
    """INSERT each group (instances of one model) as multi-row statements (``_chunks``), all in one go.

    ``then``: further ``(sql, params)`` statements whose answer nobody needs (an UPDATE of a
    counter), sent in the same round trip. ``keys_for``: one more group, of a model with
    database-generated keys, inserted last and its keys read back (``insert_returning_keys``
    in the same round trip). Raises ``django.db.IntegrityError`` like ``create()`` would;
    nothing is written then.
    """
    connection = connections[using]
    statements = [_insert_statement(chunk, connection) for group in groups if group for chunk in _chunks(group, connection)]
    statements += then
    returning = None
    if keys_for:
        sql, params = _insert_statement(keys_for, connection)
        returning = (f"{sql} RETURNING {connection.ops.quote_name(type(keys_for[0])._meta.pk.column)}", params)
    if connection.vendor == "postgresql":
        keys = _pipelined(connection, statements, returning)
    else:
        with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
            if returning:
                cursor.execute(*returning)
                keys = cursor.fetchall()
    for group in groups:
        for obj in group:
            obj._state.adding = False
            obj._state.db = using
    if returning:
        for obj, (key,) in zip(keys_for, keys):
            obj.pk, obj._state.adding, obj._state.db = key, False, using


def execute_one(sql: str, params: Sequence, *, fetch: bool = True, using: str = "default"):
    """Run one statement; its rows (``fetch``) or else the number of rows it changed.

    On PostgreSQL a prepared statement (server-side binding): for the few statements every
    invocation runs (the claim's locked read, the transition's UPDATE … RETURNING) the server
    skips parse and plan, and the client skips quoting each value. Elsewhere Django's cursor.
    """
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if fetch else cursor.rowcount
    with _prepared_cursor(connection, sql) as cursor:
        cursor.execute(sql, params, prepare=True)
        return cursor.fetchall() if fetch else cursor.rowcount


def _pipelined(connection, statements: Sequence[tuple[str, list]], returning: tuple[str, list] | None = None) -> list | None:
    """Send ``statements`` as prepared statements in one psycopg pipeline: one round trip.

    Outside a transaction the pipeline's single Sync makes the list one implicit transaction
    (PostgreSQL protocol docs, "Pipelining": the Sync commits if every statement succeeded and
    rolls back otherwise), so no BEGIN/COMMIT messages are needed; inside the caller's
    transaction the statements simply join it. Prepared statements (server-side binding) skip
    the server's parse and plan of each INSERT and the client's quoting of every value.
    ``returning``: a last statement whose rows are returned (read once the pipeline has synced).
    """
    logged = [sql for sql, _ in statements] + ([returning[0]] if returning else [])
    with _prepared_cursor(connection, ";\n".join(logged)) as cursor:
        with connection.connection.pipeline():
            for sql, params in statements:
                cursor.execute(sql, params, prepare=True)
            if returning:
                cursor.execute(*returning, prepare=True)
        return cursor.fetchall() if returning else None


class PipelineAbortedEcho:
    """A ``logging`` filter for the ``psycopg`` logger: drops its "error ignored terminating
    <Pipeline>: pipeline aborted" warning.

    When a statement in a pipeline fails (a concurrent duplicate's unique violation, which the
    caller handles), psycopg raises that error from the block and then, syncing on the way
    out, meets the aborted pipeline it left behind and logs it as a WARNING. That second error
    is only the echo of the first, which reaches the caller intact; any other psycopg warning
    passes.
    """

    def filter(self, record) -> bool:
        echo = (isinstance(record.msg, str) and record.msg.startswith("error ignored terminating")
                and isinstance(record.args, tuple) and record.args
                and isinstance(record.args[-1], psycopg.errors.PipelineAborted))
        return not echo


@contextlib.contextmanager
def _prepared_cursor(connection, logged_sql: str):
    """A server-binding psycopg cursor on Django's connection (Django's own bind on the client),
    with Django's checks and error translation, logged as Django logs queries (``connection.queries``)."""
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    start = time.monotonic()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor
    if connection.queries_logged:
        connection.queries_log.append({"sql": logged_sql, "time": f"{time.monotonic() - start:.3f}"})


def set_clause(model: type[models.Model], fields: dict, connection) -> tuple[list[str], list]:
    """``column = %s`` assignments for ``fields`` and their values, prepared as ``update()`` would."""
    quote = connection.ops.quote_name
    assignments, params = [], []
    for name, value in fields.items():
        field = model._meta.get_field(name)
        assignments.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    return assignments, params


def update_by_pk(obj: models.Model, fields: dict, *, unless_set: str | None = None, using: str = "default") -> int:
    """``UPDATE … SET fields WHERE pk = obj.pk [AND unless_set IS NULL]``; the rows changed (0 or 1).

    The ORM's ``filter().update()`` compiles a query per call; this prepares each value by its
    field, as ``update()`` does, and sets them on ``obj`` when the row changed.
    """
    return execute_counted(update_by_pk_counted(obj, fields, unless_set=unless_set, using=using), using=using)


class Counted(NamedTuple):
    """A statement whose changed-row count is handed to ``then`` once it has run: for sending it
    in another statement's round trip (``execute_counted_then``)."""
    sql: str
    params: list
    then: Callable[[int], None]


def update_by_pk_counted(obj: models.Model, fields: dict, *, unless_set: str | None = None, using: str = "default",
                         then: Callable[[int], None] | None = None) -> Counted:
    """``update_by_pk``'s statement, not yet run: ``fields`` are set on ``obj`` if it changes the
    row, and ``then`` gets the changed-row count either way."""
    connection = connections[using]
    meta = type(obj)._meta
    quote = connection.ops.quote_name
    assignments, params = set_clause(type(obj), fields, connection)
    sql = f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} WHERE {quote(meta.pk.column)} = %s"
    params.append(meta.pk.get_db_prep_value(obj.pk, connection))
    if unless_set:
        sql += f" AND {quote(meta.get_field(unless_set).column)} IS NULL"

    def changed(count: int) -> None:
        if count:
            for name, value in fields.items():
                setattr(obj, name, value)
        if then is not None:
            then(count)

    return Counted(sql, params, changed)


def execute_counted(statement: Counted, using: str = "default") -> int:
    """Run ``statement`` alone; its changed-row count, also handed to ``statement.then``."""
    changed = execute_one(statement.sql, statement.params, fetch=False, using=using)
    statement.then(changed)
    return changed


def execute_counted_then(first: Counted, sql: str, params: Sequence, using: str = "default") -> list:
    """Run ``first``, then the statement ``sql`` whose rows are returned: one round trip on
    PostgreSQL (one pipeline, two prepared statements; inside the caller's transaction they join
    it), one after the other elsewhere. ``first.then`` gets its changed-row count."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(first.sql, first.params)
            count = cursor.rowcount
            cursor.execute(sql, params)
            rows = cursor.fetchall()
    else:
        with _prepared_cursor(connection, f"{first.sql};\n{sql}") as counting, psycopg.Cursor(connection.connection) as cursor:
            with connection.connection.pipeline():
                counting.execute(first.sql, first.params, prepare=True)
                cursor.execute(sql, params, prepare=True)
            count, rows = counting.rowcount, cursor.fetchall()
    first.then(count)
    return rows


def insert_returning_keys(objs: Sequence[models.Model], using: str = "default") -> None:
    """One multi-row INSERT of ``objs`` (one model, database-generated keys) that sets their keys."""
    connection = connections[using]
    sql, params = _insert_statement(objs, connection)
    keys = execute_one(f"{sql} RETURNING {connection.ops.quote_name(type(objs[0])._meta.pk.column)}", params, using=using)
    for obj, (key,) in zip(objs, keys):
        obj.pk, obj._state.adding, obj._state.db = key, False, using


# psycopg parses a statement's placeholders once and caches the result only for statements with
# at most this many parameters (psycopg/_queries.py, MAX_CACHED_STATEMENT_PARAMS: ORMs' long
# multi-row INSERTs vary too much to cache). Admission's six events (60 values) were parsed
# afresh on every proposal (~0.1 ms); split into equal chunks below the limit, each chunk's
# text is parsed once and prepared once, and the pipeline still sends them in one round trip.
_CACHED_PARAMS_MAX = 50


def _chunks(objs: Sequence[models.Model], connection) -> list[Sequence[models.Model]]:
    """``objs`` in equal chunks (one INSERT each) of at most ``_CACHED_PARAMS_MAX`` values, on
    PostgreSQL; elsewhere the statements run one by one, so fewer is better: one."""
    per_row = len(type(objs[0])._meta.concrete_fields)
    count = -(-len(objs) * per_row // _CACHED_PARAMS_MAX)  # ceiling division
    if connection.vendor != "postgresql" or count <= 1 or per_row > _CACHED_PARAMS_MAX:
        return [objs]
    size = -(-len(objs) // count)
    return [objs[i:i + size] for i in range(0, len(objs), size)]


def _insert_statement(objs: Sequence[models.Model], connection) -> tuple[str, list]:
    model = type(objs[0])
    with_key = objs[0].pk is not None or model._meta.auto_field is None
    sql, fields = _insert_sql(model, len(objs), with_key, connection.alias, connection.vendor)
    # What SQLInsertCompiler does per value: pre_save (auto_now stamps), then the field's prep —
    # skipped for a str in a plain text column, where the prep returns the value itself.
    params = []
    for obj in objs:
        values = obj.__dict__
        for f in fields:
            value = values.get(f.attname) if f.__class__ in _PLAIN_TEXT else None
            params.append(value if value.__class__ is str else f.get_db_prep_save(f.pre_save(obj, True), connection))
    return sql, params


# Exactly these classes (a subclass may prepare differently): str in, the same str out.
_PLAIN_TEXT = frozenset({models.CharField, models.TextField})


@functools.lru_cache(maxsize=256)
def _insert_sql(model, rows: int, with_key: bool, alias: str, vendor: str) -> tuple[str, list]:
    """The INSERT Django's compiler writes for ``rows`` rows of ``model`` (built once, reused).

    An auto-increment key is left to the database, as bulk_create does for unsaved rows.
    """
    connection = connections[alias]
    meta = model._meta
    fields = [f for f in meta.concrete_fields if (with_key or f is not meta.auto_field) and not f.generated]
    quote = connection.ops.quote_name
    placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([placeholders] * rows)}"
    )
    return sql, fields


def select_rows(model: type[models.Model], columns: Sequence[str], where: str, params: Sequence[tuple[str, object]], using: str = "default") -> list[list]:
    """``SELECT columns FROM model WHERE where`` with values converted as the ORM would.

    ``where`` is SQL with ``%s`` placeholders over column names; ``params`` are
    ``(field name, value)`` pairs, each prepared by that field (UUIDs, dates per backend).
    Building a queryset costs ~1 ms of Python per call on this path; this costs a fraction.
    """
    return select_rows_together([(model, columns, where, params)], using=using)[0]


def select_rows_together(reads: Sequence[tuple[type[models.Model], Sequence[str], str, Sequence[tuple[str, object]]]],
                         using: str = "default") -> list[list[list]]:
    """Several ``select_rows`` (``(model, columns, where, params)`` each), their rows in order.
    On PostgreSQL more than one go in one pipeline: one round trip for all (a poll of an
    invocation reads five small tables)."""
    connection = connections[using]
    statements, converters = [], []
    quote = connection.ops.quote_name
    for model, columns, where, params in reads:
        meta = model._meta
        statements.append((
            f"SELECT {', '.join(quote(meta.get_field(c).column) for c in columns)} FROM {quote(meta.db_table)} WHERE {where}",
            [meta.get_field(name).get_db_prep_value(value, connection) for name, value in params],
        ))
        converters.append(_converters(model, tuple(columns), connection.alias, connection.vendor))
    if len(statements) > 1 and connection.vendor == "postgresql":
        results = _selected_in_pipeline(connection, statements)
    else:
        results = [execute_one(sql, params, using=using) for sql, params in statements]
    return [[convert_row(row, convs, connection) for row in rows] for rows, convs in zip(results, converters)]


def _selected_in_pipeline(connection, statements: Sequence[tuple[str, list]]) -> list[list]:
    # One cursor per statement: a cursor keeps only its last statement's rows.
    with _prepared_cursor(connection, ";\n".join(sql for sql, _ in statements)) as first:
        cursors = [first] + [psycopg.Cursor(connection.connection) for _ in statements[1:]]
        try:
            with connection.connection.pipeline():
                for cursor, (sql, params) in zip(cursors, statements):
                    cursor.execute(sql, params, prepare=True)
            return [cursor.fetchall() for cursor in cursors]
        finally:
            for cursor in cursors[1:]:
                cursor.close()


def select_instances(model: type[models.Model], where: str, params: Sequence[tuple[str, object]],
                     using: str = "default") -> list[models.Model]:
    """Instances of ``model`` (every concrete column) that ``where`` selects, built by
    ``Model.from_db`` as a queryset builds them: ``select_rows`` for whole rows."""
    return select_instances_together([(model, where, params)], using=using)[0]


def select_instances_together(reads: Sequence[tuple[type[models.Model], str, Sequence[tuple[str, object]]]],
                              using: str = "default") -> list[list[models.Model]]:
    """Several ``select_instances`` in one round trip (``select_rows_together``)."""
    fields = [model._meta.concrete_fields for model, _, _ in reads]
    rows = select_rows_together([(model, [f.name for f in fs], where, params)
                                 for (model, where, params), fs in zip(reads, fields)], using=using)
    return [[model.from_db(using, [f.attname for f in fs], row) for row in model_rows]
            for (model, _, _), fs, model_rows in zip(reads, fields, rows)]


def remember_related(instance: models.Model, related_name: str, rows: list[models.Model]) -> None:
    """Hold ``rows`` as ``instance``'s ``related_name`` (a reverse foreign key) the way
    ``prefetch_related`` holds them: ``instance.<related_name>.all()`` then reads no database.
    Below Django's public API (``_prefetched_objects_cache``), filled as
    ``prefetch_related_objects`` fills it (docs/architecture.md)."""
    queryset = getattr(instance, related_name).get_queryset()
    queryset._result_cache, queryset._prefetch_done = rows, True
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    cache[related_name] = queryset


def select_with_parent(model: type[models.Model], fk: str, where: str, params: Sequence[tuple[models.Field, object]],
                       using: str = "default") -> list[models.Model]:
    """Instances of ``model`` with the row their foreign key ``fk`` points at, as
    ``select_related(fk)`` loads them: every concrete column of both, one INNER JOIN.

    ``where`` refers to the tables as ``a`` (``model``) and ``b`` (the parent), and may end in
    ``ORDER BY … LIMIT …``; ``params`` are ``(field, value)`` pairs, each value prepared by its
    field. Instances are built by ``Model.from_db`` from values converted as the ORM converts them.
    """
    connection = connections[using]
    sql, fields, parent_fields, converters = _parent_select(model, fk, connection.alias, connection.vendor)
    prepared = [field.get_db_prep_value(value, connection) for field, value in params]
    rows = execute_one(f"{sql} WHERE {where}", prepared, using=using)
    parent_model, split, out = parent_fields[0].model, len(fields), []
    for row in rows:
        values = convert_row(row, converters, connection)
        obj = model.from_db(using, [f.attname for f in fields], values[:split])
        setattr(obj, fk, parent_model.from_db(using, [f.attname for f in parent_fields], values[split:]))
        out.append(obj)
    return out


@functools.lru_cache(maxsize=64)
def _parent_select(model, fk: str, alias: str, vendor: str):
    connection = connections[alias]
    quote = connection.ops.quote_name
    field = model._meta.get_field(fk)
    parent = field.related_model
    fields, parent_fields = list(model._meta.concrete_fields), list(parent._meta.concrete_fields)
    cols = [f.get_col("a") for f in fields] + [f.get_col("b") for f in parent_fields]
    columns = ", ".join(f"a.{quote(f.column)}" for f in fields) + ", " + ", ".join(f"b.{quote(f.column)}" for f in parent_fields)
    sql = (f"SELECT {columns} FROM {quote(model._meta.db_table)} a "
           f"JOIN {quote(parent._meta.db_table)} b ON a.{quote(field.column)} = b.{quote(field.target_field.column)}")
    return sql, fields, parent_fields, column_converters(cols, connection)


def column_converters(cols, connection) -> list[tuple]:
    """Per column (a ``Col`` expression) the backend and field converters a queryset applies."""
    return [(col, connection.ops.get_db_converters(col) + col.get_db_converters(connection)) for col in cols]


def convert_row(row: Sequence, converters: list[tuple], connection) -> list:
    """Database values → Python values, as the ORM converts them (UUIDs, JSON, SQLite dates)."""
    values = list(row)
    for i, (col, convs) in enumerate(converters):
        for convert in convs:
            values[i] = convert(values[i], col, connection)
    return values


@functools.lru_cache(maxsize=64)
def _converters(model, columns: tuple[str, ...], alias: str, vendor: str) -> list[tuple]:
    # Converters keep no state: each call is handed the current connection.
    meta = model._meta
    return column_converters([meta.get_field(name).get_col(meta.db_table) for name in columns], connections[alias])


# --- named statements: the hand-built SQL of the services and front doors lives here ------------
# Each has a test on PostgreSQL and on SQLite (tests/specs/test_sql_statements.py).

def increment_by_pk(model: type[models.Model], field_name: str, pk, amount: int,
                    using: str = "default") -> tuple[str, list]:
    """``UPDATE … SET field = field + amount WHERE pk = …`` as ``(sql, params)``, to be sent in
    another statement's round trip (the worker counts a result's bytes against its run so)."""
    connection = connections[using]
    quote = connection.ops.quote_name
    column = quote(model._meta.get_field(field_name).column)
    return (f"UPDATE {quote(model._meta.db_table)} SET {column} = {column} + %s WHERE {quote(model._meta.pk.column)} = %s",
            [int(amount), model._meta.pk.get_db_prep_value(pk, connection)])


def update_bumping_counter(model: type[models.Model], pk, fields: dict, *, counter: str, by: int,
                           state_field: str = "state", expected_state: str | None = None,
                           returning: bool = True, using: str = "default") -> tuple[str, list]:
    """``UPDATE … SET fields, counter = counter + by WHERE pk = … [AND state = expected]
    [RETURNING counter, state]`` as ``(sql, params)``: the transitions kernel's one statement,
    because the ORM's ``update()`` cannot return the bumped counter (a second read would cost a
    round trip on the hottest path). Values are prepared by each field, as ``update()`` does."""
    connection = connections[using]  # the wrapper itself: each access through the proxy costs µs
    quote = connection.ops.quote_name
    assignments, params = set_clause(model, fields, connection)
    counter_col, state_col = quote(counter), quote(state_field)
    assignments.append(f"{counter_col} = {counter_col} + {int(by)}")
    sql = (f"UPDATE {quote(model._meta.db_table)} SET {', '.join(assignments)} WHERE {quote(model._meta.pk.column)} = %s"
           + (f" AND {state_col} = %s" if expected_state is not None else "")
           + (f" RETURNING {counter_col}, {state_col}" if returning else ""))
    params.append(model._meta.pk.get_db_prep_value(pk, connection))
    if expected_state is not None:
        params.append(expected_state)
    return sql, params


@functools.lru_cache(maxsize=None)
def _locked_read_plan(model: type[models.Model], related: tuple, alias: str, vendor: str):
    connection = connections[alias]
    quote = connection.ops.quote_name
    tables = [("i", model, None)] + [(f"r{n}", rel_model, name) for n, (name, rel_model) in enumerate(related)]
    columns, joins, plan = [], [], []
    for table, table_model, name in tables:
        fields = table_model._meta.concrete_fields
        columns += [f"{table}.{quote(f.column)}" for f in fields]
        plan.append((table_model, name, column_converters([f.get_col(table) for f in fields], connection)))
        if name:
            fk = model._meta.get_field(name)
            joins.append(f"{'LEFT ' if fk.null else ''}JOIN {quote(table_model._meta.db_table)} {table} "
                         f"ON {table}.{quote(table_model._meta.pk.column)} = i.{quote(fk.column)}")
    sql = (f"SELECT {', '.join(columns)} FROM {quote(model._meta.db_table)} i {' '.join(joins)} "
           f"WHERE i.{quote(model._meta.pk.column)} = %s")
    if connection.features.has_select_for_update_of:
        sql += " FOR UPDATE OF i"
    elif connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    return sql, plan


def select_locked_with_related(model: type[models.Model], related: tuple[tuple[str, type[models.Model]], ...], pk,
                               using: str = "default") -> models.Model | None:
    """The row, locked (``FOR UPDATE OF`` it alone), with its ``related`` foreign keys attached as
    ``select_related`` would; None if absent. The same statement as
    ``select_for_update(of=("self",)).select_related(...)``, written out (and built once) because
    compiling that four-model query cost more CPU than all the rest of the worker's claim."""
    connection = connections[using]
    sql, plan = _locked_read_plan(model, related, connection.alias, connection.vendor)
    rows = execute_one(sql, [model._meta.pk.get_db_prep_value(pk, connection)], using=using)
    if not rows:
        return None
    row, obj, start = rows[0], None, 0
    for table_model, name, converters in plan:
        values = convert_row(row[start:start + len(converters)], converters, connection)
        start += len(converters)
        loaded = None if values[0] is None else table_model.from_db(connection.alias, None, values)
        if name is None:
            obj = loaded
        else:
            setattr(obj, name, loaded)  # cached as if select_related had loaded it
    return obj


@functools.lru_cache(maxsize=None)
def _state_message_expiry_plan(invocations, messages, confirmations, alias: str, vendor: str):
    connection = connections[alias]
    quote = connection.ops.quote_name
    sql = (
        f"SELECT i.state, "
        f"(SELECT m.message_bytes FROM {quote(messages._meta.db_table)} m WHERE m.invocation_id = i.id AND m.format = %s LIMIT 1), "
        f"(SELECT c.expires_at FROM {quote(confirmations._meta.db_table)} c WHERE c.invocation_id = i.id AND c.state = %s "
        f"ORDER BY c.created_at LIMIT 1) "
        f"FROM {quote(invocations._meta.db_table)} i WHERE i.id = %s AND i.subject_id = %s"
    )
    cols = [invocations._meta.get_field("state").get_col("i"), messages._meta.get_field("message_bytes").get_col("m"),
            confirmations._meta.get_field("expires_at").get_col("c")]
    return sql, column_converters(cols, connection)


def state_message_and_pending_expiry(invocations, messages, confirmations, *, invocation_id, subject_id,
                                     message_format: str, pending: str, using: str = "default") -> tuple | None:
    """``(state, stored tool message in message_format, expiry of the oldest pending
    confirmation)`` of one of a subject's invocations, in one indexed read (the MCP front door's
    wait loop runs it after every wake-up; the same queryset cost ~1.5 ms of CPU); None if absent."""
    connection = connections[using]
    sql, converters = _state_message_expiry_plan(invocations, messages, confirmations, connection.alias, connection.vendor)
    rows = execute_one(sql, [message_format, pending, invocations._meta.pk.get_db_prep_value(invocation_id, connection),
                             invocations._meta.get_field("subject").target_field.get_db_prep_value(subject_id, connection)],
                     using=using)
    return tuple(convert_row(rows[0], converters, connection)) if rows else None


# --- storage facts the services need, so none of them reads Django's private model API -----------

def model_field(model: type[models.Model], name: str) -> models.Field:
    """A model's field by name (``"pk"``: its primary key), e.g. to prepare a ``select_rows`` parameter."""
    return model._meta.pk if name == "pk" else model._meta.get_field(name)


def field_max_length(model: type[models.Model], name: str) -> int | None:
    return model._meta.get_field(name).max_length


def column_attnames(model: type[models.Model]) -> tuple[str, ...]:
    """The attribute names of the model's columns, in table order (a lean read's column list)."""
    return tuple(f.attname for f in model._meta.concrete_fields)


def field_names(model: type[models.Model]) -> list[str]:
    return [f.name for f in model._meta.fields]


def has_field(model: type[models.Model], name: str) -> bool:
    return any(f.name == name for f in model._meta.get_fields())


def pk_from_text(model: type[models.Model], value):
    """The value as the model's primary key type (raises ``ValidationError`` when it is not one)."""
    return model._meta.pk.to_python(value)


def permission_codenames(model: type[models.Model]) -> list[str]:
    """The object permissions a model declares (``Meta.permissions``)."""
    return [codename for codename, _ in model._meta.permissions]


def table_name(model: type[models.Model], using: str = "default") -> str:
    """The model's table, quoted for the database (maintenance statements such as VACUUM, COPY)."""
    return connections[using].ops.quote_name(model._meta.db_table)


def quoted(name: str, using: str = "default") -> str:
    return connections[using].ops.quote_name(name)


def column_names(model: type[models.Model]) -> list[tuple[str, models.Field]]:
    """``(column, field)`` of the model's concrete fields, in table order (bulk loaders)."""
    return [(f.column, f) for f in model._meta.concrete_fields]
