"""Durable workflow throughput on SQLite, beside the floors for the same writes.

    python bench/workflows.py [--workflows 500] [--repeat 3]

Every row writes the same durable history for N three-step workflows: 8 events each
(WorkflowStarted, StepStarted and StepCompleted per step, WorkflowCompleted) into the
append-only ``events`` table, each committed together with its ``steps`` (or ``workflows``)
row, on a fresh file with WAL and ``synchronous=NORMAL``. Rows:

- floor, sqlite3: plain synchronous sqlite3 with no event loop, one transaction per event:
  what the machine can do at all.
- floor, aiosqlite (the 1x row): one transaction per event as three awaits (insert the event,
  upsert the row, commit): what a straightforward asyncio program gets.
- store: the same history through `SqliteStore`'s verbs (start_workflow, then claim_step and
  complete_step per step), one workflow after another, then 4 at a time (group commit).
- agentq: the whole engine: `WorkflowEngine.run` of no-op three-step workflows, each step a
  job through the `Queue` with its lease renewer, one workflow after another, then 4 at a time.

Each row prints its wall-clock rate beside the floor's and its CPU seconds (every thread of
the process, `time.process_time`) beside the floor's: on a loaded machine the CPU ratio moves
much less than the wall ratio. The load average is printed before and after.

To add a row, write ``async def my_row(path: Path, workflows: int) -> int`` that writes the
history of `workflows` workflows into a new file at `path` and returns the number of events
written, and add it to `ROWS`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

# Run as a script, bench/ comes first on sys.path and its queue.py would shadow the stdlib's.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import aiosqlite  # noqa: E402

from agentq import (  # noqa: E402
    LaneConfig,
    Priority,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowEngine,
)
from agentq.store import Claimed, SqliteStore  # noqa: E402
from agentq.store.sqlite.schema import migrate  # noqa: E402

STEPS = ("a", "b", "c")
EVENTS_PER_WORKFLOW = 2 + 2 * len(STEPS)
T0 = 1_767_225_600.0

Row = Callable[[Path, int], Awaitable[int]]
T = TypeVar("T")

# ---------------------------------------------------------------- the floors: same writes, bare

_INSERT_EVENT = (
    "INSERT INTO events (at, workflow_id, step_index, step_name, kind, attempt, worker_id, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_WORKFLOW = (
    "INSERT INTO workflows (workflow_id, started_seq, state, step_names, input, reason, "
    "created_at) VALUES (?, ?, ?, ?, 'null', NULL, ?) "
    "ON CONFLICT (workflow_id) DO UPDATE SET state = excluded.state"
)
_UPSERT_STEP = (
    "INSERT INTO steps (workflow_id, step_index, step_name, state, attempt, worker_id, "
    "lease_token, lease_expires_at, output, resumed, started_at, finished_at) "
    "VALUES (?, ?, ?, ?, 1, 'bench', 1, ?, ?, 0, ?, ?) "
    "ON CONFLICT (workflow_id, step_index) DO UPDATE SET state = excluded.state, "
    "lease_expires_at = excluded.lease_expires_at, output = excluded.output, "
    "finished_at = excluded.finished_at"
)


def history(workflows: int) -> list[tuple[tuple[object, ...], str, tuple[object, ...]]]:
    """The floors' transactions: ``(event params, projection SQL, projection params)``."""
    out: list[tuple[tuple[object, ...], str, tuple[object, ...]]] = []
    seq = 0
    for w in range(workflows):
        wid, now = f"wf-{w}", T0 + w

        def event(
            kind: str, data: object, index: int | None = None, _wid: str = wid, _now: float = now
        ) -> tuple[object, ...]:
            name = None if index is None else STEPS[index]
            attempt = None if index is None else 1
            worker = None if index is None else "bench"
            return (_now, _wid, index, name, kind, attempt, worker, json.dumps(data))

        seq += 1
        started = seq
        names = json.dumps(list(STEPS))
        out.append((
            event("WorkflowStarted", {"steps": list(STEPS), "input": None}),
            _UPSERT_WORKFLOW, (wid, started, "running", names, now),
        ))
        for i, name in enumerate(STEPS):
            seq += 1
            out.append((
                event("StepStarted", {"lease_token": 1, "expires_at": now + 30}, i),
                _UPSERT_STEP, (wid, i, name, "leased", now + 30, None, now, None),
            ))
            seq += 1
            out.append((
                event("StepCompleted", {"output": None}, i),
                _UPSERT_STEP, (wid, i, name, "completed", None, "null", now, now),
            ))
        seq += 1
        out.append((
            event("WorkflowCompleted", {"outputs": [None] * len(STEPS)}),
            _UPSERT_WORKFLOW, (wid, started, "completed", names, now),
        ))
    return out


def _create(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, str(path))  # the store's schema, so every row writes the same tables
    conn.close()


async def floor_sqlite3(path: Path, workflows: int) -> int:
    """Plain sqlite3, no event loop: one transaction per event (the machine's limit)."""
    _create(path)
    txs = history(workflows)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = NORMAL")
    start = _start()
    for event, sql, params in txs:
        conn.execute(_INSERT_EVENT, event)
        conn.execute(sql, params)
        conn.commit()
    _stop(start)
    conn.close()
    return len(txs)


async def floor_aiosqlite(path: Path, workflows: int) -> int:
    """aiosqlite, one transaction per event as 3 awaits: insert, upsert, commit (the 1x)."""
    _create(path)
    txs = history(workflows)
    async with aiosqlite.connect(path) as db:
        await db.execute("PRAGMA synchronous = NORMAL")
        start = _start()
        for event, sql, params in txs:
            await db.execute(_INSERT_EVENT, event)
            await db.execute(sql, params)
            await db.commit()
        _stop(start)
    return len(txs)


