"""A group-commit batch: the verbs of one SQLite transaction and the callers waiting for them.

How a write travels through `SqliteStore` (see ``docs/store.md``):

- Each verb is a transition rule run synchronously over the raw `sqlite3` connection inside
  ``BEGIN IMMEDIATE … COMMIT``; the whole transaction is ONE call on aiosqlite's connection
  thread, so a verb costs one thread hop, not one per statement; or no hop at all: a batch of
  light verbs runs on the event loop's own thread when that cannot block it (the thread is
  idle, the write lock free, no WAL sync at commit: `agentq.store.sqlite.inline`).
- Group commit: verbs that arrive while a transaction is in flight wait (an `Op` each), and the
  first of them leads the next transaction with all of them (a `Batch`), each in its own
  SAVEPOINT (a refused verb is rolled back alone). No background task: the waiting callers
  take turns leading. A leader lingers a loop turn or more for verbs to join it, unless
  nothing else is ready to run on the loop (`nothing_ready`): then no verb could join, and it
  leads at once (at most `LONE_LEADS` times in a row).
- Cancel safety: a caller cancelled before its verb was taken leaves the queue; once taken,
  the transaction completes and the other callers get their results.
- Reads run on the same thread, after every write submitted before them: straight onto the
  thread's queue, or, when verbs are waiting for the next batch, in that batch after its
  commit.

A store's `GroupCommit` owns the queue of waiting ops and whose turn it is to lead; a `Batch`
owns its ops' outcomes, written on the connection thread and delivered once on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import agentq.store.sqlite.transact as sqlite_transact
from agentq.errors import StoreClosedError, StoreError
from agentq.store.sqlite.connection import on_thread
from agentq.store.sqlite.inline import Inline, checkpoint

if TYPE_CHECKING:
    import aiosqlite

__all__ = [
    "DONE",
    "LEAD",
    "LINGER_YIELDS",
    "LONE_LEADS",
    "Batch",
    "GroupCommit",
    "Op",
    "nothing_ready",
]

T = TypeVar("T")

LEAD = "lead"
"""`Op.signal` result: the op's caller leads the next batch."""
DONE = "done"
"""`Op.signal` result: the op's outcome is in `Op.outcome`."""
LINGER_YIELDS = 4
"""Most loop turns a leader waits for more verbs before taking the batch (`_linger`)."""
LONE_LEADS = 16
"""Most batches in a row a leader takes without a loop turn because nothing else was ready to
run (`nothing_ready`): then the next leader yields anyway, so that a caller making verb after
verb still lets the loop poll its I/O and run its timers."""


