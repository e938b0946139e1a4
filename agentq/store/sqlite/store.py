"""`SqliteStore`: the durable store on one SQLite file, through aiosqlite.

The store owns one aiosqlite connection (`connection`: opened on first use, migrated)
and its group-commit queue (`batch.GroupCommit`): each write verb runs its transition
rule inside the next batch, one transaction (`transact`) on the connection's thread, or on the
event loop's own thread when that cannot block it (`inline`); each read runs a query of
`sql.reads` after every write submitted before it, on the loop's thread too if it reads one
workflow's rows and no batch is in flight, else on the connection's thread.
The verbs themselves are written once for every store (`rules.verbs.RuleStore`,
`sql.verbs.SqlStore`); the `JobOutcomeStore` verbs of `Queue(store=...)` go the same
ways, over `jobs`. ``docs/store.md`` tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import agentq.store.sql.groups as sql_groups
import agentq.store.sql.hooks as sql_hooks
import agentq.store.sql.messages as sql_messages
import agentq.store.sql.reads as sql_reads
import agentq.store.sqlite.jobs as sqlite_jobs
import agentq.store.sqlite.tx as sqlite_tx
from agentq.errors import StoreClosedError, StoreError
from agentq.store.contract.groups import GroupManifest
from agentq.store.rules.fork import fork_workflow
from agentq.store.rules.sweep import SweepBatch, Sweeper
from agentq.store.rules.verbs import GroupRules, JobRules, RateRules
from agentq.store.sql.rates import RateSql
from agentq.store.sql.sweep import sweep_batch
from agentq.store.sql.verbs import SqlParts, SqlStore
from agentq.store.sqlite.batch import GroupCommit
from agentq.store.sqlite.connection import connect, on_thread, release
from agentq.store.sqlite.inline import Inline

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["SqliteStore"]

T = TypeVar("T")

def _sweep(tx: sqlite_tx.SqliteTx, *args: Any) -> SweepBatch:
    """One transaction of a sweep (`agentq.store.sql.sweep.sweep_batch`) on the batch's tx."""
    return sweep_batch(sqlite_tx.DIALECT, tx.conn, *args)


def _record_group(tx: sqlite_tx.SqliteTx, *args: Any) -> tuple[GroupManifest, bool]:
    return sql_groups.record(tx.conn, sqlite_tx.DIALECT, *args)


def _forget_group(tx: sqlite_tx.SqliteTx, group_id: str) -> bool:
    return sql_groups.forget(tx.conn, sqlite_tx.DIALECT, group_id)


_RATES = RateSql("?", "")  # a write transaction of SQLite holds the whole file

_HEAVY: frozenset[Callable[..., Any]] = frozenset(
    {sqlite_tx.rebuild, _sweep, _record_group, _forget_group, fork_workflow}
)
"""Write rules whose work grows with the log or a group: always on the connection's thread
(`inline` runs only the others on the loop's thread)."""

_ONE_ROW_READS: frozenset[Callable[..., Any]] = frozenset(
    {sql_reads.get_workflow, sql_reads.last_seq, sqlite_jobs.load}
)
_ONE_WORKFLOW_READS: frozenset[Callable[..., Any]] = frozenset(
    {sql_reads.step_rows, sql_reads.calls, sql_messages.messages, sql_hooks.hooks}
)
"""Reads of one workflow's rows when given its id (their second argument), else of every
workflow's."""


