"""Opening the store a command names: a SQLite path or a PostgreSQL DSN, never a new file.

`Refused` is how every command says "no" (exit code 1, one line on stderr): a store that cannot
be opened, an unknown workflow, a verb the store refuses.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
from pathlib import Path

from agentq.errors import AgentqError
from agentq.store import DurableStore, SqliteStore

__all__ = ["DSN_PREFIXES", "Refused", "open_store"]

DSN_PREFIXES = ("postgresql://", "postgres://")
"""How a STORE argument that is a PostgreSQL DSN begins (anything else is a SQLite path)."""


class Refused(AgentqError):
    """A command cannot do what it was asked; the message is the one line shown (exit 1)."""


async def open_store(target: str) -> DurableStore:
    """Open the store named on the command line, without creating anything.

    Args:
        target: A PostgreSQL DSN (``postgresql://…`` or ``postgres://…``) or the path of an
            existing agentq SQLite file.

    Returns:
        The open store; the caller closes it.

    Raises:
        Refused: The path does not exist, is a directory, is empty or is not an agentq
            database; the DSN names PostgreSQL but this agentq has no `PostgresStore`; or the
            store failed to open (the message names the target and the cause).
    """
    if target.startswith(DSN_PREFIXES):
        return await _open_postgres(target)
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


def _check_sqlite(path: Path) -> None:
    """Refuse a file that SQLite cannot read, before agentq's migrations would touch it."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise Refused(f"{str(path)!r} is not a SQLite database ({exc})") from exc


async def _open_postgres(dsn: str) -> DurableStore:
    store_module = importlib.import_module("agentq.store")
    postgres = getattr(store_module, "PostgresStore", None)
    if postgres is None:
        raise Refused(
            "this agentq has no PostgresStore yet: give the path of an agentq SQLite file"
        )
    try:
        store: DurableStore = await postgres.open(dsn)
    except AgentqError as exc:
        raise Refused(f"cannot open the PostgreSQL store: {exc}") from exc
    return store
