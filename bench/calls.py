"""Durable calls (``ctx.call``) on a SQLite file, beside the floors measured in the same run.

    python -m bench.calls [--calls 1000] [--repeat 5]

Every row does `--calls` operations on a fresh file (WAL, ``synchronous=NORMAL``) and reports
the time per operation. The job is the same everywhere, written as users write it: a new
`Job` per call around a lambda over an async function (``Job(f"call-{i}", lambda:
work(i))``, whose body returns a small dict at once), so the rows measure what agentq adds.

- floor, aiosqlite: one INSERT of a small JSON row per call in its own transaction (two
  awaits: execute, commit), no agentq: what a durable record costs at all.
- queue: ``push_and_wait`` of the same job on a `Queue` without a store (no durability).
- step transition, store: `SqliteStore.claim_step` then `complete_step` (two transactions)
  for each step of a workflow of `--calls` steps: what a step's record costs.
- step transition, engine: `WorkflowEngine.run` of a workflow of `--calls` no-op steps: a
  claim, a job through the queue with its lease renewer, a complete, per step.
- durable call: `ctx.call` in one step, each call unknown (``CallStarted``, the job through
  the queue, ``CallCompleted``: two transactions); timed inside the step body. The lambda
  is a plain callable, so the queue runs it in a worker thread (it could block) and awaits
  the coroutine it returns on the loop, exactly as for the ``push_and_wait`` row; the row
  "of a partial" makes the same calls with ``functools.partial(work, i)``, an async
  callable the queue runs on the loop.
- replay: the same step run again after it failed (`REPLAYS` retries, the best counts):
  each call answers from the log (one read of the recorded calls at the attempt's first
  call, then the fingerprint check and a dict lookup per call), timed inside the body of the
  retry, so the read is included; how long the read alone takes is measured again on the
  same file and printed beside it.

Every row prints its wall time per operation and its CPU time per operation
(`time.process_time` over the measured region: every thread of the process, so the store's
connection thread is counted as well as the event loop; the replay row has none of its own).

Targets (issue 10): a durable call costs at most 1.5x a step transition; a replayed step
answers at least 50,000 recorded calls per second. Issue 25: a durable call costs at most
1 ms of CPU. The machine's load average is printed
before and after: on a shared machine, compare ratios within one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# Run as a script, bench/ comes first on sys.path and its queue.py would shadow the stdlib's.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import aiosqlite  # noqa: E402

from agentq import (  # noqa: E402
    Job,
    LaneConfig,
    Priority,
    Queue,
    RetryPolicy,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowEngine,
)
from agentq.store import Claimed, SqliteStore  # noqa: E402

T0 = 1_767_225_600.0
Row = Callable[[Path, int], Awaitable[float]]
"""A row: given a fresh file and a count, do that many operations; return the seconds."""

_cpu: list[float] = []
"""The CPU seconds (`time.process_time`: every thread of the process, the store's included)
of each measured region, in order: a row's is the last one appended while it ran."""


def _start() -> tuple[float, float]:
    """The wall clock and the process's CPU time now."""
    return time.perf_counter(), time.process_time()


def _stop(start: tuple[float, float]) -> float:
    """The wall seconds since `start`; its CPU seconds are appended to `_cpu`."""
    wall, cpu = _start()
    _cpu.append(cpu - start[1])
    return wall - start[0]


async def work(i: int) -> dict[str, int]:
    """The call's body: returns at once, so the rows measure agentq, not the work."""
    return {"i": i, "square": i * i}


def _lanes(n: int) -> dict[Priority, LaneConfig]:
    return {Priority.MEDIUM: LaneConfig(capacity=max(n, 1), permits=4)}


# ---------------------------------------------------------------- floors


async def floor_aiosqlite(path: Path, n: int) -> float:
    """aiosqlite: one INSERT of a small JSON row per call, each in its own transaction."""
    async with aiosqlite.connect(path) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, output TEXT, at REAL)")
        await db.commit()
        start = _start()
        for i in range(n):
            output = await work(i)
            await db.execute(
                "INSERT INTO calls (key, output, at) VALUES (?, ?, ?)",
                (f"call-{i}", json.dumps(output), T0 + i),
            )
            await db.commit()
        return _stop(start)


