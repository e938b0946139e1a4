"""A durable host for the services: external APIs that honour idempotency keys.

`ServiceHost` plays the part of real external services (a payment API, a booking API) that
accept an idempotency key with each request: a key applied once is never applied again, and
a retry with the same key gets the stored result back. It keeps every task's service state in
a SQLite file of its own::

    service_state(task_id, class_name, state_json)           -- one snapshot per service
    applied_calls(idempotency_key PRIMARY KEY, task_id, seq,  -- one row per applied call
                  call_text, result_json, applied_at)

`apply` runs in one `BEGIN IMMEDIATE` transaction: look the key up; apply the call to the
task's services; write the changed service's new state, the key and the result; commit. A
process killed at any moment (SIGKILL included) leaves either all of it or none of it. WAL mode
with `synchronous=NORMAL`: a commit survives the process's death; a power cut may lose the
last commits, whole.

Live service instances are cached per task. The cache is checked against the file in every
transaction (the number of calls applied to the task), so a second host on the same file,
or another process, never makes it stale; it is dropped whenever a transaction fails.

Thread safety: one connection, used under one lock, so `apply` may be called from worker
threads (the agentq queue runs plain callables in threads). Calls are serialized, which also
keeps process-global side effects of the services (`mpmath.mp.dps`) from interleaving.

Example:
    >>> with ServiceHost("services.sqlite3", tasks) as host:
    ...     applied = host.apply(task.id, "multi_turn_base_0/0/0", task.calls[0][0])
    >>> applied.duplicate
    False
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from .dataset import Call, Task
from .errors import KeyConflictError, SnapshotError, TransientToolError
from .jsontypes import JsonObject, JsonValue
from .services import Services
from .snapshot import canonical_json

_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_state (
    task_id TEXT NOT NULL,
    class_name TEXT NOT NULL,
    state_json TEXT NOT NULL,
    PRIMARY KEY (task_id, class_name)
);
CREATE TABLE IF NOT EXISTS applied_calls (
    idempotency_key TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    call_text TEXT NOT NULL,
    result_json TEXT NOT NULL,
    applied_at REAL NOT NULL,
    UNIQUE (task_id, seq)
);
"""


@dataclass(frozen=True)
class Applied:
    """The answer to `ServiceHost.apply`.

    Attributes:
        result: The call's JSON result (the stored one for a duplicate).
        duplicate: The key had been applied before; nothing was applied this time.
    """

    result: JsonValue
    duplicate: bool


@dataclass(frozen=True)
class HostStats:
    """Counts since this host was opened (a frozen snapshot).

    Attributes:
        applied: Calls applied and committed.
        duplicates: Calls refused because their key had been applied already.
        transient_errors: Injected `TransientToolError`s.
    """

    applied: int = 0
    duplicates: int = 0
    transient_errors: int = 0


@dataclass
class _Live:
    services: Services
    seq: int  # calls applied to the task when these instances were in sync with the file
    saved: dict[str, str] = field(default_factory=dict)  # state_json per class, as stored


