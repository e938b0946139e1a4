"""Opening the store a command names: a SQLite path or a PostgreSQL DSN, never a new store.

No command creates a store: a SQLite file that does not exist, or a PostgreSQL schema that
holds no agentq tables (a mistyped ``--pg-schema``), is refused with one line naming it,
before anything is written. Stores are made by the programs that run workflows
(`SqliteStore.open`, `PostgresStore.open`); the command line reads and records in them.

`Refused` is how every command says "no" (exit code 1, one line on stderr): a store that cannot
be opened, an unknown workflow, a verb the store refuses.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path

from agentq.errors import AgentqError, StoreError
from agentq.extras import require
from agentq.store import DurableStore, PostgresStore, SqliteStore

__all__ = ["DSN_PREFIXES", "Refused", "is_dsn", "open_store"]

DSN_PREFIXES = ("postgresql://", "postgres://")
"""How a STORE argument that is a PostgreSQL URI begins."""

_CONNINFO = re.compile(r"\s*(\w+\s*=\s*('[^']*'|\S+)\s*)+")
_CONNINFO_KEYS = frozenset({"host", "hostaddr", "port", "dbname", "user", "service"})


def is_dsn(target: str) -> bool:
    """Whether STORE names a PostgreSQL database: a URI (``postgresql://…``), or libpq's
    ``key=value`` form (``host=db dbname=app user=agentq``) that is not an existing file."""
    if target.startswith(DSN_PREFIXES):
        return True
    if not _CONNINFO.fullmatch(target) or Path(target).exists():
        return False
    keys = {part.split("=", 1)[0].strip() for part in target.split() if "=" in part}
    return bool(keys & _CONNINFO_KEYS)


class Refused(AgentqError):
    """A command cannot do what it was asked; the message is the one line shown (exit 1)."""


async def open_store(target: str, *, schema: str = "agentq") -> DurableStore:
    """Open the store named on the command line; never creates one.

    A PostgreSQL schema must already hold agentq's tables (``agentq_schema``, the version
    table every agentq store has); it is then opened as `PostgresStore.open` does (migrated
    if an older agentq made it).

    Args:
        target: A PostgreSQL DSN (a ``postgresql://…`` or ``postgres://…`` URI, or libpq's
            ``key=value`` form; see `is_dsn`) or the path of an existing agentq SQLite file.
        schema: The PostgreSQL schema agentq's tables are in (ignored for SQLite).

    Returns:
        The open store; the caller closes it.

    Raises:
        Refused: The path does not exist, is a directory, is empty or is not an agentq
            database; the PostgreSQL schema does not exist or holds no agentq store (the
            message names it); or the store failed to open: a wrong DSN, an unreachable
            server, psycopg missing (the message names the cause, never the DSN's
            password).
    """
    if await asyncio.to_thread(is_dsn, target):
        return await _open_postgres(target, schema)
    path = await asyncio.to_thread(_check_path, target)
    try:
        return await SqliteStore.open(path)
    except AgentqError as exc:
        raise Refused(f"cannot open {target!r}: {exc}") from exc


def _check_path(target: str) -> Path:
    """Refuse a path that is missing, a directory, empty or not a SQLite file."""
    path = Path(target)
    if not path.exists():
        raise Refused(
            f"no such file: {target!r} (the command line never creates a database; "
            "give the path of an existing agentq SQLite file or a postgresql:// DSN)"
        )
    if path.is_dir():
        raise Refused(f"{target!r} is a directory, not an agentq SQLite file")
    if path.stat().st_size == 0:
        raise Refused(f"{target!r} is empty, not an agentq database")
    _check_sqlite(path)
    return path


_AGENTQ_TABLES = frozenset({"events", "workflows", "steps"})
"""Tables every agentq SQLite store has (at every schema version the store migrates from)."""


def _check_sqlite(path: Path) -> None:
    """Refuse a file that is not an agentq SQLite store, before the store opens it.

    The check reads the file through a read-only connection (``mode=ro``): a refused file is
    left byte for byte as it was (the store's own connection would switch it to WAL, and its
    migrations would create agentq's tables in a database that has none).

    Raises:
        Refused: SQLite cannot read the file, or it lacks agentq's tables (a blank database
            or another program's), naming the tables it has.
    """
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {
                name
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                ).fetchall()
            }
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise Refused(f"{str(path)!r} is not a SQLite database ({exc})") from exc
    if not _AGENTQ_TABLES.issubset(tables):
        found = ", ".join(sorted(tables)[:8]) if tables else "no tables"
        raise Refused(
            f"{str(path)!r} is a SQLite database, not an agentq database (it has "
            f"{found}); the file was left as it was"
        )


async def _open_postgres(dsn: str, schema: str) -> DurableStore:
    try:
        await asyncio.to_thread(_check_schema, dsn, schema)
        return await PostgresStore.open(dsn, schema=schema)
    except Refused:
        raise
    except AgentqError as exc:  # StoreError, SchemaError, MissingExtraError (no psycopg)
        raise Refused(f"cannot open the PostgreSQL store: {exc}") from exc


def _check_schema(dsn: str, schema: str) -> None:
    """Refuse a PostgreSQL schema without agentq's version table, before the store's
    migrations would create it (blocking: run on a worker thread).

    Raises:
        Refused: No such schema, or no agentq store in it.
        StoreError: The server could not be reached (``PostgresStore.open``'s own wording).
        MissingExtraError: psycopg is not installed.
    """
    psycopg = require("psycopg", "postgres")
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            found = conn.execute(
                "SELECT n.nspname IS NOT NULL, c.relname IS NOT NULL FROM (SELECT 1) AS one"
                " LEFT JOIN pg_namespace AS n ON n.nspname = %s"
                " LEFT JOIN pg_class AS c ON c.relnamespace = n.oid"
                " AND c.relname = 'agentq_schema'",
                (schema,),
            ).fetchone()
    except psycopg.Error as exc:
        raise StoreError(str(exc)) from exc
    schema_exists, has_store = found if found is not None else (False, False)
    if not schema_exists:
        raise Refused(
            f"no schema {schema!r} in that PostgreSQL database (the command line never "
            "creates a store; check --pg-schema)"
        )
    if not has_store:
        raise Refused(f"schema {schema!r} of that PostgreSQL database holds no agentq store")