async def queue_push_and_wait(path: Path, n: int) -> float:
    """`Queue.push_and_wait` of the same jobs: no store, no durability."""
    async with Queue(_lanes(n)) as queue:
        start = _start()
        for i in range(n):
            await _push_one(queue, i)
        return _stop(start)


async def _push_one(queue: Queue, i: int) -> Any:
    return await queue.push_and_wait(Job(f"call-{i}", lambda: work(i)))


async def store_transitions(path: Path, n: int) -> float:
    """`SqliteStore.claim_step` + `complete_step` for each of `n` steps of one workflow."""
    async with SqliteStore(path) as store:
        names = [f"s{i}" for i in range(n)]
        await store.start_workflow("wf", names, None, T0)
        start = _start()
        for i in range(n):
            claim = await store.claim_step("wf", i, "bench", 30.0, T0 + i)
            assert isinstance(claim, Claimed), claim
            await store.complete_step(claim.execution, {"i": i}, T0 + i)
        return _stop(start)


async def _noop(ctx: StepContext) -> None:
    return None


async def engine_steps(path: Path, n: int) -> float:
    """`WorkflowEngine.run` of one workflow of `n` no-op steps."""
    async with Queue(_lanes(n)) as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store, worker_id="bench")
        wf = Workflow("wf", [StepDef(f"s{i}", _noop) for i in range(n)])
        start = _start()
        result = await engine.run(wf)
        elapsed = _stop(start)
        assert result.status is RunStatus.COMPLETED, result
        await engine.close()
        return elapsed


# ---------------------------------------------------------------- durable calls


async def _call_one(ctx: StepContext, i: int) -> Any:
    return await ctx.call(Job(f"call-{i}", lambda: work(i)))


async def _call_partial(ctx: StepContext, i: int) -> Any:
    return await ctx.call(Job(f"call-{i}", functools.partial(work, i)))


REPLAYS = 5
"""Replays of the step per measurement (its retries); the best one is reported."""


async def _calls_step(
    path: Path, n: int, one: Callable[[StepContext, int], Awaitable[Any]] = _call_one
) -> tuple[float, float, float]:
    """One step of `n` durable calls that fails `REPLAYS` times after them; each retry
    replays them from the log.

    Returns the seconds of the first attempt's calls, of the best retry's calls (answered
    from the log, the attempt's one read of the recorded calls included) and of the best of
    `REPLAYS` reads of the recorded calls alone, made again on the same file. The CPU
    seconds of the first attempt's calls are the last ones appended to `_cpu`.
    """
    timings: list[tuple[float, float]] = []

    async def body(ctx: StepContext) -> int:
        start = _start()
        outputs = [await one(ctx, i) for i in range(n)]
        wall, cpu = _start()
        timings.append((wall - start[0], cpu - start[1]))
        if ctx.attempt <= REPLAYS:
            raise ConnectionError("fail, so that the retry replays every call")
        return sum(out["square"] for out in outputs)

    async with Queue(_lanes(n)) as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store, worker_id="bench")
        wf = Workflow("wf", [StepDef("calls", body, retry=RetryPolicy(REPLAYS + 1))])
        result = await engine.run(wf)
        assert result.status is RunStatus.COMPLETED, result
        assert engine.answered_from_log == n * REPLAYS, engine.answered_from_log
        await engine.close()
        reads = []
        for _ in range(REPLAYS):
            start = time.perf_counter()
            rows = await store.calls("wf")
            reads.append(time.perf_counter() - start)
            assert len(rows) == n
    _cpu.append(timings[0][1])
    return timings[0][0], min(wall for wall, _ in timings[1:]), min(reads)


_replayed: list[tuple[float, float]] = []
_reads: list[float] = []


async def durable_calls(path: Path, n: int) -> float:
    """`ctx.call` of `n` unknown keys in one step (each one recorded, then run)."""
    first, replay, read = await _calls_step(path, n)
    _replayed.append((replay, read))
    return first


