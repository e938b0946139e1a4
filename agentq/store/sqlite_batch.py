"""A group-commit batch: the verbs of one SQLite transaction and the callers waiting for them.

How a write travels through `SqliteStore` (see ``docs/store.md``):

- Each verb is a transition rule run synchronously over the raw `sqlite3` connection inside
  ``BEGIN IMMEDIATE … COMMIT``; the whole transaction is ONE call on aiosqlite's connection
  thread, so a verb costs one thread hop, not one per statement.
- Group commit: verbs that arrive while a transaction is in flight wait (an `Op` each), and the
  first of them leads the next transaction with all of them (a `Batch`), each in its own
  SAVEPOINT (a refused verb is rolled back alone). No background task: the waiting callers
  take turns leading.
- Cancel safety: a caller cancelled before its verb was taken leaves the queue; once taken,
  the transaction completes and the other callers get their results.
- Reads run on the same thread, after every write submitted before them: straight onto the
  thread's queue, or, when verbs are waiting for the next batch, in that batch after its
  commit.

`SqliteStore` owns the queue of waiting ops and whose turn it is to lead; a `Batch` owns its
ops' outcomes, written on the connection thread and delivered once on the event loop.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import agentq.store.sqlite_tx as sqlite_tx

__all__ = ["DONE", "LEAD", "Batch", "Op"]

LEAD = "lead"
"""`Op.signal` result: the op's caller leads the next batch."""
DONE = "done"
"""`Op.signal` result: the op's outcome is in `Op.outcome`."""


class Op:
    """One verb (or a read queued behind verbs) waiting for, or inside, a batch."""

    __slots__ = ("fn", "outcome", "read", "signal", "taken")

    def __init__(self, fn: Callable[[Any], Any], read: bool, signal: asyncio.Future[str]) -> None:
        self.fn = fn  # fn(SqliteTx) for a verb, fn(sqlite3.Connection) for a read
        self.read = read
        self.signal = signal
        self.taken = False
        self.outcome: sqlite_tx.Outcome = (False, None)


class Batch:
    """The ops of one transaction: run on the connection thread, delivered once on the loop.

    `outcomes` is written on the connection thread; `orphaned` is set on the loop when the
    leader was cancelled while the batch ran. The lock makes the two hand over exactly once:
    either the leader delivers when its call returns, or (orphaned) the thread sends the
    delivery back to the loop.
    """

    __slots__ = ("_lock", "delivered", "ops", "orphaned", "outcomes")

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.outcomes: list[sqlite_tx.Outcome] | None = None
        self.orphaned = False
        self.delivered = False
        self._lock = threading.Lock()

    def run(self, conn: sqlite3.Connection, when_orphaned: Callable[[], None]) -> None:
        """Run the verbs in one transaction, then the reads (on the connection thread).

        If the leader was cancelled meanwhile, call `when_orphaned` (which must be safe to
        call from this thread) so that the outcomes still reach the other callers.
        """
        verbs = [op.fn for op in self.ops if not op.read]
        done = iter(sqlite_tx.transact(conn, verbs) if verbs else ())
        outcomes = [sqlite_tx.read(conn, op.fn) if op.read else next(done) for op in self.ops]
        with self._lock:
            self.outcomes = outcomes
            orphaned = self.orphaned
        if orphaned:
            when_orphaned()

    def orphan(self) -> bool:
        """Mark the leader cancelled; return whether the outcomes are in already."""
        with self._lock:
            self.orphaned = True
            return self.outcomes is not None

    def fail(self, exc: BaseException) -> None:
        """Give every op `exc` as its outcome (the batch never reached the thread)."""
        self.outcomes = [(False, exc) for _ in self.ops]

    def deliver(self) -> bool:
        """Hand each op its outcome and wake its caller, once.

        Returns:
            True if this call delivered; False if the outcomes are not in yet or were
            delivered already.
        """
        if self.delivered or self.outcomes is None:
            return False
        self.delivered = True
        for op, outcome in zip(self.ops, self.outcomes, strict=True):
            op.outcome = outcome
            if not op.signal.done():
                op.signal.set_result(DONE)
        return True
