"""`PostgresStore`: the durable store on a PostgreSQL database, through psycopg 3 and its pool.

The store owns a `Connections` (`postgres_connection`: a pool of synchronous connections,
opened and migrated on first use) and a thread pool as large as the connection pool: each
write verb runs its transition rule in one transaction on a worker thread, over `PostgresTx`
(`postgres_tx`), which locks the workflow's row first; each read runs a query of
`postgres_reads`. The `JobOutcomeStore` verbs go the same ways, over `postgres_jobs`.
``docs/store.md`` ("PostgreSQL") tells the whole story.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import agentq.store.postgres_jobs as postgres_jobs
import agentq.store.postgres_reads as postgres_reads
import agentq.store.rules_attempt as rules_attempt
import agentq.store.rules_calls as rules_calls
import agentq.store.rules_lease as rules_lease
import agentq.store.rules_workflow as rules_workflow
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
from agentq.store.postgres_connection import Connections, describe_dsn
from agentq.store.postgres_listen import Listener
from agentq.store.postgres_tx import PostgresTx, rebuild
from agentq.store.ready import ReadyWork
from agentq.store.rows import CallRow, StepRow, WorkflowRow, WorkflowState

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresStore"]

T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresStore:
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

    Example:
        >>> async with PostgresStore("postgresql://agentq@localhost/agentq") as store:
        ...     engine = WorkflowEngine(queue, store)
        ...     await engine.run(workflow)
    """

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
        self._listener = Listener(dsn, schema, float(connect_timeout), describe_dsn(dsn))
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
                raise StoreError(f"{self!r} is closed")
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
            raise StoreError(f"{self!r} is closed")
        executor = await self._connect()
        if not write and self._writes:
            await asyncio.wait(list(self._writes))
        try:
            future = asyncio.get_running_loop().run_in_executor(executor, fn)
        except RuntimeError as exc:  # the executor was shut down by close()
            raise StoreError(f"{self!r} is closed") from exc
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

    # ------------------------------------------------------------ writes

    async def start_workflow(
        self,
        workflow_id: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        *,
        definition: str | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """See `DurableStore.start_workflow`."""
        return await self._write(
            rules_workflow.start_workflow, workflow_id, step_names, input, now, definition
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
            rules_lease.claim_step, workflow_id, step_index, worker_id, lease_ttl, now,
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
        """See `JobOutcomeStore.save_job`."""
        save = postgres_jobs.save
        return await self._call(partial(
            self._connections.transact,
            lambda conn: save(conn, key, fingerprint, output, completed_at, expires_at),
        ))

    async def forget_job(self, key: str) -> bool:
        """See `JobOutcomeStore.forget_job`."""
        key = validate_key(key)
        return await self._call(
            partial(self._connections.transact, lambda conn: postgres_jobs.forget(conn, key))
        )

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log, in one
        transaction (other writers wait for it).

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        await self._write(rebuild)

    # ------------------------------------------------------------ wake-ups

    async def wait_for_work(self, timeout: float) -> bool:  # noqa: ASYNC109 - a poll bound
        """Wait until new work may be ready, at most `timeout` seconds (``LISTEN/NOTIFY``).

        Any process's transaction that appends an event after which work may be ready (a
        workflow started, retried, resumed or re-admitted, a step completed, a retry
        scheduled, a wait timed out) notifies the store's channel at commit; this returns
        True as soon as a notification arrives. It listens on a connection of its own, made
        at the first call and made again after it drops (the call that finds it dropped
        returns True at once, so that the caller polls). The wait runs in the caller's task.

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
            raise StoreError(f"{self!r} is closed")
        await self._connect()
        return await self._listener.wait(seconds)

    # ------------------------------------------------------------ reads

    async def load_job(self, key: str, now: float) -> StoredJob | None:
        """See `JobOutcomeStore.load_job`."""
        key, now = validate_key(key), check_number(now, "now")
        return await self._read(postgres_jobs.load, key, now)

    async def expired_leases(self, now: float) -> list[Execution]:
        """See `DurableStore.expired_leases`."""
        now, _ = check_now(now)
        return await self._read(postgres_reads.expired_leases, now)

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """See `DurableStore.get_workflow`."""
        workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(postgres_reads.get_workflow, workflow_id)

    async def ready_workflows(
        self, now: float, definitions: Iterable[str], limit: int
    ) -> list[ReadyWork]:
        """See `DurableStore.ready_workflows`.

        One query; it skips (``FOR UPDATE SKIP LOCKED``) the workflows whose row another
        transaction holds at that moment (a worker claiming or recording), so that serving
        engines polling together spread over the ready work instead of all reaching for the
        same workflow. Nothing is claimed: the lock ends with the statement.
        """
        at, names, most = check_ready(now, definitions, limit)
        return await self._read(postgres_reads.ready_workflows, at, names, most)

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """See `DurableStore.workflows`."""
        return await self._read(postgres_reads.workflows, check_state(state))

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """See `DurableStore.step_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        return await self._read(postgres_reads.step_rows, workflow_id)

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """See `DurableStore.calls`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        index = None if step_index is None else check_index(step_index)
        return await self._read(postgres_reads.calls, workflow_id, index)

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """See `DurableStore.load_events`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, limit = check_seq(after_seq, limit)
        return await self._read(postgres_reads.load_events, workflow_id, after_seq, limit)

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """See `DurableStore.event_rows`."""
        if workflow_id is not None:
            workflow_id = validate_key(workflow_id, "workflow id")
        after_seq, _ = check_seq(after_seq)
        return await self._read(postgres_reads.event_rows, workflow_id, after_seq)

    async def last_seq(self) -> int:
        """See `DurableStore.last_seq`."""
        return await self._read(postgres_reads.last_seq)
