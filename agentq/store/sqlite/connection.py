"""The store's aiosqlite connection: opening it, and running a function on its thread.

`connect` opens the file, sets the pragmas (`prepare`: WAL, ``synchronous``, the busy timeout)
and migrates it, all in one call on the connection's thread. Before it changes anything, a
read alone refuses another program's database (or a newer agentq's): such a file is left as it
was, in its own journal mode (issue 20 item 13). `on_thread` runs any function
over the raw `sqlite3` connection on that thread, in one hop: every transaction and every
read of `SqliteStore` goes through it.

A store nobody closes must not keep the process alive nor leak its thread: `daemonize` makes
the thread a daemon before it starts, and `release` closes the connection and ends the thread
from a finalizer, with no event loop (issue 9 item 10).

Reads and writes share this one connection and its thread, so a read sees every write
submitted before it, in submission order (what deterministic tests and `recover` rely on). A
second, read-only connection was measured: with a reader polling every 2 ms beside 4 writing
workflows, p95 read latency fell from 1.3-1.8 ms to 0.4 ms, but a read could then miss a write
submitted just before it; not worth that.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar, cast

from agentq.errors import StoreError
from agentq.extras import require
from agentq.store.sqlite.schema import migrate, refuse_foreign
from agentq.store.sqlite.tx import BEGIN_ATTEMPTS, is_busy

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["connect", "daemonize", "on_thread", "prepare", "release"]

T = TypeVar("T")


async def on_thread(db: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``fn(raw sqlite3 connection)`` on the connection's thread: one hop in all.

    This is the one use of aiosqlite's private API: `Connection._execute(fn, *args)`, the
    dispatch under all its public methods, and `Connection._conn`, the `sqlite3` connection it
    serves. Going through the public API would cost a thread hop per statement.
    ``tests/store/test_sqlite.py::test_aiosqlite_private_api`` fails loudly if aiosqlite
    changes either.
    """
    return cast(T, await db._execute(fn, db._conn))  # type: ignore[no-untyped-call]


def daemonize(db: aiosqlite.Connection) -> None:
    """Make the thread of a connection not started yet a daemon (issue 9 item 10).

    aiosqlite's thread is not a daemon, so a store never closed kept the interpreter alive
    for ever: Python waits for every non-daemon thread before it exits. As a daemon, the
    thread ends with the process; every transaction committed before is in the file (SQLite
    is crash-safe, and a process exit is no worse than a crash). The thread is
    ``Connection._thread`` (aiosqlite 0.21 and later), or the connection itself (0.20, where
    `Connection` subclasses `threading.Thread`).
    """
    thread = getattr(db, "_thread", db)
    if isinstance(thread, threading.Thread) and not thread.is_alive():
        thread.daemon = True


def release(db: aiosqlite.Connection) -> None:
    """Close the file of a connection nobody will close, and end its thread; no loop needed.

    For a store garbage-collected unclosed (`SqliteStore.__del__`), from whatever thread the
    collector runs on: it queues, behind anything already queued, a call that closes the raw
    `sqlite3` connection on its own thread and stops the thread, with no future to resolve
    (aiosqlite's own ``stop()`` would bind one to an event loop that may be closed by then).
    Clearing ``Connection._connection`` leaves aiosqlite's ``__del__`` nothing to warn about.
    These are aiosqlite internals (``_connection``, ``_running``, ``_tx`` and the worker's
    stop sentinel), checked by ``tests/store/test_sqlite.py::test_aiosqlite_private_api``.
    """
    raw = getattr(db, "_connection", None)
    tx = getattr(db, "_tx", None)
    if tx is None:
        return
    core = sys.modules.get("aiosqlite.core")
    stop = getattr(core, "_STOP_RUNNING_SENTINEL", None)
    db._running = False
    db._connection = None

    def close() -> object:
        if raw is not None:
            raw.close()
        return stop

    tx.put_nowait((None, close))


def prepare(conn: sqlite3.Connection, name: str, busy_ms: int, synchronous: str) -> str:
    """Set the pragmas of a new connection and migrate; return the journal mode in use.

    A file that is not this agentq's to write (`refuse_foreign`) is refused before any pragma
    that persists in the file (WAL does) is set.
    """
    conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
    refuse_foreign(conn, name)
    mode = "?"
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            break
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    migrate(conn, name)
    return mode


async def connect(
    path: str, busy_timeout: float, synchronous: str
) -> tuple[aiosqlite.Connection, str]:
    """Open `path`, set the pragmas and migrate; return the connection and its journal mode.

    Raises:
        SchemaError: The file has a newer or foreign schema.
        StoreError: SQLite failed (not a database, no permission, …).
        MissingExtraError: aiosqlite is not installed (``pip install 'agentq[sqlite]'``).
    """
    lib = require("aiosqlite", "sqlite")
    try:
        db: aiosqlite.Connection = lib.connect(path, isolation_level=None)
        daemonize(db)
        await db
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path!r}: {exc}") from exc
    try:
        opening = partial(
            prepare, name=repr(path), busy_ms=int(busy_timeout * 1000), synchronous=synchronous
        )
        return db, await on_thread(db, opening)
    except BaseException as exc:
        await db.close()
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot open {path!r}: {exc}") from exc
        raise
