"""Running a batch's transaction on the event loop's own thread, over a second connection.

Shipping a transaction to the aiosqlite connection's thread costs more CPU than most verbs'
SQL: a queue put that wakes the thread, a wake-up of the loop through its self-pipe, two
context switches, and caches gone cold on both sides (``docs/performance.md``). So a store
whose file is in WAL mode with ``synchronous=NORMAL`` opens a second, plain `sqlite3`
connection to it for the loop's thread (`Inline`), and a group-commit batch of light write
verbs runs there, in one call, no hop, when:

- the write lock is free now: the connection's busy timeout is zero, so ``BEGIN IMMEDIATE``
  never waits; if another connection holds the lock, the batch goes to the thread, which
  waits for it with the store's busy timeout (the loop never waits for a lock);
- no checkpoint is due (below), and the batch holds no read and no heavy verb (a rebuild,
  a sweep: `SqliteStore` sends those to the thread).

Why it cannot block the loop: with ``synchronous=NORMAL`` a WAL commit writes the log without
syncing it (``FULL`` syncs at every commit, so such a store has no `Inline`); and this
connection never checkpoints by itself (``wal_autocheckpoint = 0``): it counts the rows it
wrote, and past `CHECKPOINT_CHANGES` the next batch goes to the thread, which runs a passive
checkpoint after its commit (`agentq.store.sqlite.batch`). Why it is safe: batches take turns
(`GroupCommit`), so the two connections never write at once, and each commit is done before
its callers hear of it, so a read on the thread's connection sees every write whose verb
returned. WAL lets that read run while this connection writes.

If a verb of the batch raised after writing, the batch needs a SAVEPOINT per verb
(`agentq.store.sqlite.transact.transact`): its transaction is rolled back here and the batch
runs again on the thread.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal

import agentq.store.sqlite.transact as sqlite_transact
from agentq.store.sqlite.tx import SqliteTx

__all__ = ["CHECKPOINT_CHANGES", "Inline", "checkpoint"]

CHECKPOINT_CHANGES = 500
"""Rows the loop's connection writes (``total_changes``) before the next batch checkpoints the
WAL on the thread: about SQLite's own 1000-page threshold (a row dirties one to three pages)."""



def checkpoint(conn: sqlite3.Connection) -> None:
    """``PRAGMA wal_checkpoint(PASSIVE)`` on the connection's thread: copy what the WAL holds
    into the database file, as far as no reader needs it; never waits. A checkpoint that
    fails is left to the next one (nobody waits for it)."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


class Inline:
    """The loop thread's connection to a store's file, and when a batch may use it.

    Use it on the event loop's thread only (`sqlite3` checks).

    Args:
        path: The database file, already open in WAL mode and migrated by the store.
    """

    __slots__ = ("_checkpointed", "conn")

    def __init__(self, path: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self._checkpointed = 0  # total_changes at the last checkpoint

    def checkpoint_due(self) -> bool:
        """Whether the next batch must go to the thread and checkpoint there; if so, the count
        starts again (the caller makes sure that batch checkpoints)."""
        changes = self.conn.total_changes
        if changes - self._checkpointed < CHECKPOINT_CHANGES:
            return False
        self._checkpointed = changes
        return True

    def run(
        self, fns: Sequence[Callable[[SqliteTx], Any]]
    ) -> list[sqlite_transact.Outcome] | Literal["busy", "savepoints"]:
        """Run the verbs `fns` in one transaction on this thread, if the write lock is free.

        Returns:
            One outcome per verb (as `agentq.store.sqlite.transact.transact`), or why the
            batch must run on the connection's thread instead: ``"busy"`` (another connection
            holds the lock; nothing ran) or ``"savepoints"`` (a verb raised after writing;
            rolled back here).
        """
        return sqlite_transact.try_transact(self.conn, fns)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self.conn.close()