# ---------------------------------------------------------------- agentq's store


async def _one_workflow(store: SqliteStore, w: int) -> None:
    wid = f"wf-{w}"
    await store.start_workflow(wid, STEPS, None, T0 + w)
    for i in range(len(STEPS)):
        claim = await store.claim_step(wid, i, "bench", 30.0, T0 + w)
        assert isinstance(claim, Claimed), claim
        await store.complete_step(claim.execution, None, T0 + w)


async def _pool(items: Iterable[T], at_a_time: int, fn: Callable[[T], Awaitable[None]]) -> None:
    """Run `fn` over `items`, `at_a_time` at once, timing the whole as the row's measurement."""
    todo = iter(items)

    async def worker() -> None:
        for item in todo:
            await fn(item)

    start = _start()
    await asyncio.gather(*(worker() for _ in range(at_a_time)))
    _stop(start)


async def _drive(path: Path, workflows: int, at_a_time: int) -> int:
    async with SqliteStore(path) as store:
        await _pool(range(workflows), at_a_time, lambda w: _one_workflow(store, w))
        return await store.last_seq()


async def store_sequential(path: Path, workflows: int) -> int:
    """SqliteStore verbs, one workflow after another."""
    return await _drive(path, workflows, 1)


async def store_4_at_a_time(path: Path, workflows: int) -> int:
    """SqliteStore verbs, 4 workflows at a time (their verbs share transactions)."""
    return await _drive(path, workflows, 4)


# ---------------------------------------------------------------- agentq's engine


async def _noop(ctx: StepContext) -> None:
    return None


async def _engine(path: Path, workflows: int, at_a_time: int) -> int:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=workflows, permits=max(at_a_time, 1))}
    async with Queue(lanes) as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store, worker_id="bench")
        flows = [
            Workflow(f"wf-{w}", [StepDef(name, _noop) for name in STEPS]) for w in range(workflows)
        ]

        async def run(wf: Workflow) -> None:
            result = await engine.run(wf)
            assert result.status is RunStatus.COMPLETED, result

        await _pool(flows, at_a_time, run)
        return await store.last_seq()


async def engine_sequential(path: Path, workflows: int) -> int:
    """WorkflowEngine.run on SqliteStore, one workflow after another."""
    return await _engine(path, workflows, 1)


async def engine_4_at_a_time(path: Path, workflows: int) -> int:
    """WorkflowEngine.run on SqliteStore, 4 workflows at a time."""
    return await _engine(path, workflows, 4)


ROWS: list[tuple[str, Row]] = [
    ("floor: sqlite3, no event loop, 1 tx/event", floor_sqlite3),
    ("floor: aiosqlite, 3 awaits/event", floor_aiosqlite),
    ("store: SqliteStore verbs, sequential", store_sequential),
    ("store: SqliteStore verbs, 4 at a time", store_4_at_a_time),
    ("agentq: WorkflowEngine, sequential", engine_sequential),
    ("agentq: WorkflowEngine, 4 at a time", engine_4_at_a_time),
]
BASELINE = "floor: aiosqlite, 3 awaits/event"

# ---------------------------------------------------------------- measuring and printing

_elapsed: list[tuple[float, float]] = []


def _start() -> tuple[float, float]:
    """The wall clock and the process's CPU time (every thread) now."""
    return time.perf_counter(), time.process_time()


def _stop(start: tuple[float, float]) -> None:
    """Record the wall and CPU seconds since `start` as the current row's measurement."""
    wall, cpu = _start()
    _elapsed.append((wall - start[0], cpu - start[1]))


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


async def measure(row: Row, workflows: int) -> tuple[float, float, int]:
    """Run `row` once on a fresh file; return its wall and CPU seconds and its events."""
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        _elapsed.clear()
        events = await row(Path(tmp) / "bench.db", workflows)
        seconds, cpu = _elapsed[-1]
    expected = workflows * EVENTS_PER_WORKFLOW
    assert events == expected, f"{row.__name__} wrote {events} events, not {expected}"
    return seconds, cpu, events


async def main(workflows: int, repeat: int) -> None:
    print(
        f"bench/workflows.py: {workflows} workflows x {len(STEPS)} steps = "
        f"{workflows * EVENTS_PER_WORKFLOW} events per row; SQLite {sqlite3.sqlite_version}, "
        f"Python {sys.version.split()[0]}, WAL, synchronous=NORMAL, best of {repeat} "
        f"(rows interleaved); {_load()}"
    )
    best: dict[str, tuple[float, int]] = {}
    cpus: dict[str, float] = {}
    for _ in range(repeat):  # round-robin, so that a busy moment does not hit only one row
        for name, row in ROWS:
            seconds, cpu, events = await measure(row, workflows)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, events)
            cpus[name] = min(cpu, cpus.get(name, cpu))
    base = best[BASELINE][1] / best[BASELINE][0]
    print(
        f"{'row':<46}{'events/s':>10}{'workflows/s':>13}{'vs floor':>10}"
        f"{'CPU s':>8}{'CPU vs floor':>14}"
    )
    for name, (seconds, events) in best.items():
        rate = events / seconds
        print(
            f"{name:<46}{rate:>10,.0f}{workflows / seconds:>13,.0f}{rate / base:>9.2f}x"
            f"{cpus[name]:>8.3f}{cpus[BASELINE] / cpus[name]:>13.2f}x"
        )
    print(f"after: {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.workflows, args.repeat))
