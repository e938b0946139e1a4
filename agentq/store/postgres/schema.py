"""The PostgreSQL schema: the migrations in ``schema.sql`` (in this package) and `migrate`.

``schema.sql`` is a list of ``-- migration N`` sections; a database's version lives in
the one row of ``agentq_schema``, inside agentq's own PostgreSQL schema (``agentq`` unless
`PostgresStore` is given another). `migrate` runs when a store opens: it takes an advisory lock
(``pg_advisory_lock``) on a key derived from the schema's name, then, in one transaction, reads
the version, applies the sections after it and records the new one, and releases the lock; so
several processes opening one new database at once migrate it exactly once (the others wait
for the lock, then find it done).

The lock is the session's, taken before the transaction begins, not
``pg_advisory_xact_lock`` inside it: a transaction that waited for the lock would still
resolve table names from the catalog cache of before the wait (it found no agentq tables
then) and fail on the tables the other process just created; a transaction begun after the
wait reads the catalog afresh. If the connection dies, the server releases the lock.

A newer version, or a schema with tables but no ``agentq_schema``, is refused with
`SchemaError`.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from agentq.errors import SchemaError

if TYPE_CHECKING:
    import psycopg

__all__ = ["SCHEMA_VERSION", "migrate", "migrations"]


def _parse() -> list[list[str]]:
    text = resources.files("agentq.store.postgres").joinpath("schema.sql").read_text("utf-8")
    out: list[list[str]] = []
    statement = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("-- migration "):
            if int(line.split()[2]) != len(out) + 1:
                raise SchemaError(
                    f"postgres/schema.sql: migrations out of order at {line.strip()!r}"
                )
            out.append([])
            continue
        if not out or (not statement and (not line.strip() or line.startswith("--"))):
            continue
        statement += line
        # A statement ends with ";" at the end of a line, outside a $$ function body.
        if line.rstrip().endswith(";") and statement.count("$$") % 2 == 0:
            out[-1].append(statement.strip())
            statement = ""
    return out


def migrations() -> list[list[str]]:
    """Return the statements of each migration; index 0 is version 1."""
    return [list(m) for m in _MIGRATIONS]


_MIGRATIONS = _parse()
SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this agentq writes (the row of ``agentq_schema``)."""


def _version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The version recorded in `schema`, or None when it has no ``agentq_schema`` table."""
    found = conn.execute(
        "SELECT to_regclass(format('%%I.agentq_schema', %s::text))", (schema,)
    ).fetchone()
    if found is None or found[0] is None:
        return None
    row = conn.execute("SELECT version FROM agentq_schema").fetchone()
    return None if row is None else int(row[0])


def migrate(conn: psycopg.Connection[Any], schema: str, name: str) -> None:
    """Bring `schema` to `SCHEMA_VERSION`, in one transaction under an advisory lock.

    `conn` is in autocommit mode, its ``search_path`` set to `schema` (which may not exist
    yet); `name` names the database in messages.

    Raises:
        SchemaError: The schema has a newer version than this agentq knows, or holds tables
            that are not agentq's.
        psycopg.Error: The server failed (the caller wraps it in `StoreError`).
    """
    if _version(conn, schema) == SCHEMA_VERSION:
        return
    lock = ("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"agentq migrate {schema}",))
    conn.execute(*lock)  # waits while another process migrates
    try:
        with conn.transaction():  # begun after the wait: sees that process's tables
            _migrate(conn, schema, name)
    finally:
        conn.execute(lock[0].replace("pg_advisory_lock", "pg_advisory_unlock"), lock[1])


def _migrate(conn: psycopg.Connection[Any], schema: str, name: str) -> None:
    version = _version(conn, schema)  # another process may have migrated meanwhile
    if version == SCHEMA_VERSION:
        return
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaError(
            f"{name} has agentq schema version {version} in schema {schema!r}; this "
            f"agentq reads versions up to {SCHEMA_VERSION}: upgrade agentq"
        )
    if version is None:
        foreign = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        ]
        if foreign:
            raise SchemaError(
                f"{name} has a schema {schema!r} with tables {sorted(foreign)[:5]} and no "
                "agentq schema version; refusing to add agentq's tables to it (give "
                "PostgresStore another schema=)"
            )
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if exists.fetchone() is None:  # CREATE needs the database's CREATE privilege
            conn.execute(f'CREATE SCHEMA "{schema}"')
        version = 0
    for statements in _MIGRATIONS[version:]:  # one round trip per migration
        if statements:  # a migration of comments only has nothing to run
            conn.execute("\n".join(statements))
    conn.execute("UPDATE agentq_schema SET version = %s", (SCHEMA_VERSION,))