async def durable_calls_partial(path: Path, n: int) -> float:
    """The same with ``functools.partial(work, i)``: an async callable, run on the loop."""
    first, _, _ = await _calls_step(path, n, _call_partial)
    return first


async def replayed_calls(path: Path, n: int) -> float:
    """The same step's retry: its one read of the recorded calls, then `n` calls answered
    from the log (measured with the row above)."""
    replay, read = _replayed.pop()
    _reads.append(read)
    _cpu.append(math.nan)  # timed inside the durable-call row's run: no CPU of its own
    return replay


ROWS: list[tuple[str, Row]] = [
    ("floor: aiosqlite, 1 INSERT + commit per call", floor_aiosqlite),
    ("queue: push_and_wait, no store", queue_push_and_wait),
    ("step transition: store claim+complete", store_transitions),
    ("step transition: WorkflowEngine no-op step", engine_steps),
    ("durable call: ctx.call, SqliteStore", durable_calls),
    ("durable call: ctx.call of a partial", durable_calls_partial),
    ("replay: the step again, answered from the log", replayed_calls),
]
FLOOR = "floor: aiosqlite, 1 INSERT + commit per call"
STEP = "step transition: store claim+complete"
ENGINE_STEP = "step transition: WorkflowEngine no-op step"
CALL = "durable call: ctx.call, SqliteStore"
CALL_PARTIAL = "durable call: ctx.call of a partial"
REPLAY = "replay: the step again, answered from the log"


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


async def main(calls: int, repeat: int) -> None:
    print(
        f"bench/calls.py: {calls} operations per row, best of {repeat} (rows interleaved); "
        f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, WAL, "
        f"synchronous=NORMAL; {_load()}"
    )
    best: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for _ in range(repeat):  # round-robin, so that a busy moment does not hit only one row
        for name, row in ROWS:
            with tempfile.TemporaryDirectory(prefix="agentq-bench-") as tmp:
                seconds = await row(Path(tmp) / "bench.db", calls)
            best[name] = min(seconds, best.get(name, seconds))
            cpus[name] = min(_cpu[-1], cpus.get(name, math.inf))
    per = {name: seconds / calls for name, seconds in best.items()}
    cpu = {name: seconds / calls for name, seconds in cpus.items()}
    print(
        f"{'row':<46}{'us/op':>9}{'ops/s':>10}{'vs floor':>10}{'vs step':>9}"
        f"{'CPU us/op':>11}"
    )
    for name, seconds in per.items():
        print(
            f"{name:<46}{seconds * 1e6:>9.1f}{1 / seconds:>10,.0f}"
            f"{seconds / per[FLOOR]:>9.2f}x{seconds / per[STEP]:>8.2f}x"
            f"{cpu[name] * 1e6:>11.1f}"
        )
    for name in (CALL, CALL_PARTIAL):
        used = cpu[name]
        print(
            f"target (issue 25): a durable call costs <= 1 ms of CPU, every thread: {name!r} "
            f"{used * 1e6:.0f} us ({_met(used <= 1e-3)})"
        )
    for name in (CALL, CALL_PARTIAL):
        vs_store, vs_engine = per[name] / per[STEP], per[name] / per[ENGINE_STEP]
        print(
            f"target: a durable call <= 1.5x a step transition: {name!r} costs "
            f"{vs_store:.2f}x the store's claim+complete ({_met(vs_store <= 1.5)}), "
            f"{vs_engine:.2f}x the engine's step ({_met(vs_engine <= 1.5)})"
        )
    replay_rate = 1 / per[REPLAY]
    read = min(_reads) / calls
    print(
        f"target: a replayed step answers >= 50,000 recorded calls/s: {replay_rate:,.0f}/s "
        f"({_met(replay_rate >= 50_000)}); of its {per[REPLAY] * 1e6:.1f} "
        f"us/call, {read * 1e6:.1f} go to the one read of the recorded calls "
        f"({1 / (per[REPLAY] - read):,.0f} calls/s after it)"
    )
    print(f"after: {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.repeat))
