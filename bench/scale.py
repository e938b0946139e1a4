"""Serving processes at scale: N worker processes (1, 2, 4) on one store, beside a raw driver floor.

    python -m bench.scale [--workflows 1000] [--dsn DSN] [--work 0.0]

For SQLite (one file) and PostgreSQL (a fresh schema; a throwaway cluster of its own unless
``--dsn`` or ``AGENTQ_PG_DSN`` is given), this process starts `--workflows` instances of the
three-step definition ``job`` of ``tests/serve_child.py`` (``WorkflowEngine.start``, untimed),
then spawns N serving processes of that script (lane of 4 permits, 2 s leases, each body
``--work`` seconds long) and times from the spawn until the store says every instance
completed (so each row includes the children's start-up, about 0.5 s). Every body appends
``"<workflow> <step> <pid>"`` to a side file: the counts printed come from that file, not
from the store, so they are what really ran.

Rows per store:

- floor: the raw driver (sqlite3 on a WAL file with ``synchronous=NORMAL``; psycopg on one
  connection) inserting as many rows as there are step transitions (workflows x 3), one
  transaction each, in the same run: what the driver and the disk can do at all (the 1x).
- serve xN: N serving processes; workflows/s, step transitions/s and the ratio to the floor.
- kill: 4 serving processes, one SIGKILLed once it has started a 40th
  of all the bodies (a tenth of its share); the others finish
  everything. Printed: bodies run, steps run twice (at most the killed worker's in-flight
  steps, each with a `WorkerRecovered`) and the recoveries recorded.

Each serve row asserts that every step body ran exactly once; the kill row asserts that every
step ran, and that each one run twice was taken over from the killed worker. The machine's load
average is printed first and last: the numbers are only comparable on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import psycopg  # noqa: E402

from agentq import Queue, WorkflowEngine  # noqa: E402
from agentq.events import EventKind  # noqa: E402
from agentq.store import WorkflowState  # noqa: E402
from tests import serve_child as child  # noqa: E402

CHILD = _HERE.parent / "tests" / "serve_child.py"
STEPS = "abc"
WORKERS = (1, 2, 4)


class Store:
    """Where the run's store lives: a SQLite file, or a PostgreSQL DSN and schema."""

    def __init__(self, place: str, schema: str | None = None) -> None:
        self.place = place
        self.schema = schema

    @property
    def args(self) -> list[str]:
        """The child's DB and SIDE arguments come first; SCHEMA, if any, last."""
        return [] if self.schema is None else [self.schema]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def floor_sqlite(path: Path, rows: int) -> float:
    """sqlite3 inserting `rows` rows, one transaction each; returns rows/s."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, workflow TEXT, step TEXT, data TEXT)")
    start = time.perf_counter()
    for i in range(rows):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (i, f"w{i // 3}", STEPS[i % 3], "{}"))
        conn.execute("COMMIT")
    seconds = time.perf_counter() - start
    conn.close()
    return rows / seconds


def floor_psycopg(dsn: str, schema: str, rows: int) -> float:
    """psycopg inserting `rows` rows, one transaction each; returns rows/s."""
    with psycopg.connect(dsn) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.t (id bigint PRIMARY KEY, workflow text, step text, data jsonb)"
        )
        conn.commit()
        start = time.perf_counter()
        for i in range(rows):
            conn.execute(
                f"INSERT INTO {schema}.t VALUES (%s, %s, %s, '{{}}')",
                (i, f"w{i // 3}", STEPS[i % 3]),
            )
            conn.commit()
        seconds = time.perf_counter() - start
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.commit()
    return rows / seconds


@asynccontextmanager
async def serving(
    store: Store, side: Path, count: int, env: dict[str, str]
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """`count` processes of ``tests/serve_child.py`` on `store`, killed on the way out."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(CHILD),
            store.place,
            str(side),
            f"w{i}",
            *store.args,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        for i in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def start_all(store: Store, side: Path, workflows: int) -> list[str]:
    """Store `workflows` instances of ``job`` (not run here); return their ids."""
    ids = [f"job-{i:05d}" for i in range(workflows)]
    async with Queue() as queue, child.open_store(store.place, store.schema) as st:
        engine = WorkflowEngine(queue, st, worker_id="starter")
        for i, wid in enumerate(ids):
            assert await engine.start(child.definition(side), wid, i)
    return ids


async def all_completed(store: Store, workflows: int) -> None:
    """Poll the store until `workflows` instances completed (bounded: 15 minutes)."""
    async with child.open_store(store.place, store.schema) as st, asyncio.timeout(900):
        while True:  # the servers are other processes: nothing here to wait on but the store
            if len(await st.workflows(WorkflowState.COMPLETED)) >= workflows:
                return
            await asyncio.sleep(0.05)


def _started_by(side: Path, pid: int) -> int:
    return side.read_text().count(f" {pid}\n") if side.exists() else 0


def side_runs(side: Path) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], list[str]]]:
    """How many times each (workflow, step) body ran, and in which processes."""
    runs: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[str]] = {}
    for line in side.read_text().splitlines():
        wid, step, pid = line.split()
        runs[(wid, step)] += 1
        where.setdefault((wid, step), []).append(pid)
    return runs, where


