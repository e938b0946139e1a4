"""`SqliteStore`: the durable store on one SQLite file, through aiosqlite.

The store owns one aiosqlite connection (`sqlite_connection`: opened on first use, migrated)
and its group-commit queue (`sqlite_batch.GroupCommit`): each write verb runs its transition
rule inside the next batch, one transaction on the connection's thread (`sqlite_tx`); each
read runs a query of `sqlite_reads` on the same thread, after every write submitted before it.
The `JobOutcomeStore` verbs of `Queue(store=...)` go the same ways, over `sqlite_jobs`.
``docs/store.md`` tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import agentq.store.rules_attempt as rules_attempt
import agentq.store.rules_calls as rules_calls
import agentq.store.rules_lease as rules_lease
import agentq.store.rules_workflow as rules_workflow
import agentq.store.sqlite_jobs as sqlite_jobs
import agentq.store.sqlite_reads as sqlite_reads
import agentq.store.sqlite_tx as sqlite_tx
from agentq.errors import StoreError
from agentq.events import Event
from agentq.keys import validate_key
from agentq.outcomes import ErrorInfo
from agentq.queue import StoredJob
from agentq.store.checks import (
    check_index,
    check_now,
    check_number,
    check_ready,
    check_seq,
    check_state,
)
from agentq.store.claims import ClaimResult, Execution
from agentq.store.ready import ReadyWork
from agentq.store.rows import CallRow, StepRow, WorkflowRow, WorkflowState
from agentq.store.sqlite_batch import GroupCommit
from agentq.store.sqlite_connection import connect, on_thread, release

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["SqliteStore"]

T = TypeVar("T")


class SqliteStore:
    """A `DurableStore` (and `JobOutcomeStore`) on a SQLite file: WAL, ``BEGIN IMMEDIATE``,
    group commit.

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
    and close it. A store never closed never keeps the process from exiting (the thread is
    a daemon; every committed transaction is in the file); garbage-collected unclosed, it
    closes its file, ends its thread and emits a `ResourceWarning`, like an unclosed file.
    ``":memory:"`` works too.

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
        self._commit = GroupCommit(lambda: None if self._closed else self._db, self.__repr__)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._db else "not open yet"
        return f"SqliteStore({self.path!r}, {state})"

    def __del__(self) -> None:
        # Garbage-collected unclosed (issue 9 item 10): let the file go, and say so.
        db = getattr(self, "_db", None)
        if db is None or self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # at interpreter exit: the thread ends with it
            release(db)
        warnings.warn(
            f"SqliteStore({self.path!r}) was never closed; its connection is closed now. "
            "Close stores with `await store.close()` or `async with SqliteStore(...) as store:`",
            ResourceWarning,
            stacklevel=1,
            source=self,
        )

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

    _on_thread = staticmethod(on_thread)  # run fn(raw sqlite3 connection) on the thread

    async def _connect(self) -> aiosqlite.Connection:
        db = self._db
        if db is not None:
            return db
        async with self._opening:
            if self._closed:
                raise StoreError(f"{self!r} is closed")
            if self._db is None:
                self._db, self.journal_mode = await connect(
                    self.path, self.busy_timeout, self.synchronous
                )
            return self._db

    async def close(self) -> None:
        """Close the file; further calls raise `StoreError`. Idempotent.

        A transaction in flight completes first; verbs still waiting for one get `StoreError`.
        """
        if self._closed:
            return
        self._closed = True
        self._commit.close(f"{self!r} was closed before this write")
        async with self._opening:
            db, self._db = self._db, None
        if db is not None:
            await db.close()

    # ------------------------------------------------------------ group commit

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(SqliteTx, *args)`` in the next group-commit transaction; return its result."""
        return await self._submit(lambda tx: fn(tx, *args), False)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the connection thread, after every write submitted before it."""
        db = await self._connect()
        if self._commit.pending:  # verbs wait for the next batch: read after them, in it
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
        return await self._commit.submit(fn, read)

    # ------------------------------------------------------------ writes

    async def start_workflow(
        self,
        workflow_id: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        *,
        definition: str | None = None,
        trace: Mapping[str, str] | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """See `DurableStore.start_workflow`."""
        return await self._write(
            rules_workflow.start_workflow, workflow_id, step_names, input, now, definition,
            trace,
        )

    async def claim_step(
        self,
        workflow_id: str,
        step_index: int,
        worker_id: str,
        lease_ttl: float,
        now: float,
        *,
        max_recoveries: int = 3,
    ) -> ClaimResult:
        """See `DurableStore.claim_step`."""
        return await self._write(
            rules_lease.claim_step,
            workflow_id,
            step_index,
            worker_id,
            lease_ttl,
            now,
            max_recoveries,
        )

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        """See `DurableStore.renew_lease`."""
        return await self._write(rules_lease.renew_lease, execution, lease_ttl, now)

    async def complete_step(self, execution: Execution, output: Any, now: float) -> WorkflowRow:
        """See `DurableStore.complete_step`."""
        return await self._write(rules_attempt.complete_step, execution, output, now)

    async def fail_step(
        self,
        execution: Execution,
        reason: str,
        error: ErrorInfo | None,
        now: float,
        retry_at: float | None,
    ) -> WorkflowRow:
        """See `DurableStore.fail_step`."""
        return await self._write(rules_attempt.fail_step, execution, reason, error, now, retry_at)

    async def wait_step(
        self,
        execution: Execution,
        reason: str,
        now: float,
        *,
        key: str | None = None,
        details: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> WorkflowRow:
        """See `DurableStore.wait_step`."""
        return await self._write(
            rules_attempt.wait_step, execution, reason, now, key, details, deadline
        )

    async def resume_step(
        self,
        workflow_id: str,
        step_index: int,
        input: Any,
        now: float,
        *,
        key: str | None = None,
    ) -> WorkflowRow:
        """See `DurableStore.resume_step`."""
        return await self._write(
            rules_workflow.resume_step, workflow_id, step_index, input, now, key
        )

    async def time_out_wait(self, workflow_id: str, step_index: int, now: float) -> bool:
        """See `DurableStore.time_out_wait`."""
        return await self._write(rules_workflow.time_out_wait, workflow_id, step_index, now)

    async def start_call(
        self,
        execution: Execution,
        key: str,
        *,
        fingerprint: str | None,
        lane: str | None,
        label: dict[str, Any] | None,
        now: float,
    ) -> CallRow:
        """See `DurableStore.start_call`."""
        return await self._write(
            rules_calls.start_call, execution, key, fingerprint, lane, label, now
        )

    async def complete_call(
        self,
        execution: Execution,
        key: str,
        *,
        output: Any,
        usage: dict[str, Any] | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """See `DurableStore.complete_call`."""
        return await self._write(
            rules_calls.complete_call, execution, key, output, usage, duration, now
        )

    async def fail_call(
        self,
        execution: Execution,
        key: str,
        *,
        reason: str,
        error: ErrorInfo | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """See `DurableStore.fail_call`."""
        return await self._write(
            rules_calls.fail_call, execution, key, reason, error, duration, now
        )

    async def cancel_workflow(self, workflow_id: str, reason: str, now: float) -> bool:
        """See `DurableStore.cancel_workflow`."""
        return await self._write(rules_workflow.cancel_workflow, workflow_id, reason, now)

    async def release_expired(self, execution: Execution, now: float) -> bool:
        """See `DurableStore.release_expired`."""
        return await self._write(rules_lease.release_expired, execution, now)

    async def release_dead(self, execution: Execution, now: float, reason: str) -> bool:
        """See `DurableStore.release_dead`."""
        return await self._write(rules_lease.release_dead, execution, now, reason)

    async def retry_workflow(
        self, workflow_id: str, from_step: int | None, now: float
    ) -> WorkflowRow:
        """See `DurableStore.retry_workflow`."""
        return await self._write(rules_workflow.retry_workflow, workflow_id, from_step, now)

    async def save_job(
        self,
        key: str,
        *,
        fingerprint: str,
        output: Any,
        completed_at: float,
        expires_at: float | None,
    ) -> bool:
        """See `JobOutcomeStore.save_job` (one verb of the next group commit)."""
        return await self._write(
            sqlite_jobs.save, key, fingerprint, output, completed_at, expires_at
        )

    async def forget_job(self, key: str) -> bool:
        """See `JobOutcomeStore.forget_job`."""
        return await self._write(sqlite_jobs.forget, validate_key(key))

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log, in one
        transaction.

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        await self._write(sqlite_tx.rebuild)

    # ------------------------------------------------------------ reads

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """See `JobOutcomeStore.load_job`."""
        key, now = validate_key(key), check_number(now, "now")
        return await self._read(lambda conn: sqlite_jobs.load(conn, key, now))

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        now, _ = check_now(now)
        return await self._read(lambda conn: sqlite_reads.expired_leases(conn, now))

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(lambda conn: sqlite_reads.get_workflow(conn, workflow_id))

    async def ready_workflows(
        self, now: float, definitions: Iterable[str], limit: int
    ) -> list[ReadyWork]:
        """See `DurableStore.ready_workflows`."""
        at, names, most = check_ready(now, definitions, limit)
        return await self._read(lambda conn: sqlite_reads.ready_workflows(conn, at, names, most))

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        wanted = check_state(state)
        return await self._read(lambda conn: sqlite_reads.workflows(conn, wanted))

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(lambda conn: sqlite_reads.step_rows(conn, workflow_id))

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """See `DurableStore.calls`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        index = None if step_index is None else check_index(step_index)
        return await self._read(lambda conn: sqlite_reads.calls(conn, workflow_id, index))

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, limit = check_seq(after_seq, limit)
        return await self._read(
            lambda conn: sqlite_reads.load_events(conn, workflow_id, after_seq, limit)
        )

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, _ = check_seq(after_seq)
        return await self._read(lambda conn: sqlite_reads.event_rows(conn, workflow_id, after_seq))

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        return await self._read(sqlite_reads.last_seq)