class ServiceHost:
    """Durable, idempotent services for a set of tasks, in one SQLite file.

    Args:
        path: The SQLite file (created if missing).
        tasks: The tasks whose services it hosts.
        transient_error_rate: Probability (0 ≤ rate < 1) that `apply` raises
            `TransientToolError` before doing anything.
        seed: Seed of the fault injector's own `random.Random`.
        before_commit: Test hook called with the idempotency key inside the transaction,
            after the call was applied in memory and before the commit (crash tests kill the
            process there).
        clock: Wall clock for `applied_at`, in seconds since the epoch.

    Raises:
        ValueError: The rate is out of range.
    """

    def __init__(
        self,
        path: str | Path,
        tasks: Iterable[Task],
        *,
        transient_error_rate: float = 0.0,
        seed: int = 0,
        before_commit: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0.0 <= transient_error_rate < 1.0:
            raise ValueError(f"transient_error_rate must be in [0, 1), got {transient_error_rate}")
        self._tasks = {task.id: task for task in tasks}
        self._rate = transient_error_rate
        self._faults = random.Random(seed)
        self._before_commit = before_commit
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._stats = HostStats()
        self._refused: list[str] = []
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA busy_timeout = 10000")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def apply(self, task_id: str, idempotency_key: str, call: Call) -> Applied:
        """Apply a call once per idempotency key, durably.

        In one transaction: if the key was applied, return its stored result with
        `duplicate=True` and apply nothing; else apply the call to the task's services and
        store the new state, the key and the result together.

        Args:
            task_id: The task whose services receive the call.
            idempotency_key: Unique key of this call; retries must reuse it.
            call: The call.

        Returns:
            The result, and whether the key was a duplicate.

        Raises:
            TransientToolError: Injected fault; nothing was done, retry with the same key.
            KeyConflictError: The key was applied to another call or task.
            UnknownFunctionError: No involved service offers the function; nothing applied.
            CallArgumentError: The arguments do not fit; nothing applied.
            ToolCallError: The service raised; nothing applied (its partial effect is dropped).
            ValueError: The task id is not one of the host's tasks.
            sqlite3.Error: The file failed (locked beyond the busy timeout, disk full, ...);
                nothing applied.
        """
        task = self._task(task_id)
        with self._lock:
            if self._rate and self._faults.random() < self._rate:
                self._count(transient_errors=1)
                raise TransientToolError(f"injected transient error for key {idempotency_key!r}")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                applied = self._apply(task, idempotency_key, call)
                if not applied.duplicate and self._before_commit is not None:
                    self._before_commit(idempotency_key)
                self._db.execute("COMMIT")
            except BaseException:
                self._live.pop(task_id, None)  # its instances may hold uncommitted effects
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            if applied.duplicate:
                self._count(duplicates=1)
                self._refused.append(idempotency_key)
            else:
                self._count(applied=1)
            return applied

    def final_states(self, task_id: str) -> dict[str, JsonObject]:
        """Return the committed snapshot of each of the task's services, by class name.

        A service no call has touched yet is reported in its initial state.

        Raises:
            ValueError: The task id is not one of the host's tasks.
        """
        task = self._task(task_id)
        with self._lock:
            stored = self._stored_states(task_id)
        missing = [name for name in task.involved_classes if name not in stored]
        if missing:
            fresh = Services.fresh(task)
            stored.update({name: fresh.state(name) for name in missing})
        return {name: stored[name] for name in task.involved_classes}

    def results(self, task_id: str) -> dict[str, JsonValue]:
        """Return the stored result of each call applied to a task, by key, in applied order.

        Raises:
            ValueError: The task id is not one of the host's tasks.
        """
        self._task(task_id)
        with self._lock:
            rows = self._db.execute(
                "SELECT idempotency_key, result_json FROM applied_calls"
                " WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()
        return {key: json.loads(text) for key, text in rows}

    def stats(self) -> HostStats:
        """Return the counts since this host was opened."""
        with self._lock:
            return self._stats

    def refused_keys(self) -> list[str]:
        """Return the keys refused as duplicates since this host was opened, in order (one
        entry per refusal: `HostStats.duplicates` of them)."""
        with self._lock:
            return list(self._refused)

    def close(self) -> None:
        """Close the file. The host cannot be used afterwards."""
        with self._lock:
            self._live.clear()
            self._db.close()

    def __enter__(self) -> ServiceHost:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _apply(self, task: Task, key: str, call: Call) -> Applied:
        row = self._db.execute(
            "SELECT task_id, call_text, result_json FROM applied_calls WHERE idempotency_key = ?",
            (key,),
        ).fetchone()
        if row is not None:
            if (row[0], row[1]) != (task.id, call.text):
                raise KeyConflictError(key, f"{row[0]}: {row[1]}", f"{task.id}: {call.text}")
            return Applied(json.loads(row[2]), duplicate=True)
        (seq,) = self._db.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM applied_calls WHERE task_id = ?", (task.id,)
        ).fetchone()
        live = self._live.get(task.id)
        if live is None or live.seq != seq:
            live = self._load(task, seq)
        name = live.services.owner(call.function)
        result = live.services.invoke(call)
        state = canonical_json(live.services.state(name))
        if live.saved.get(name) != state:
            self._db.execute(
                "INSERT INTO service_state (task_id, class_name, state_json) VALUES (?, ?, ?)"
                " ON CONFLICT (task_id, class_name) DO UPDATE SET state_json = excluded.state_json",
                (task.id, name, state),
            )
        self._db.execute(
            "INSERT INTO applied_calls"
            " (idempotency_key, task_id, seq, call_text, result_json, applied_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (key, task.id, seq + 1, call.text, canonical_json(result), self._clock()),
        )
        live.seq = seq + 1
        live.saved[name] = state
        return Applied(result, duplicate=False)

    def _load(self, task: Task, seq: int) -> _Live:
        stored = self._stored_states(task.id)
        services = Services.for_task(task, stored)
        saved = {name: canonical_json(services.state(name)) for name in task.involved_classes}
        live = _Live(services, seq, saved)
        self._live[task.id] = live
        return live

    def _stored_states(self, task_id: str) -> dict[str, JsonObject]:
        rows = self._db.execute(
            "SELECT class_name, state_json FROM service_state WHERE task_id = ?", (task_id,)
        ).fetchall()
        states: dict[str, JsonObject] = {}
        for name, text in rows:
            state = json.loads(text)
            if not isinstance(state, dict):
                raise SnapshotError(f"corrupt state of {name} for task {task_id}")
            states[name] = state
        return states

    def _task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            raise ValueError(f"unknown task id {task_id!r}")
        return self._tasks[task_id]

    def _count(self, applied: int = 0, duplicates: int = 0, transient_errors: int = 0) -> None:
        stats = self._stats
        self._stats = HostStats(
            stats.applied + applied,
            stats.duplicates + duplicates,
            stats.transient_errors + transient_errors,
        )