async def serve_row(
    store: Store, side: Path, workers: int, workflows: int, env: dict[str, str]
) -> float:
    """N serving processes run every instance; asserts each body ran once; returns seconds."""
    ids = await start_all(store, side, workflows)
    start = time.perf_counter()
    async with serving(store, side, workers, env):
        await all_completed(store, workflows)
        seconds = time.perf_counter() - start
    runs, _ = side_runs(side)
    expected = Counter({(w, s): 1 for w in ids for s in STEPS})
    assert runs == expected, f"bodies ran {sum(runs.values())} times, not once each"
    return seconds


async def kill_row(
    store: Store, side: Path, workflows: int, env: dict[str, str]
) -> tuple[float, int, int, int]:
    """4 serving processes, one SIGKILLed mid-run; returns seconds, bodies run, steps run
    twice and `WorkerRecovered` events."""
    ids = await start_all(store, side, workflows)
    start = time.perf_counter()
    async with serving(store, side, 4, env) as procs:
        doomed = procs[0]
        mid_run = max(5, workflows * len(STEPS) // 40)  # well before its share is done
        async with asyncio.timeout(300):
            while True:
                if _started_by(side, doomed.pid) >= mid_run:
                    break
                await asyncio.sleep(0.01)
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()
        await all_completed(store, workflows)
        seconds = time.perf_counter() - start
    runs, where = side_runs(side)
    assert set(runs) == {(w, s) for w in ids for s in STEPS}, "a step never ran"
    async with child.open_store(store.place, store.schema) as st:
        events = await st.load_events()
    recovered = [e for e in events if e.kind is EventKind.WORKER_RECOVERED]
    taken = {(e.workflow_id, e.step_name) for e in recovered}
    twice = {key for key, n in runs.items() if n > 1}
    assert twice <= taken, f"ran twice without a takeover: {sorted(twice - taken)}"
    for key in twice:
        assert runs[key] == 2 and where[key][0] == str(doomed.pid), (key, where[key])
    assert all(e.data["previous_worker"] == f"w0:{doomed.pid}" for e in recovered)
    return seconds, sum(runs.values()), len(twice), len(recovered)


def _print(name: str, workflows: int, seconds: float, floor: float) -> None:
    transitions = workflows * len(STEPS) / seconds
    print(
        f"{name:<34}{workflows / seconds:>13,.1f}{transitions:>15,.1f}{transitions / floor:>10.3f}x"
    )


async def bench_store(
    label: str,
    fresh: list[Store],
    floor: float,
    workflows: int,
    env: dict[str, str],
    tmp: Path,
) -> None:
    """The rows of one store kind: serve x1, x2, x4, then kill (one fresh `Store` each)."""
    rows = workflows * len(STEPS)
    print(f"\n{label}")
    print(f"{'row':<34}{'workflows/s':>13}{'transitions/s':>15}{'vs floor':>11}")
    print(f"{'floor: raw driver, 1 tx/row':<34}{floor / 3:>13,.1f}{floor:>15,.1f}{1:>10.3f}x")
    for workers, store in zip(WORKERS, fresh, strict=False):
        seconds = await serve_row(store, tmp / f"{label}-{workers}.side", workers, workflows, env)
        _print(f"serve x{workers} (each body once)", workflows, seconds, floor)
    seconds, ran, twice, recovered = await kill_row(
        fresh[-1], tmp / f"{label}-kill.side", workflows, env
    )
    _print("serve x4, one SIGKILLed", workflows, seconds, floor)
    print(
        f"  kill counts: {ran} bodies run for {rows} steps; {twice} ran twice "
        f"(in flight at the kill); {recovered} WorkerRecovered"
    )
    print(f"  {_load()}")


async def main(dsn: str, workflows: int, work: float) -> None:
    env = {**os.environ, "AGENTQ_SERVE_WORK": str(work), "PYTHONPATH": str(_HERE.parent)}
    rows = workflows * len(STEPS)
    print(
        f"bench/scale.py: {workflows} workflows x {len(STEPS)} steps = {rows} step transitions "
        f"per row, bodies of {work * 1000:.0f} ms, 4 permits and 2 s leases per process; "
        f"Python {sys.version.split()[0]}, psycopg {psycopg.__version__}; {_load()}"
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        floor = floor_sqlite(tmp / "floor.db", rows)
        sqlite = [Store(str(tmp / f"scale-{i}.db")) for i in range(len(WORKERS) + 1)]
        await bench_store("SQLite (one WAL file)", sqlite, floor, workflows, env, tmp)
        prefix = f"scale_{os.getpid()}"
        floor = floor_psycopg(dsn, f"{prefix}_floor", rows)
        pg = [Store(dsn, f"{prefix}_{i}") for i in range(len(WORKERS) + 1)]
        try:
            await bench_store("PostgreSQL (loopback)", pg, floor, workflows, env, tmp)
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for store in pg:
                    conn.execute(f"DROP SCHEMA IF EXISTS {store.schema} CASCADE")


def run(dsn: str | None, workflows: int, work: float) -> None:
    """Run the benchmark on `dsn`, or on a throwaway cluster of its own."""
    if dsn:
        asyncio.run(main(dsn, workflows, work))
        return
    from tests.pg_cluster import Cluster

    cluster = Cluster(durable=True).start()
    try:
        asyncio.run(main(cluster.dsn(), workflows, work))
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--work", type=float, default=0.0, help="seconds each body works")
    parser.add_argument("--dsn", default=os.environ.get("AGENTQ_PG_DSN"))
    args = parser.parse_args()
    run(args.dsn, args.workflows, args.work)
