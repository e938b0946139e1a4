"""Benchmark the notebook layer's reads against raw floors.

1. `events_frame` over 1,000,000 events in a SQLite file, beside the floor: `pandas.read_sql`
   of the same table through a bare `sqlite3` connection. Target: within 2x of the floor.
2. One `Dashboard` refresh after one new event, with 100,000 events in the store, beside the
   same with 1,000 events. Reads are incremental, so the cost must not grow with the log.
   Target: the 100k refresh within 2x of the 1k one.
3. The first render of a `Dashboard` (its first refresh: the workflow index, the log's last
   5,000 events, the steps of the first page and of the waiting workflows) at 100,000 events.
   Target: <= 0.3 s wall. Printed as wall time and as CPU time of the process (the store's
   thread included), which a machine shared with other work does not inflate, with the load
   average (wall time on a loaded machine measures the neighbours), best and median of
   `--rounds` fresh stores, beside its floor: the same two big reads (the workflow index
   with each workflow's latest event, the log's tail) as bare ``sqlite3`` queries.

The files are built once with bare ``sqlite3`` ``executemany`` into `SqliteStore`'s schema
(synthetic workflows: 3 steps each, some retried, some waiting for approval and resumed), and
the projection is rebuilt from the log by the store itself. Run: ``python bench/frames.py``
(``--events N`` to change the million; ``--keep DIR`` to reuse the files).
"""

from __future__ import annotations

import sys
from pathlib import Path

# `python bench/frames.py` puts bench/ first on sys.path, where bench/queue.py would shadow the
# standard library's `queue` (which asyncio's executor and aiosqlite import).
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pandas as pd

from agentq.frames import events_frame
from agentq.queue import Queue
from agentq.store import SqliteStore
from agentq.widgets import Dashboard
from agentq.workflows import WorkflowEngine

T0 = 1_767_225_600.0
STEPS = ("fetch", "draft", "send")


def _workflow_rows(n: int, at: float) -> list[tuple[Any, ...]]:
    """Rows (without seq) of one well-formed 3-step workflow, events 1 ms apart from `at`."""
    wf = f"wf-{n:07d}"
    rows: list[tuple[Any, ...]] = []
    token = 0

    def add(kind: str, index: int | None, attempt: int | None, data: dict[str, Any]) -> None:
        name = None if index is None else STEPS[index]
        worker = None if index is None else "bench-worker"
        when = at + 0.001 * len(rows)
        rows.append((when, wf, index, name, kind, attempt, worker, json.dumps(data)))

    def start(index: int, attempt: int) -> None:
        nonlocal token
        token += 1
        add("StepStarted", index, attempt, {"lease_token": token, "expires_at": at + 30})

    add("WorkflowStarted", None, None, {"steps": list(STEPS), "input": {"n": n}})
    outputs = []
    for index in range(3):
        attempt = 1
        if index == 1 and n % 10 == 0:  # a retried step
            start(index, attempt)
            add("StepFailed", index, attempt, {
                "reason": "error",
                "error": {"type": "TimeoutError", "message": "upstream", "traceback": ""},
            })
            add("RetryScheduled", index, attempt, {"retry_at": at + 0.5, "delay": 0.5})
            attempt = 2
        if index == 2 and n % 20 == 0:  # a step that waits for approval, then is resumed
            start(index, attempt)
            add("StepWaiting", index, attempt, {"reason": "send the draft?"})
            add("StepResumed", index, None, {"input": {"approved": True, "note": ""}})
            attempt = 1
        start(index, attempt)
        output = {"step": STEPS[index], "n": n}
        outputs.append(output)
        add("StepCompleted", index, attempt, {"output": output})
    add("WorkflowCompleted", None, None, {"outputs": outputs})
    return rows


def synthetic_events(count: int) -> Iterator[tuple[Any, ...]]:
    """Yield event rows (seq first, then the ``events`` columns) of whole workflows until at
    least `count` rows were yielded."""
    seq, n = 0, 0
    while seq < count:
        for row in _workflow_rows(n, T0 + seq * 0.001):
            seq += 1
            yield (seq, *row)
        n += 1


