"""Retention on a big SQLite store: 1,000,000 ended runs swept down to 10,000.

    python -m bench.retention [--runs 1000000] [--keep 10000] [--path FILE]

The store is built fast, with bulk SQL inserts of real rows: two runs are recorded through
`SqliteStore`'s own verbs (a two-step workflow whose steps each make a durable call,
completed; and one cancelled in its second step), then their rows (events, workflow, steps,
calls) are copied `--runs` times with ``executemany`` in one transaction (new ids, sequence
numbers and times; every tenth run is the cancelled one). The runs end one after another over
100 days; 200 open workflows (their first step pending) are added last, for the claims. The
rows are what the verbs write, except the times inside the events' JSON (the template's).

Then, before and after ``store.sweep(ended_before=<the end of run N - keep>)``, it prints the
file size and the median latency of: reading one workflow (``get_workflow``), its events
(``load_events``) and its steps (``step_rows``), listing the open workflows
(``workflows(state=running)``) and every workflow (``workflows()``), a serving engine's poll
(``ready_workflows``) and a claim (``claim_step`` of an open workflow's step). During the
sweep a writer starts and claims a new workflow every 10 ms: its latencies (median, 99th
percentile, max) are what other writers wait while a sweep runs; the longest transaction of
the sweep is printed too. Last, ``VACUUM``: its time and the file size after. The machine's
load average is printed first and last: numbers are comparable only on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from agentq.store import Claimed, SqliteStore, WorkflowState

T0 = 1_700_000_000.0
SPAN = 100 * 86400.0  # the runs end over 100 days
TEMPLATE_AT = 1_000.0
OPEN = 200
TIME_COLUMNS = {
    "events": ("at",),
    "workflows": ("created_at",),
    "steps": ("started_at", "finished_at"),
    "calls": ("started_at", "finished_at"),
}
SEQ_COLUMNS = {"events": ("seq",), "workflows": ("started_seq",),
               "calls": ("first_seq", "last_seq")}


async def _template(store: SqliteStore, wid: str, cancel: bool) -> None:
    """Record one run through the verbs: two steps, a durable call in each."""
    now = TEMPLATE_AT
    await store.start_workflow(wid, ["plan", "act"], {"prompt": "summarise the report"}, now,
                               definition="agent")
    for index, step in enumerate(("plan", "act")):
        claimed = await store.claim_step(wid, index, "host:1234:w1", 30.0, now)
        assert isinstance(claimed, Claimed)
        ex = claimed.execution
        key = f"{step}:model:1"
        await store.start_call(ex, key, fingerprint="f" * 32, lane="high",
                               label={"kind": "model", "model": "gpt"}, now=now)
        if cancel and index == 1:
            await store.cancel_workflow(wid, "cancelled by the operator", now + 1)
            await store.release_dead(ex, now + 1, "handed back")
            return
        await store.complete_call(ex, key, output={"text": "x" * 200},
                                  usage={"input_tokens": 900, "output_tokens": 120},
                                  duration=1.5, now=now + 1.5)
        now += 2
        await store.complete_step(ex, {"answer": "y" * 100}, now)


def _rows(
    conn: sqlite3.Connection, table: str, wid: str
) -> tuple[list[str], list[tuple[Any, ...]]]:
    cursor = conn.execute(f"SELECT * FROM {table} WHERE workflow_id = ?", (wid,))
    return [d[0] for d in cursor.description], cursor.fetchall()


def _copies(
    columns: list[str], rows: list[tuple[Any, ...]], table: str, indices: range, runs: int,
    events: int, first_seq: int, template_seq: int,
) -> Iterator[tuple[Any, ...]]:
    """The rows of `table` for the runs `indices` (of `runs`) copied from one template
    (`template_seq`: its first sequence number; each run gets `events` numbers)."""
    wid_at = columns.index("workflow_id")
    times = [columns.index(c) for c in TIME_COLUMNS[table]]
    seqs = [columns.index(c) for c in SEQ_COLUMNS.get(table, ())]
    for i in indices:
        shift = T0 + SPAN * i / runs - TEMPLATE_AT
        base = first_seq + i * events - template_seq
        for row in rows:
            new = list(row)
            new[wid_at] = f"run-{i:07d}"
            for c in times:
                if new[c] is not None:
                    new[c] += shift
            for c in seqs:
                new[c] += base
            yield tuple(new)


async def build(path: Path, runs: int) -> int:
    """Make the store; return how many events each run has (the larger template's)."""
    async with SqliteStore(path) as store:
        await _template(store, "tpl-done", cancel=False)
        await _template(store, "tpl-cancelled", cancel=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        templates = {}
        for wid in ("tpl-done", "tpl-cancelled"):
            templates[wid] = {t: _rows(conn, t, wid) for t in TIME_COLUMNS}
        for wid in templates:
            for table in ("calls", "steps", "workflows", "events"):  # workflows before events
                conn.execute(f"DELETE FROM {table} WHERE workflow_id = ?", (wid,))
        last = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        first = int(last[0]) + 1
        per_run = max(len(t["events"][1]) for t in templates.values())
        for wid, template in templates.items():
            tseq = min(r[0] for r in template["events"][1])
            for start in ((1, 2, 3, 4, 5, 6, 7, 8, 9) if wid == "tpl-done" else (0,)):
                for table in ("events", "workflows", "steps", "calls"):
                    columns, rows = template[table]
                    marks = ", ".join("?" * len(columns))
                    conn.executemany(
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                        _copies(columns, rows, table, range(start, runs, 10), runs, per_run,
                                first, tseq),
                    )
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    async with SqliteStore(path) as store:
        for i in range(OPEN):
            await store.start_workflow(f"open-{i:03d}", ["plan", "act"], {"n": i},
                                       T0 + SPAN + i, definition="agent")
    return per_run


async def median_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def reads(store: SqliteStore, wid: str, claims: list[str], label: str) -> None:
    """Print the latencies of the reads and claims on `store` (one row each)."""
    now = T0 + SPAN + 10_000
    rows: list[tuple[str, Callable[[], Awaitable[Any]], int]] = [
        ("get_workflow(one)", lambda: store.get_workflow(wid), 50),
        ("load_events(one)", lambda: store.load_events(wid), 50),
        ("step_rows(one)", lambda: store.step_rows(wid), 50),
        ("workflows(running)", lambda: store.workflows(WorkflowState.RUNNING), 10),
        ("ready_workflows(poll)",
         lambda: store.ready_workflows(now, {"agent": ("plan", "act")}, 8), 20),
    ]
    for name, fn, repeat in rows:
        print(f"{label:6} {name:28} {await median_ms(fn, repeat):10.2f} ms", flush=True)
    started = time.perf_counter()
    listed = await store.workflows()
    print(f"{label:6} {'workflows() (all ' + str(len(listed)) + ')':28} "
          f"{(time.perf_counter() - started) * 1000:10.2f} ms", flush=True)
    del listed
    pending = iter(claims)

    async def claim() -> None:
        result = await store.claim_step(next(pending), 0, "bench", 30.0, now)
        assert isinstance(result, Claimed), result

    print(f"{label:6} {'claim_step':28} {await median_ms(claim, len(claims)):10.2f} ms", flush=True)


async def sweep(store: SqliteStore, cutoff: float) -> None:
    """Sweep with a writer beside it; print the sweep and the writer's latencies."""
    longest = 0.0
    write = store._write_job

    async def timed(fn: Callable[..., Any], *args: Any) -> Any:
        nonlocal longest
        start = time.perf_counter()
        try:
            return await write(fn, *args)
        finally:
            longest = max(longest, time.perf_counter() - start)

    store._write_job = timed  # type: ignore[method-assign]
    latencies: list[float] = []
    done = asyncio.Event()

    async def writer() -> None:
        n = 0
        while not done.is_set():
            start = time.perf_counter()
            wid = f"beside-{n:06d}"
            await store.start_workflow(wid, ["plan"], None, T0 + SPAN + 20_000)
            await store.claim_step(wid, 0, "beside", 30.0, T0 + SPAN + 20_000)
            latencies.append(time.perf_counter() - start)
            n += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(writer())
    start = time.perf_counter()
    report = await store.sweep(ended_before=cutoff)
    seconds = time.perf_counter() - start
    done.set()
    await task
    del store._write_job
    print(f"sweep: {report.workflows} workflows, {report.events} events, {report.calls} calls "
          f"in {seconds:.1f} s ({report.workflows / seconds:,.0f} workflows/s); longest "
          f"transaction {longest * 1000:.0f} ms", flush=True)
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    print(f"beside the sweep: {len(latencies)} start+claim writes, median "
          f"{statistics.median(latencies) * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms, max "
          f"{max(latencies) * 1000:.1f} ms", flush=True)


def size(path: Path) -> str:
    total = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return f"{total / 2**20:,.1f} MiB"


async def measure(path: Path, runs: int, keep: int) -> None:
    claims = [f"open-{i:03d}" for i in range(OPEN)]
    async with SqliteStore(path) as store:
        print(f"before: file {size(path)}", flush=True)
        await reads(store, f"run-{runs - 1:07d}", claims[:OPEN // 2], "before")
        cutoff = T0 + SPAN * (runs - keep) / runs
        await sweep(store, cutoff)
        print(f"after:  file {size(path)} (freed pages are reused; VACUUM gives them back)")
        await reads(store, f"run-{runs - 1:07d}", claims[OPEN // 2:], "after")
    conn = sqlite3.connect(path)
    try:
        start = time.perf_counter()
        conn.execute("VACUUM")
        seconds = time.perf_counter() - start
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    print(f"VACUUM: {seconds:.1f} s; file {size(path)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--keep", type=int, default=10_000)
    parser.add_argument("--path", type=Path, default=None,
                        help="the store file (made anew); default: in a temporary directory")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or Path(tmp) / "retention.db"
        if path.exists():
            raise SystemExit(f"{path} exists: give a new path")
        start = time.perf_counter()
        per_run = asyncio.run(build(path, args.runs))
        print(f"built {args.runs:,} ended runs ({per_run} events each, every tenth cancelled) "
              f"+ {OPEN} open by bulk inserts in {time.perf_counter() - start:.1f} s", flush=True)
        asyncio.run(measure(path, args.runs, args.keep))
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
