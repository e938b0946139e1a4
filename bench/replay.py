"""Benchmark: BFCL's multi-turn tasks through agentq beside the same calls in a plain loop.

Rows, all in this one process on this machine:

- ``direct``: every ground-truth call in a plain loop on in-memory services (the raw floor:
  `examples.bfcl_replay.direct.run_tasks`, final snapshots included);
- ``service host``: the same calls in a plain loop through the durable `ServiceHost` (one
  SQLite transaction per call, no agentq): what durable, idempotent services cost alone;
- ``agentq + MemoryStore`` and ``agentq + SqliteStore``: the replay itself, through the very
  function ``make demo`` runs (`examples.bfcl_replay.run.replay`: the tasks as one run group,
  ``bfcl``, a workflow per task, a step per turn, a durable call (``ctx.call``) per tool
  call, approvals through keyed waits and ``engine.resume``), with the service host
  underneath, on agentq's in-memory store and on a SQLite file on disk. Its time is the
  replay's own `Summary.wall_seconds`: from opening the group to its last member's end (the
  ground-truth reference run before it and the check and reads after it are not timed, but
  are in the CPU columns). Only what the demo adds for show differs: no transient errors,
  no progress lines, no exports.

No transient errors, no crash: each row does the same calls once (1142 for the 200 base tasks).
Each row is run ``--repeat`` times on fresh files; the best time is reported (and the median
beside it), with the process's CPU time of that run (all threads: the loop, agentq's SQLite
connection thread, the worker threads that apply the calls) and per tool call, and the load
average before and after: on a loaded machine the wall ratios move with the load, the CPU
columns much less.

Usage: python bench/replay.py [--repeat 3] [--tasks N] [--category base|...|all]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, sys.path[0] is bench/, whose queue.py would shadow the standard library's
# `queue` (which the thread pools import): put the repository root there instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from examples.bfcl_replay.dataset import Task, categories, load_categories  # noqa: E402
from examples.bfcl_replay.direct import run_tasks  # noqa: E402
from examples.bfcl_replay.plan import call_key  # noqa: E402
from examples.bfcl_replay.run import Options, replay  # noqa: E402
from examples.bfcl_replay.servicehost import ServiceHost  # noqa: E402


def _direct(tasks: list[Task], _: Path) -> float:
    started = time.perf_counter()
    runs = run_tasks(tasks)
    elapsed = time.perf_counter() - started
    assert all(run.error is None for run in runs.values())
    return elapsed


def _host_loop(tasks: list[Task], folder: Path) -> float:
    with ServiceHost(folder / "services.db", tasks) as host:
        started = time.perf_counter()
        for task in tasks:
            for turn, calls in enumerate(task.calls):
                for index, call in enumerate(calls):
                    host.apply(task.id, call_key(task.id, turn, index), call)
        return time.perf_counter() - started


def _agentq(sqlite: bool) -> Callable[[list[Task], Path], float]:
    def run(tasks: list[Task], folder: Path) -> float:
        options = Options(
            db=folder / "agentq.db" if sqlite else None,
            services_db=folder / "services.db",
            stem=None,
            transient_rate=0.0,
            quiet=True,
        )
        summary = asyncio.run(replay(options, tasks=tasks))
        assert summary.ok, (summary.match_line, list(summary.unfinished.items())[:2])
        return summary.wall_seconds

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=None, help="the first N of each category")
    parser.add_argument("--category", choices=[*categories(), "all"], default="base")
    args = parser.parse_args()
    names = list(categories()) if args.category == "all" else [args.category]
    tasks = [task for name in names for task in load_categories([name])[: args.tasks]]
    calls = sum(len(texts) for task in tasks for texts in task.call_texts)
    steps = sum(len(task.call_texts) for task in tasks)
    rows: list[tuple[str, Callable[[list[Task], Path], float]]] = [
        ("direct plain loop (in-memory services)", _direct),
        ("service host plain loop (SQLite file)", _host_loop),
        ("agentq + MemoryStore", _agentq(sqlite=False)),
        ("agentq + SqliteStore (file on disk)", _agentq(sqlite=True)),
    ]
    print(
        f"BFCL replay ({args.category}): {len(tasks)} tasks, {steps} steps, {calls} tool calls"
        f" · best of {args.repeat} · Python {platform.python_version()} · {os.cpu_count()} CPUs"
    )
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(
        f"{'':40} {'best':>9} {'median':>9} {'calls/s':>9} {'vs direct':>10} {'vs host':>8}"
        f" {'CPU':>8} {'CPU/call':>9}"
    )
    floor: dict[str, float] = {}
    for name, run in rows:
        times, cpus = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="bfcl-bench-") as folder:
                cpu = time.process_time()
                times.append(run(tasks, Path(folder)))
                cpus.append(time.process_time() - cpu)
        best = min(times)
        cpu = cpus[times.index(best)]
        rate = calls / best
        floor.setdefault("direct", rate)
        host = floor.get("host")
        if name.startswith("service host"):
            floor["host"] = host = rate
        print(
            f"{name:40} {best:8.3f}s {statistics.median(times):8.3f}s {rate:9,.0f} "
            f"{rate / floor['direct']:9.3f}x " + (f"{rate / host:7.3f}x" if host else f"{'':>8}")
            + f" {cpu:7.2f}s {cpu / calls * 1e6:7,.0f}µs"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