def write_events(path: Path, count: int) -> int:
    """Insert about `count` events into `path` (which has the schema); return the total."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        with conn:
            conn.executemany(
                "INSERT INTO events (seq, at, workflow_id, step_index, step_name, kind, "
                "attempt, worker_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                synthetic_events(count),
            )
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def existing_events(path: Path) -> int | None:
    """The number of events in `path`, or None when there is no such file."""
    if not os.path.exists(path):
        return None
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


async def build(path: Path, count: int, projection: bool) -> int:
    """Create `path` with the store's schema and about `count` events (once); return the
    number of events."""
    existing = existing_events(path)
    if existing is not None:
        return existing
    async with SqliteStore(path):
        pass  # creates the file and the schema
    total = write_events(path, count)
    if projection:
        async with SqliteStore(path) as store:
            await store.rebuild_projection()
    return total


def best(times: list[float]) -> float:
    return min(times)


async def frame_vs_floor(path: Path, rounds: int) -> None:
    floors, ours = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        conn = sqlite3.connect(path)
        floor = pd.read_sql("SELECT * FROM events", conn)
        conn.close()
        floors.append(time.perf_counter() - start)
        del floor
        start = time.perf_counter()
        async with SqliteStore(path) as store:
            frame = await events_frame(store)
        ours.append(time.perf_counter() - start)
        rows = len(frame)
        del frame
    floor_s, ours_s = best(floors), best(ours)
    print(f"events_frame, {rows:,} events (best of {rounds}):")
    print(f"  floor  pandas.read_sql(SELECT * FROM events)   {floor_s:7.3f} s")
    print(f"  agentq events_frame(SqliteStore)              {ours_s:7.3f} s")
    print(f"  ratio  {ours_s / floor_s:.2f}x the floor  (target <= 2x)")


async def refresh_cost(path: Path, samples: int) -> tuple[float, float, float, float, int]:
    """Return (first refresh s, its CPU s, median refresh after one new event s, idle refresh
    s, events)."""
    async with SqliteStore(path) as store, Queue() as queue:
        engine = WorkflowEngine(queue, store, worker_id="bench")
        events = await store.last_seq()
        dash = Dashboard(engine)
        start, cpu = time.perf_counter(), time.process_time()
        await dash.refresh()
        first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
        times, idle = [], []
        run = uuid.uuid4().hex[:8]  # fresh ids, so every sample appends exactly one event
        warmup = 5  # unmeasured rounds first: the first ones pay for imports and caches
        for i in range(warmup + samples):
            # One new event (WorkflowStarted) by the store's own verb, then one refresh.
            seq = await store.last_seq()
            await store.start_workflow(f"new-{run}-{i}", ["a", "b"], None, time.time())
            assert await store.last_seq() == seq + 1
            start = time.perf_counter()
            await dash.refresh()
            elapsed = time.perf_counter() - start
            assert dash.source.seen == seq + 1
            start = time.perf_counter()
            await dash.refresh()
            if i >= warmup:
                times.append(elapsed)
                idle.append(time.perf_counter() - start)
        assert f'data-workflow="new-{run}-{warmup + samples - 1}"' in dash.steps.html.value
        return first, first_cpu, statistics.median(times), statistics.median(idle), events


FLOOR_SQL = (
    "SELECT w.*, e.seq, e.at FROM workflows AS w JOIN events AS e ON e.seq = (SELECT seq "
    "FROM events WHERE workflow_id = w.workflow_id ORDER BY seq DESC LIMIT 1)",
    "SELECT * FROM events WHERE seq > (SELECT max(seq) FROM events) - 5000",
)


def render_floor(path: Path) -> float:
    """Seconds of the first render's two big reads as bare ``sqlite3`` queries (fetched)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        start = time.perf_counter()
        for sql in FLOOR_SQL:
            conn.execute(sql).fetchall()
        return time.perf_counter() - start


async def first_render(path: Path, rounds: int) -> None:
    """Print the first render's wall and CPU time (best and median of `rounds`), the load
    average and the floor."""
    walls, cpus, floors = [], [], []
    for _ in range(rounds):
        floors.append(render_floor(path))
        async with SqliteStore(path) as store, Queue() as queue:
            await store.last_seq()  # the connection is open, as in a notebook
            dash = Dashboard(WorkflowEngine(queue, store, worker_id="bench"))
            start, cpu = time.perf_counter(), time.process_time()
            await dash.refresh()
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    events = existing_events(path) or 0
    print(f"\nDashboard first render at {events:,} events ({rounds} fresh stores; "
          f"load average {load}):")
    print(f"  wall  best {min(walls):.3f} s  median {statistics.median(walls):.3f} s"
          "   (target <= 0.3 s)")
    print(f"  CPU   best {min(cpus):.3f} s  median {statistics.median(cpus):.3f} s")
    print(f"  floor {min(floors):.3f} s  (bare sqlite3: the workflow index and the 5,000-event "
          "tail)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep files in DIR")
    parser.add_argument("--first-render", action="store_true",
                        help="only the first render at 100,000 events (row 3)")
    args = parser.parse_args()
    if args.first_render:
        with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
            folder = args.keep or Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / "first-100000.db"
            await build(path, 100_000, projection=True)
            await first_render(path, max(args.rounds, 5))
        return
    with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        big = folder / f"events-{args.events}.db"
        start = time.perf_counter()
        total = await build(big, args.events, projection=False)
        print(f"built {big.name}: {total:,} events in {time.perf_counter() - start:.1f} s\n")
        await frame_vs_floor(big, args.rounds)

        print("\nDashboard.refresh() after one new event (median of "
              f"{args.samples}; a real SqliteStore):")
        results = {}
        firsts: dict[int, tuple[float, float]] = {}
        for count in (1_000, 100_000):
            path = folder / f"dash-{count}.db"
            await build(path, count, projection=True)
            first, first_cpu, one, idle, events = await refresh_cost(path, args.samples)
            results[count] = one
            firsts[count] = (first, first_cpu)
            print(f"  {events:>7,} events: first refresh {first * 1000:8.1f} ms, "
                  f"refresh after one event {one * 1000:6.2f} ms, idle refresh "
                  f"{idle * 1000:5.2f} ms")
        ratio = results[100_000] / results[1_000]
        print(f"  ratio  100k / 1k = {ratio:.2f}x  (target <= 2x)")
        wall, cpu = firsts[100_000]
        print(f"  (first refresh above, after the build: {wall:.3f} s wall, {cpu:.3f} s CPU)")
        await first_render(folder / "dash-100000.db", max(args.rounds, 5))


if __name__ == "__main__":
    asyncio.run(main())
