"""`SqliteStore`: the durable store on one SQLite file, through aiosqlite.

How a write travels (see ``docs/store.md``):

- Each verb is the shared rule from `agentq.store.rules`, run synchronously over the raw
  `sqlite3` connection inside ``BEGIN IMMEDIATE … COMMIT``; the whole transaction is ONE call
  on aiosqlite's connection thread, so a verb costs one thread hop, not one per statement.
- Group commit: verbs that arrive while a transaction is in flight wait, and the first of
  them leads the next transaction with all of them, each in its own SAVEPOINT (a refused
  verb is rolled back alone). No background task: the waiting callers take turns leading.
- Cancel safety: a caller cancelled before its verb was taken leaves the queue; once taken,
  the transaction completes and the other callers get their results.
- Reads run on the same thread, after every write submitted before them: straight onto the
  thread's queue, or, when verbs are waiting for the next batch, in that batch after its
  commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from agentq.errors import StoreError
from agentq.events import Event
from agentq.extras import require
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.store import checks, rules
from agentq.store import sqlite_tx as sql
from agentq.store.base import ClaimResult, Execution, StepRow, WorkflowRow, WorkflowState

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["SqliteStore"]

T = TypeVar("T")
_LEAD = "lead"  # op.signal results: lead the next batch ...
_DONE = "done"  # ... or the outcome is in op.outcome


class _Op:
    """One verb (or a read queued behind verbs) waiting for, or inside, a batch."""

    __slots__ = ("fn", "outcome", "read", "signal", "taken")

    def __init__(self, fn: Callable[[Any], Any], read: bool, signal: asyncio.Future[str]) -> None:
        self.fn = fn  # fn(SqliteTx) for a verb, fn(sqlite3.Connection) for a read
        self.read = read
        self.signal = signal
        self.taken = False
        self.outcome: sql.Outcome = (False, None)


class _Batch:
    """The verbs of one transaction; `outcomes` is written on the connection thread."""

    __slots__ = ("delivered", "ops", "orphaned", "outcomes")

    def __init__(self, ops: list[_Op]) -> None:
        self.ops = ops
        self.outcomes: list[sql.Outcome] | None = None
        self.orphaned = False  # the leader was cancelled while the batch ran
        self.delivered = False


class SqliteStore:
    """A `DurableStore` on a SQLite file: WAL, ``BEGIN IMMEDIATE``, group commit.

    The file is opened on first use, or at once with ``await SqliteStore.open(path)`` or
    ``async with SqliteStore(path) as store:``; close it with ``await store.close()`` (the
    ``async with`` block does). Opening sets WAL journaling, ``synchronous`` and the busy
    timeout, and migrates an older schema (``PRAGMA user_version``) in one transaction.

    ``synchronous=NORMAL`` (the default) with WAL never corrupts the file; a power loss (not a
    process crash) may lose the last transactions before a checkpoint. ``FULL`` syncs the WAL
    at every commit: about 15% slower here, durable across power loss.

    Writers in other processes or connections are welcome (that is what WAL and
    ``BEGIN IMMEDIATE`` are for): a write waits up to `busy_timeout` seconds for the lock
    and ``BEGIN IMMEDIATE`` is retried a few times, so "database is locked" does not reach a
    caller unless another writer holds the lock for that long.

    An open store holds one aiosqlite connection and its thread; reads and writes take turns
    on it, so a read sees every write submitted before it. Use a store from one event loop,
    and close it: aiosqlite's thread is not a daemon. ``":memory:"`` works too.

    Args:
        path: The database file (created if missing).
        busy_timeout: Seconds a statement waits for another connection's lock.
        synchronous: ``"NORMAL"`` or ``"FULL"``.

    Raises:
        ValueError: A bad `busy_timeout` or `synchronous`.

    Example:
        >>> async with SqliteStore("agentq.db") as store:
        ...     engine = WorkflowEngine(queue, store)
        ...     await engine.run(workflow)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    ) -> None:
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float) or not (
            0 <= busy_timeout < 3600
        ):
            raise ValueError(f"busy_timeout must be seconds in [0, 3600), got {busy_timeout!r}")
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        self.path = os.fspath(path)
        if not self.path:
            raise ValueError(
                "path must name a database file (or ':memory:'); an empty path would be a "
                "private temporary database that is lost when it closes"
            )
        self.busy_timeout = float(busy_timeout)
        self.synchronous = synchronous
        self.journal_mode: str | None = None
        """The journal mode in use once open: ``"wal"`` for a file."""
        self._db: aiosqlite.Connection | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        self._waiting: deque[_Op] = deque()
        self._busy = False
        self._orphans = threading.Lock()  # guards _Batch.outcomes/orphaned across threads

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._db else "not open yet"
        return f"SqliteStore({self.path!r}, {state})"

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    ) -> SqliteStore:
        """Open (create, migrate) the file now and return the store.

        Raises:
            SchemaError: The file has a newer or foreign schema.
            StoreError: SQLite failed (not a database, no permission, …).
            MissingExtraError: aiosqlite is not installed (``pip install 'agentq[sqlite]'``).
        """
        store = cls(path, busy_timeout=busy_timeout, synchronous=synchronous)
        await store._connect()
        return store

    async def __aenter__(self) -> SqliteStore:
        await self._connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ the connection

    async def _on_thread(
        self, db: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]
    ) -> T:
        """Run ``fn(raw sqlite3 connection)`` on the connection's thread: one hop in all.

        This is the one use of aiosqlite's private API: `Connection._execute(fn, *args)`, the
        dispatch under all its public methods, and `Connection._conn`, the `sqlite3`
        connection it serves. Going through the public API would cost a thread hop per
        statement. ``tests/store/test_sqlite.py::test_aiosqlite_private_api`` fails loudly
        if aiosqlite changes either.
        """
        return cast(T, await db._execute(fn, db._conn))  # type: ignore[no-untyped-call]

    async def _connect(self) -> aiosqlite.Connection:
        db = self._db
        if db is not None:
            return db
        async with self._opening:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if self._db is None:
                self._db = await self._start()
            return self._db

    async def _start(self) -> aiosqlite.Connection:
        """Open the connection, set the pragmas and migrate.

        Reads and writes share this one connection and its thread, so a read sees every write
        submitted before it, in submission order (what deterministic tests and `recover` rely
        on). A second, read-only connection was measured: with a reader polling every 2 ms
        beside 4 writing workflows, p95 read latency fell from 1.3-1.8 ms to 0.4 ms, but a
        read could then miss a write submitted just before it; not worth that.
        """
        lib = require("aiosqlite", "sqlite")
        try:
            db: aiosqlite.Connection = await lib.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path!r}: {exc}") from exc
        try:
            prepare = partial(
                sql.prepare,
                name=repr(self.path),
                busy_ms=int(self.busy_timeout * 1000),
                synchronous=self.synchronous,
            )
            self.journal_mode = await self._on_thread(db, prepare)
        except BaseException as exc:
            await db.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open {self.path!r}: {exc}") from exc
            raise
        return db

    async def close(self) -> None:
        """Close the file; further calls raise `StoreError`. Idempotent.

        A transaction in flight completes first; verbs still waiting for one get `StoreError`.
        """
        if self._closed:
            return
        self._closed = True
        for op in list(self._waiting):
            if not op.signal.done():
                self._waiting.remove(op)
                op.outcome = (False, StoreError(f"{self!r} was closed before this write"))
                op.signal.set_result(_DONE)
        async with self._opening:
            db, self._db = self._db, None
        if db is not None:
            await db.close()

    # ------------------------------------------------------------ group commit

    async def _write(self, fn: Callable[[sql.SqliteTx], T]) -> T:
        """Run one verb in the next group-commit transaction and return its result."""
        return await self._submit(fn, False)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the connection thread, after every write submitted before it."""
        db = await self._connect()
        if self._waiting:  # verbs wait for the next batch: read after them, in that batch
            return await self._submit(fn, True)
        try:  # else the thread's queue keeps the order: after the batch in flight, if any
            return await self._on_thread(db, fn)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite failed: {exc}") from exc
        except ValueError as exc:
            if self._closed:
                raise StoreError(f"{self!r} is closed") from exc
            raise

    async def _submit(self, fn: Callable[[Any], T], read: bool) -> T:
        await self._connect()
        loop = asyncio.get_running_loop()
        op = _Op(fn, read, loop.create_future())
        self._waiting.append(op)
        if not self._busy:
            self._busy = True
            op.signal.set_result(_LEAD)
        while True:
            try:
                signal = await op.signal
            except asyncio.CancelledError:
                self._abandon(op)
                raise
            if signal == _DONE:
                ok, value = op.outcome
                if ok:
                    return cast(T, value)
                raise value
            op.signal = loop.create_future()
            await self._lead(loop)  # if cancelled here, the batch still completes: see _finish

    async def _lead(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take every waiting verb and run them as one transaction on the connection thread."""
        ops = [op for op in self._waiting if not op.signal.cancelled()]
        self._waiting.clear()
        for op in ops:
            op.taken = True
        batch = _Batch(ops)
        db = self._db
        if db is None or self._closed:
            batch.outcomes = [(False, StoreError(f"{self!r} is closed")) for _ in ops]
            self._finish(batch)
            return
        lock = self._orphans

        def run(conn: sqlite3.Connection) -> None:
            # On the connection thread: the verbs in one transaction, then the reads. Normally
            # the leader delivers the outcomes when this call returns; if the leader was
            # cancelled meanwhile ("orphaned"), they go back through call_soon_threadsafe
            # instead, so the other callers still get them.
            verbs = [op.fn for op in ops if not op.read]
            done = iter(sql.transact(conn, verbs) if verbs else ())
            outcomes = [sql.read(conn, op.fn) if op.read else next(done) for op in ops]
            with lock:
                batch.outcomes = outcomes
                orphaned = batch.orphaned
            if orphaned:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    loop.call_soon_threadsafe(self._finish, batch)

        try:
            await self._on_thread(db, run)
        except asyncio.CancelledError:
            with lock:
                batch.orphaned = True
                done = batch.outcomes is not None
            if done:
                self._finish(batch)
            raise
        except Exception as exc:  # never queued: the connection closed under us
            batch.outcomes = [(False, StoreError(f"{self!r}: {exc}")) for _ in ops]
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        """Deliver a batch's outcomes (once) and hand the lead to the first waiting verb."""
        if batch.delivered or batch.outcomes is None:
            return
        batch.delivered = True
        for op, outcome in zip(batch.ops, batch.outcomes, strict=True):
            op.outcome = outcome
            if not op.signal.done():
                op.signal.set_result(_DONE)
        self._handoff()

    def _handoff(self) -> None:
        while self._waiting:
            op = self._waiting[0]
            if not op.signal.done():
                op.signal.set_result(_LEAD)
                return
            self._waiting.popleft()  # cancelled while waiting
        self._busy = False

    def _abandon(self, op: _Op) -> None:
        """A waiting caller was cancelled: withdraw its verb unless it was already taken."""
        if op.taken:
            return
        with contextlib.suppress(ValueError):
            self._waiting.remove(op)
        signal = op.signal
        if signal.done() and not signal.cancelled() and signal.result() == _LEAD:
            self._handoff()  # it was its turn to lead: pass the turn on

    # ------------------------------------------------------------ writes

    async def start_workflow(
        self, workflow_id: str, step_names: Sequence[str], input: Any, now: float
    ) -> tuple[WorkflowRow, bool]:
        """See `DurableStore.start_workflow`."""
        return await self._write(
            lambda tx: rules.start_workflow(tx, workflow_id, step_names, input, now)
        )

    async def claim_step(
        self, workflow_id: str, step_index: int, worker_id: str, lease_ttl: float, now: float
    ) -> ClaimResult:
        """See `DurableStore.claim_step`."""
        return await self._write(
            lambda tx: rules.claim_step(tx, workflow_id, step_index, worker_id, lease_ttl, now)
        )

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        """See `DurableStore.renew_lease`."""
        return await self._write(lambda tx: rules.renew_lease(tx, execution, lease_ttl, now))

    async def complete_step(self, execution: Execution, output: Any, now: float) -> WorkflowRow:
        """See `DurableStore.complete_step`."""
        return await self._write(lambda tx: rules.complete_step(tx, execution, output, now))

    async def fail_step(
        self,
        execution: Execution,
        reason: str,
        error: ErrorInfo | None,
        now: float,
        retry_at: float | None,
    ) -> WorkflowRow:
        """See `DurableStore.fail_step`."""
        return await self._write(
            lambda tx: rules.fail_step(tx, execution, reason, error, now, retry_at)
        )

    async def wait_step(self, execution: Execution, reason: str, now: float) -> WorkflowRow:
        """See `DurableStore.wait_step`."""
        return await self._write(lambda tx: rules.wait_step(tx, execution, reason, now))

    async def resume_step(
        self, workflow_id: str, step_index: int, input: Any, now: float
    ) -> WorkflowRow:
        """See `DurableStore.resume_step`."""
        return await self._write(
            lambda tx: rules.resume_step(tx, workflow_id, step_index, input, now)
        )

    async def cancel_workflow(self, workflow_id: str, reason: str, now: float) -> bool:
        """See `DurableStore.cancel_workflow`."""
        return await self._write(lambda tx: rules.cancel_workflow(tx, workflow_id, reason, now))

    async def release_expired(self, execution: Execution, now: float) -> bool:
        """See `DurableStore.release_expired`."""
        return await self._write(lambda tx: rules.release_expired(tx, execution, now))

    async def rebuild_projection(self) -> None:
        """Recompute every workflow and step row by replaying the event log, in one
        transaction.

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        await self._write(sql.rebuild)

    # ------------------------------------------------------------ reads

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        now, _ = checks.check_now(now)
        return await self._read(lambda conn: sql.expired_leases(conn, now))

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(lambda conn: sql.get_workflow(conn, workflow_id))

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        wanted = checks.check_state(state)
        return await self._read(lambda conn: sql.workflows(conn, wanted))

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(lambda conn: sql.step_rows(conn, workflow_id))

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, limit = checks.check_seq(after_seq, limit)
        return await self._read(lambda conn: sql.load_events(conn, workflow_id, after_seq, limit))

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, _ = checks.check_seq(after_seq)
        return await self._read(lambda conn: sql.event_rows(conn, workflow_id, after_seq))

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        return await self._read(sql.last_seq)