def _light_read(fn: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether a read touches one row or one workflow's rows: it may run on the loop's thread."""
    return fn in _ONE_ROW_READS or (fn in _ONE_WORKFLOW_READS and args[1] is not None)


class SqliteStore(SqlStore):
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
    on it, so a read sees every write submitted before it. With WAL and ``NORMAL`` it also
    holds a plain connection for the event loop's thread, where write verbs commit, and reads
    of one workflow run, without a thread hop whenever that cannot block the loop
    (``agentq.store.sqlite.inline``); each commit is done before its verb returns, so reads
    still see it. Use a store from one event loop,
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

    job_rules = JobRules(sqlite_jobs.save, sqlite_jobs.forget)
    group_rules = GroupRules(_record_group, _forget_group)
    rate_rules = RateRules(
        lambda tx, *args: _RATES.take(tx.conn, *args),
        lambda tx, *args: _RATES.settle(tx.conn, *args),
        lambda tx, *args: _RATES.pause(tx.conn, *args),
        lambda tx, *args: _RATES.resume(tx.conn, *args),
    )
    sql = SqlParts(sqlite_tx.DIALECT, sqlite_jobs.load, sqlite_tx.rebuild)
    sweeper = Sweeper(_sweep)

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
        self._inline: Inline | None = None
        self._commit = GroupCommit(
            lambda: None if self._closed else self._db, self.__repr__, lambda: self._inline
        )

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
        with contextlib.suppress(Exception):  # collected on another thread: closed when freed
            if self._inline is not None:
                self._inline.close()
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
                raise StoreClosedError(f"{self!r} is closed")
            if self._db is None:
                db, self.journal_mode = await connect(
                    self.path, self.busy_timeout, self.synchronous
                )
                if self.journal_mode == "wal" and self.synchronous == "NORMAL":
                    try:  # the loop thread's connection: see `agentq.store.sqlite.inline`
                        self._inline = Inline(self.path)
                    except sqlite3.Error as exc:
                        await db.close()
                        raise StoreError(f"cannot open {self.path!r}: {exc}") from exc
                self._db = db
            return self._db

    async def close(self) -> None:
        """Close the file; further calls raise `StoreError`. Idempotent.

        A transaction in flight completes first; verbs still waiting for one get `StoreError`.
        """
        if self._closed:
            return
        self._closed = True
        self._commit.close(f"{self!r} was closed before this call")
        async with self._opening:
            db, self._db = self._db, None
            inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        if db is not None:
            await db.close()

    # ------------------------------------------------------------ group commit

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(SqliteTx, *args)`` in the next group-commit transaction; return its result."""
        if self._db is None:
            await self._connect()
        return await self._commit.submit(lambda tx: fn(tx, *args), False, fn not in _HEAVY)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(sqlite3.Connection, *args)`` after every write submitted before it: on the
        loop's thread over `Inline`'s connection if it reads one row or one workflow's and
        no batch is in flight (after one loop turn, as a write's linger), else on the
        connection's thread."""
        db = await self._connect()
        if self._inline is not None and _light_read(fn, args):
            await asyncio.sleep(0)  # a read yields to the loop once, as it did with a hop
            inline = self._inline
            if inline is not None and self._commit.idle and not self._closed:
                try:
                    return fn(inline.conn, *args)
                except sqlite3.OperationalError as exc:
                    if not sqlite_tx.is_busy(exc):  # busy (rare in WAL): the thread waits
                        raise self._failed(exc) from exc
                except sqlite3.Error as exc:
                    raise self._failed(exc) from exc

        def query(conn: sqlite3.Connection) -> T:
            return fn(conn, *args)

        if self._commit.pending:  # verbs wait for the next batch: read after them, in it
            return await self._submit(query, True)
        try:  # else the thread's queue keeps the order: after the batch in flight, if any
            return await self._on_thread(db, query)
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        except ValueError as exc:
            if self._closed:
                raise StoreClosedError(f"{self!r} is closed") from exc
            raise

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        """What a read that failed raises: `StoreClosedError` if the store was closed while
        it waited (its connection closed under it), else `StoreError`."""
        if self._closed:
            return StoreClosedError(f"{self!r} is closed")
        return StoreError(f"SQLite failed: {exc}")

    async def _submit(self, fn: Callable[[Any], T], read: bool) -> T:
        await self._connect()
        return await self._commit.submit(fn, read)
