"""The SQLite file's schema: the migrations in ``schema.sql`` and `migrate`.

``schema.sql`` is a list of ``-- migration N`` sections; the file's version lives in
``PRAGMA user_version``. `migrate` brings an older file up to `SCHEMA_VERSION` in one
``BEGIN IMMEDIATE`` transaction (so two processes opening an old file migrate it once) and
refuses a newer or a foreign file; `refuse_foreign` is the same refusal by a read alone, which
the store runs before it changes anything in the file (its journal mode). A section holding
the line ``-- agentq: rebuild projection`` changes what the projection derives from the log:
after the statements (of every migration the file gets), an older file's ``workflows``,
``steps`` and ``calls`` are rebuilt from its log in the same transaction.
Synchronous: it runs on the connection's thread when the store opens the file
(`agentq.store.sqlite.connection`).
"""

from __future__ import annotations

import sqlite3
from importlib import resources

from agentq.errors import SchemaError
from agentq.store.sqlite.tx import SqliteTx, begin, rebuild, rollback

__all__ = [
    "REBUILD_MARK",
    "SCHEMA_VERSION",
    "migrate",
    "migrations",
    "rebuilds",
    "refuse_foreign",
]

REBUILD_MARK = "-- agentq: rebuild projection"
"""The line in a migration section that asks for the projection to be rebuilt from the log."""


def _parse() -> tuple[list[list[str]], list[bool]]:
    text = resources.files("agentq.store.sqlite").joinpath("schema.sql").read_text("utf-8")
    out: list[list[str]] = []
    rebuild_after: list[bool] = []
    statement = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("-- migration "):
            if int(line.split()[2]) != len(out) + 1:
                raise SchemaError(f"schema.sql: migrations out of order at {line.strip()!r}")
            out.append([])
            rebuild_after.append(False)
            continue
        if out and not statement and line.strip() == REBUILD_MARK:
            rebuild_after[-1] = True
            continue
        if not out or (not statement and (not line.strip() or line.startswith("--"))):
            continue
        statement += line
        if sqlite3.complete_statement(statement):
            out[-1].append(statement.strip())
            statement = ""
    return out, rebuild_after


def migrations() -> list[list[str]]:
    """Return the statements of each migration in ``schema.sql``; index 0 is version 1."""
    return _parse()[0]


def rebuilds() -> list[bool]:
    """Return, per migration, whether an older file's projection is rebuilt after it."""
    return _parse()[1]


_MIGRATIONS, _REBUILDS = _parse()
SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this agentq writes (``PRAGMA user_version``)."""


def refuse_foreign(conn: sqlite3.Connection, name: str) -> int:
    """Refuse a file this agentq must not write to, reading only; return its version.

    Reads ``PRAGMA user_version`` and the file's tables and their columns: a new or empty
    file (version 0, no tables) passes, as does an agentq file this agentq can read, whose
    tables are those agentq's migrations up to its version made (extra tables aside).
    Whatever the version, another program's database is refused before anything changes.

    Raises:
        SchemaError: The file has a newer version than this agentq knows, tables of its own
            and no agentq schema version, or a version without agentq's tables (another
            program's database).
        sqlite3.DatabaseError: The file is not a SQLite database.
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{name} has schema version {version}; this agentq reads versions up to "
            f"{SCHEMA_VERSION}: upgrade agentq"
        )
    tables = _tables(conn)
    if version == 0 and tables:
        raise SchemaError(
            f"{name} is not an agentq database (it has tables {sorted(tables)[:5]} "
            "and no agentq schema version); refusing to add agentq's tables to it"
        )
    if version < 0:
        raise SchemaError(f"{name} is not an agentq database (user_version {version})")
    if version > 0:
        missing = [
            table
            for table, columns in _tables_at(version).items()
            if not columns <= tables.get(table, set())
        ]
        if missing:
            raise SchemaError(
                f"{name} is not an agentq database: its user_version is {version}, but it "
                f"lacks agentq's tables (or their columns) {sorted(missing)[:5]}; refusing "
                "to change it"
            )
    return version


def _tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
    """The file's tables (not SQLite's own) and the names of their columns."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        table: {str(row[1]) for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,))}
        for table in names
    }


def _tables_at(version: int) -> dict[str, set[str]]:
    """The tables (and columns) agentq's migrations up to `version` make, in a scratch
    in-memory database."""
    scratch = sqlite3.connect(":memory:")
    try:
        for statements in _MIGRATIONS[:version]:
            for statement in statements:
                scratch.execute(statement)
        return _tables(scratch)
    finally:
        scratch.close()


def migrate(conn: sqlite3.Connection, name: str) -> None:
    """Bring the file to `SCHEMA_VERSION`, in one transaction.

    Raises:
        SchemaError: The file has a newer version than this agentq knows, or is not an
            agentq database that can be migrated.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    begin(conn)
    try:
        # again, under the lock: another process may have migrated while we waited for it
        version = refuse_foreign(conn, name)
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        if version > 0 and any(_REBUILDS[version:]):
            try:
                rebuild(SqliteTx(conn))
            except (ValueError, KeyError, TypeError) as exc:  # a log replay cannot follow
                raise SchemaError(
                    f"cannot migrate {name} from schema version {version} to "
                    f"{SCHEMA_VERSION}: its event log cannot be replayed ({exc})"
                ) from exc
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        rollback(conn)
        raise SchemaError(
            f"cannot migrate {name} from schema version {version} to {SCHEMA_VERSION}: {exc}"
        ) from exc
    except BaseException:
        rollback(conn)
        raise