def nothing_ready(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether `loop` has no callback ready to run: a task yielding now (``sleep(0)``) would be
    the first to run again, before any I/O or timer callback of that loop turn, so nothing
    could submit a verb meanwhile.

    Reads asyncio's private ``BaseEventLoop._ready`` (the deque of ready handles, there since
    Python 3.4); a loop without it (uvloop) answers False: the leader yields as before.
    ``tests/store/test_sqlite_lone.py`` fails loudly if asyncio changes it.
    """
    ready = getattr(loop, "_ready", None)
    return isinstance(ready, deque) and not ready


class Op:
    """One verb (or a read queued behind verbs) waiting for, or inside, a batch."""

    __slots__ = ("fn", "light", "outcome", "read", "signal", "taken")

    def __init__(
        self, fn: Callable[[Any], Any], read: bool, signal: asyncio.Future[str], light: bool
    ) -> None:
        self.fn = fn  # fn(SqliteTx) for a verb, fn(sqlite3.Connection) for a read
        self.read = read
        self.light = light and not read  # may run on the loop's thread (`inline`)
        self.signal = signal
        self.taken = False
        self.outcome: sqlite_transact.Outcome = (False, None)


class Batch:
    """The ops of one transaction: run on the connection thread, delivered once on the loop.

    `outcomes` is written on the connection thread; `orphaned` is set on the loop when the
    leader was cancelled while the batch ran. The lock makes the two hand over exactly once:
    either the leader delivers when its call returns, or (orphaned) the thread sends the
    delivery back to the loop.
    """

    __slots__ = (
        "_lock",
        "checkpoint",
        "delivered",
        "ops",
        "orphaned",
        "outcomes",
        "restart",
        "savepoints",
        "wal_frames",
    )

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.outcomes: list[sqlite_transact.Outcome] | None = None
        self.orphaned = False
        self.delivered = False
        self.savepoints = False  # ran once already (inline) and needs a SAVEPOINT per verb
        self.checkpoint = False  # checkpoint the WAL after the transaction (`inline`)
        self.restart = False  # that checkpoint is a RESTART one (`inline.checkpoint`)
        self.wal_frames: int | None = None  # what that checkpoint left in the WAL
        self._lock = threading.Lock()

    def run(self, conn: sqlite3.Connection, when_orphaned: Callable[[], None]) -> None:
        """Run the verbs in one transaction, then the reads (on the connection thread), then
        a WAL checkpoint if `checkpoint` asks for one.

        If the leader was cancelled meanwhile, call `when_orphaned` (which must be safe to
        call from this thread) so that the outcomes still reach the other callers.
        """
        verbs = [op.fn for op in self.ops if not op.read]
        done = iter(sqlite_transact.transact(conn, verbs, self.savepoints) if verbs else ())
        outcomes = [
            sqlite_transact.read(conn, op.fn) if op.read else next(done) for op in self.ops
        ]
        if self.checkpoint:
            self.wal_frames = checkpoint(conn, self.restart)
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


class GroupCommit:
    """One store's group-commit queue: the ops waiting for the next transaction, and whose
    turn it is to lead it.

    Args:
        connection: Returns the store's open connection, or None once the store is closed.
        name: Returns how to name the store in messages.
        inline: Returns the store's connection for the loop's thread, or None (none: batches
            run on the connection's thread only).
    """

    def __init__(
        self,
        connection: Callable[[], aiosqlite.Connection | None],
        name: Callable[[], str],
        inline: Callable[[], Inline | None],
    ) -> None:
        self._connection = connection
        self._name = name
        self._inline = inline
        self._waiting: deque[Op] = deque()
        self._busy = False
        self._lone = 0  # batches led in a row without a loop turn (`LONE_LEADS`)

    @property
    def idle(self) -> bool:
        """Whether no batch is in flight and no op waits: every write submitted so far has
        committed (or failed), so a read on any connection sees it."""
        return not self._busy

    @property
    def pending(self) -> bool:
        """Whether ops wait for the next batch (a read then rides in it, after them)."""
        return bool(self._waiting)

    def close(self, message: str) -> None:
        """Give every op still waiting (not yet taken) a `StoreClosedError` with `message`."""
        for op in list(self._waiting):
            if not op.signal.done():
                self._waiting.remove(op)
                op.outcome = (False, StoreClosedError(message))
                op.signal.set_result(DONE)

    async def submit(self, fn: Callable[[Any], T], read: bool, light: bool = False) -> T:
        """Run `fn` in the next batch (leading it when it is this caller's turn); return its
        result or raise its exception. A caller cancelled before its op was taken withdraws
        it; once taken, the batch completes for everyone in it. A batch of `light` verbs
        only (bounded work, no read) may run on the loop's thread (`_run_inline`)."""
        loop = asyncio.get_running_loop()
        op = Op(fn, read, loop.create_future(), light)
        self._waiting.append(op)
        lead = not self._busy  # nothing in flight: this caller leads at once
        self._busy = True
        while True:
            if not lead:
                try:
                    signal = await op.signal
                except asyncio.CancelledError:
                    self._abandon(op)
                    raise
                if signal == DONE:
                    ok, value = op.outcome
                    if ok:
                        return cast(T, value)
                    raise value
                op.signal = loop.create_future()  # told to lead: its outcome comes on this
            lead = False
            if self._lone < LONE_LEADS and nothing_ready(loop):
                self._lone += 1  # a yield would resume this caller first: nobody could join
            else:
                self._lone = 0
                try:
                    await self._linger()
                except asyncio.CancelledError:  # still this caller's turn: withdraw, pass it on
                    with contextlib.suppress(ValueError):
                        self._waiting.remove(op)
                    self._handoff()
                    raise
            batch = self._take()
            if batch is not None:  # else it ran here, or failed: delivered
                await self._ship(batch, loop)  # if cancelled, it still completes: _finish

    async def _linger(self) -> None:
        """Before leading, yield to the loop while that brings more verbs (at most
        `LINGER_YIELDS` times): callers woken by the last batch's outcomes often submit their
        next verb within a loop turn or two, and riding in this transaction saves them one.
        No timer: an idle store leads after a single yield."""
        for _ in range(LINGER_YIELDS):
            waiting = len(self._waiting)
            await asyncio.sleep(0)
            if len(self._waiting) == waiting:
                return

    def _take(self) -> Batch | None:
        """Take every waiting op as the next batch and run it on this (the loop's) thread if
        `_run_inline` allows, or fail it if the store is closed: then deliver it and return
        None. Else return it, for `_ship`."""
        ops = [op for op in self._waiting if not op.signal.cancelled()]
        self._waiting.clear()
        for op in ops:
            op.taken = True
        batch = Batch(ops)
        if self._connection() is None:
            batch.fail(StoreClosedError(f"{self._name()} is closed"))
        elif not self._run_inline(batch):
            return batch
        self._finish(batch)
        return None

    async def _ship(self, batch: Batch, loop: asyncio.AbstractEventLoop) -> None:
        """Run `batch` as one transaction on the connection's thread; deliver it."""
        db = self._connection()
        assert db is not None  # `_take` checked it, and nothing ran since

        # Runs on the connection thread, which keeps the last call it ran (this closure)
        # until the next one arrives: a weak reference (the queue holds its store), so that
        # an idle store can still be garbage-collected (a caller waiting for the batch keeps
        # the store alive anyway).
        queue = weakref.ref(self)

        def when_orphaned() -> None:  # on the connection thread: deliver through the loop
            live = queue()
            if live is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(live._finish, batch)

        try:
            await on_thread(db, lambda conn: batch.run(conn, when_orphaned))
        except asyncio.CancelledError:
            if batch.orphan():
                self._finish(batch)
            raise
        except Exception as exc:  # never queued: the connection closed under us
            batch.fail(
                StoreClosedError(f"{self._name()} is closed") if self._connection() is None
                else StoreError(f"{self._name()}: {exc}")
            )
        self._finish(batch)

    def _run_inline(self, batch: Batch) -> bool:
        """Run `batch` on this (the loop's) thread if `Inline` allows it now; return whether
        its outcomes are in. Else mark what the thread must do: a due checkpoint after it, a
        SAVEPOINT per verb if it ran here and a verb raised after writing."""
        inline = self._inline()
        if inline is None:
            return False
        if inline.checkpoint_due():
            batch.checkpoint = True
            batch.restart = inline.restart
            return False
        if not all(op.light for op in batch.ops):
            return False
        result = inline.run([op.fn for op in batch.ops])
        if isinstance(result, list):
            batch.outcomes = result
            return True
        batch.savepoints = result == "savepoints"
        return False

    def _finish(self, batch: Batch) -> None:
        """Deliver a batch's outcomes (once) and hand the lead to the first waiting op."""
        if batch.checkpoint and not batch.delivered:
            inline = self._inline()
            if inline is not None:
                inline.checkpointed(batch.wal_frames)
        if batch.deliver():
            self._handoff()

    def _handoff(self) -> None:
        while self._waiting:
            op = self._waiting[0]
            if not op.signal.done():
                op.signal.set_result(LEAD)
                return
            self._waiting.popleft()  # cancelled while waiting
        self._busy = False

    def _abandon(self, op: Op) -> None:
        """A waiting caller was cancelled: withdraw its op unless it was already taken."""
        if op.taken:
            return
        with contextlib.suppress(ValueError):
            self._waiting.remove(op)
        signal = op.signal
        if signal.done() and not signal.cancelled() and signal.result() == LEAD:
            self._handoff()  # it was its turn to lead: pass the turn on
