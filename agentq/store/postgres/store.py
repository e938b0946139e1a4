"""`PostgresStore`: the durable store on a PostgreSQL database, through psycopg 3 and its pool.

The store owns a `Connections` (`connection`: a pool of synchronous connections,
opened and migrated on first use), a thread pool as large as the connection pool and a
`Listener` (`listen`, for `wait_for_work`). Its verbs, written once for every store
(`rules.verbs.RuleStore`, `sql.verbs.SqlStore`), go through three dispatch coroutines defined here:
a write verb runs its transition rule in one transaction on a worker thread, over `PostgresTx`
(`tx`), which locks the workflow's row first; a job outcome is written in one
transaction (`jobs`); a read runs a query of `sql.reads` (in the PostgreSQL
`Dialect`) once the writes submitted before it are done. ``docs/postgres.md`` tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import agentq.store.postgres.jobs as postgres_jobs
import agentq.store.sql.groups as sql_groups
from agentq.errors import StoreClosedError
from agentq.store.contract.checks import check_number
from agentq.store.contract.groups import GroupManifest
from agentq.store.postgres.connection import Connections, describe_dsn
from agentq.store.postgres.listen import Listener
from agentq.store.postgres.tx import DIALECT, PostgresTx, rebuild
from agentq.store.rules.sweep import Sweeper
from agentq.store.rules.verbs import GroupRules, JobRules, RateRules
from agentq.store.sql.rates import RateSql
from agentq.store.sql.sweep import sweep_batch
from agentq.store.sql.verbs import SqlParts, SqlStore

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_RATES = RateSql("%s", " FOR UPDATE")  # a take locks its lane's row

def _record_group(conn: psycopg.Connection[Any], *args: Any) -> tuple[GroupManifest, bool]:
    return sql_groups.record(conn, DIALECT, *args)


def _forget_group(conn: psycopg.Connection[Any], group_id: str) -> bool:
    return sql_groups.forget(conn, DIALECT, group_id)


class PostgresStore(SqlStore):
    """A `DurableStore` (and `JobOutcomeStore`) on a PostgreSQL database.

    The database is opened on first use, or at once with ``await PostgresStore.open(dsn)`` or
    ``async with PostgresStore(dsn) as store:``; close it with ``await store.close()``.
    Opening connects once (a wrong DSN or an unreachable server raises `StoreError` within
    `connect_timeout`), creates or migrates agentq's tables in their own PostgreSQL schema
    (several processes may open one new database at once: an advisory lock makes one of them
    migrate), then opens a pool of `min_size` to `max_size` connections.

    Every write verb is one transaction (the shared transition rules over `PostgresTx`): it
    locks the workflow's row, checks, appends its events and writes the projection, and
    commits. Many processes and machines may share one database; a claim is a
    compare-and-swap on the locked row, with the fencing token checked in the same
    transaction as the event insert. Sequence numbers are gapless and in commit order.

    If the server restarts while the store is open, the next verbs reconnect (the pool
    replaces dead connections); a write whose connection was lost during ``COMMIT`` raises
    `StoreError` (its outcome is unknown) and is never retried behind the caller's back.

    The pool's connections and threads are the store's own (psycopg_pool maintains them in the
    background); the store itself still never sleeps and starts no asyncio task.

    Args:
        dsn: A libpq connection string (``"host=db port=5432 dbname=app user=agentq"``) or
            URI (``"postgresql://agentq@db/app"``); a password may be in it or in
            ``PGPASSWORD`` / ``~/.pgpass``.
        schema: The PostgreSQL schema of agentq's tables (created if missing): lowercase
            letters, digits and ``_``.
        min_size: Connections kept open.
        max_size: Most connections at once (also the number of worker threads).
        connect_timeout: Seconds to wait for a connection (at least 2 for libpq's own
            connect timeout) and for a free connection of the pool.

    Raises:
        ValueError: A bad `schema`, pool size or timeout.
        MissingExtraError: psycopg is not installed (``pip install 'agentq[postgres]'``).

    Example:
        >>> async with PostgresStore("postgresql://agentq@localhost/agentq") as store:
        ...     engine = WorkflowEngine(queue, store)
        ...     await engine.run(workflow)
    """

    job_rules = JobRules(postgres_jobs.save, postgres_jobs.forget)
    group_rules = GroupRules(_record_group, _forget_group)
    rate_rules = RateRules(_RATES.take, _RATES.settle, _RATES.pause, _RATES.resume)
    sql = SqlParts(DIALECT, postgres_jobs.load, rebuild)
    sweeper = Sweeper(partial(sweep_batch, DIALECT))

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "agentq",
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str (a libpq connection string or URI), got {dsn!r}")
        if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(
                f"schema must be a lowercase PostgreSQL name (a-z, 0-9, _), got {schema!r}"
            )
        for name, size in (("min_size", min_size), ("max_size", max_size)):
            if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 1000:
                raise ValueError(f"{name} must be an int in [0, 1000], got {size!r}")
        if max_size < max(min_size, 1):
            raise ValueError(f"max_size must be at least 1 and min_size, got {max_size!r}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float) or (
            not 0 < connect_timeout <= 3600
        ):
            raise ValueError(f"connect_timeout must be seconds in (0, 3600], got "
                             f"{connect_timeout!r}")
        self.dsn = dsn
        self.schema = schema
        self._connections = Connections(dsn, schema, min_size, max_size, float(connect_timeout))
        self._listener = Listener(
            dsn, schema, float(connect_timeout), describe_dsn(dsn),
            self._connections.connection_kwargs(),
        )
        self._executor: ThreadPoolExecutor | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        # Writes in flight: a read waits for those submitted before it (read-your-writes in
        # submission order, as the other stores; writes themselves run concurrently).
        self._writes: set[asyncio.Future[Any]] = set()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open" if self._executor else "not open yet"
        return f"PostgresStore({describe_dsn(self.dsn)}, schema={self.schema!r}, {state})"

    def __del__(self) -> None:
        # Garbage-collected unclosed: let the connections go, and say so (as SqliteStore).
        connections = getattr(self, "_connections", None)
        if connections is None or connections.pool is None or self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            connections.pool.close(timeout=0)
        warnings.warn(
            f"{self!r} was never closed; its connections are closed now. Close stores with "
            "`await store.close()` or `async with PostgresStore(...) as store:`",
            ResourceWarning,
            stacklevel=1,
            source=self,
        )

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        schema: str = "agentq",
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> PostgresStore:
        """Connect, create or migrate agentq's tables, and return the store.

        Raises:
            StoreError: The DSN is wrong, the server refused or did not answer within
                `connect_timeout`, or failed.
            SchemaError: The schema has a newer agentq version, or tables not agentq's.
            MissingExtraError: psycopg is not installed (``pip install 'agentq[postgres]'``).
        """
        store = cls(
            dsn,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
        )
        await store._connect()
        return store

    async def __aenter__(self) -> PostgresStore:
        await self._connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connect(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is not None:
            return executor
        async with self._opening:
            if self._closed:
                raise StoreClosedError(f"{self!r} is closed")
            if self._executor is None:
                await asyncio.to_thread(self._connections.open)
                self._executor = ThreadPoolExecutor(
                    self._connections.max_size, thread_name_prefix="agentq-postgres"
                )
            return self._executor

    async def close(self) -> None:
        """Close the pool and its connections; further calls raise `StoreError`. Idempotent.

        Verbs in flight complete first.
        """
        if self._closed:
            return
        self._closed = True
        async with self._opening:
            executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, True)
        await asyncio.to_thread(self._connections.close)
        await self._listener.close()

    # ------------------------------------------------------------ running

    async def _call(self, fn: Callable[[], T], write: bool = True) -> T:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")
        executor = await self._connect()
        if not write and self._writes:
            await asyncio.wait(list(self._writes))
        try:
            future = asyncio.get_running_loop().run_in_executor(executor, fn)
        except RuntimeError as exc:  # the executor was shut down by close()
            raise StoreClosedError(f"{self!r} is closed") from exc
        if write:
            self._writes.add(future)
            future.add_done_callback(self._writes.discard)
        return await future

    async def _write(self, rule: Callable[..., T], *args: Any) -> T:
        """Run ``rule(PostgresTx, *args)`` in one transaction; return its result."""

        def run(conn: psycopg.Connection[Any]) -> T:
            return rule(PostgresTx(conn), *args)

        return await self._call(partial(self._connections.transact, run))

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a connection of the pool; return its result."""
        return await self._call(partial(self._connections.read, lambda c: fn(c, *args)), False)

    async def _write_job(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in one transaction; return its result."""
        return await self._call(
            partial(self._connections.transact, lambda conn: fn(conn, *args))
        )

    # ------------------------------------------------------------ wake-ups

    async def wait_for_work(self, timeout: float) -> bool:  # noqa: ASYNC109 - a poll bound
        """Wait until new work may be ready, at most `timeout` seconds (``LISTEN/NOTIFY``).

        Any process's transaction that appends an event after which work may be ready (a
        workflow started, retried, resumed or re-admitted, a step completed, a retry
        scheduled, a wait timed out) notifies the store's channel at commit; this returns
        True as soon as a notification arrives. It listens on a connection of its own, made
        at the first call and made again after it drops (the call that finds it dropped
        returns True at once, so that the caller polls); a `timeout` of 0 only makes sure it
        listens (a serving engine calls it so before its first poll). The wait runs in the
        caller's task.

        Args:
            timeout: Seconds, >= 0.

        Returns:
            True if notified (possibly spuriously: read `ready_workflows` either way), False
            once `timeout` has passed.

        Raises:
            StoreError: The store is closed, or no connection could be made to listen on.
            ValueError: A bad `timeout`.
        """
        seconds = check_number(timeout, "timeout")
        if seconds < 0:
            raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")
        await self._connect()
        return await self._listener.wait(seconds)
