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

A large batch (many concurrent callers) stays here too: shipping it to the thread so that the
loop goes on meanwhile does not use the second core, since the rules' Python on the thread
takes the GIL from the loop and only SQLite's own C code (~8% of a durable agent run's CPU)
runs beside it; measured, the hop costs more CPU than the overlap saves
(``docs/performance.md``, "Concurrent runs and the second core").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal

import agentq.store.sqlite.transact as sqlite_transact
from agentq.store.sqlite.tx import SqliteTx

__all__ = ["CHECKPOINT_CHANGES", "CHECKPOINT_FRAMES", "RESTART_FRAMES", "Inline", "checkpoint"]

CHECKPOINT_CHANGES = 500
"""Rows the loop's connection writes (``total_changes``) before the next batch checkpoints the
WAL on the thread: about SQLite's own 1000-page threshold (a row dirties one to three pages)."""

CHECKPOINT_FRAMES = 1000
"""A WAL of at least this many frames (pages) after a checkpoint keeps the next batch going to
the thread to checkpoint again: SQLite's own ``wal_autocheckpoint`` threshold."""


RESTART_FRAMES = 4 * CHECKPOINT_FRAMES
"""A WAL still this large after a passive checkpoint gets a ``RESTART`` one next: readers of
other processes that keep the WAL busy (a loop of reads beside the writes) let a passive
checkpoint copy frames but never let the WAL start again from the beginning."""


def checkpoint(conn: sqlite3.Connection, restart: bool = False) -> int | None:
    """``PRAGMA wal_checkpoint(PASSIVE)`` on the connection's thread: copy what the WAL holds
    into the database file, as far as no reader needs it; never waits. With `restart`, a
    ``RESTART`` checkpoint instead: it waits (the connection's busy timeout, on this thread,
    never the loop's) until every reader reads the latest snapshot, so that the next write
    starts the WAL again from its beginning.

    Returns:
        The frames in the WAL (which a later write starts again from the beginning once
        every frame is copied and no reader needs them), or None if the checkpoint failed;
        a failed one is left to the next batch (nobody waits for it).
    """
    try:
        mode = "RESTART" if restart else "PASSIVE"
        row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    except sqlite3.Error:
        return None
    return int(row[1]) if row is not None else None


class Inline:
    """The loop thread's connection to a store's file, and when a batch may use it.

    Use it on the event loop's thread only (`sqlite3` checks).

    Args:
        path: The database file, already open in WAL mode and migrated by the store.
    """

    __slots__ = ("_checkpointed", "_wal_large", "conn", "restart")

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
        self._wal_large = False  # the last checkpoint left a large WAL (or failed)
        self.restart = False  # the next checkpoint is a RESTART one

    def checkpoint_due(self) -> bool:
        """Whether the next batch must go to the thread and checkpoint there; if so, the count
        starts again (the caller makes sure that batch checkpoints, and tells `checkpointed`).

        Due after `CHECKPOINT_CHANGES` rows written here, and after every batch while the last
        checkpoint left `CHECKPOINT_FRAMES` or more in the WAL: as SQLite's autocheckpoint
        tries after every commit, so that a checkpoint overlapping another process's reader
        (which cannot copy every frame, nor let the WAL start again) is tried again at once,
        and the WAL stays bounded while other processes read and write the file."""
        changes = self.conn.total_changes
        if not self._wal_large and changes - self._checkpointed < CHECKPOINT_CHANGES:
            return False
        self._checkpointed = changes
        return True

    def checkpointed(self, frames: int | None) -> None:
        """What a due checkpoint left in the WAL (`checkpoint`'s answer; None: it failed)."""
        self._wal_large = frames is None or frames >= CHECKPOINT_FRAMES
        self.restart = frames is not None and frames >= RESTART_FRAMES

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
