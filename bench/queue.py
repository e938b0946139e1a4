"""Queue throughput and cache hits beside bare asyncio baselines (issue 2's benchmark).

Run: ``python -m bench.queue``. Each figure is the best of a few rounds, each on a fresh
event loop; the rows of a group take turns, so that a change of the machine's load hits them
alike, and each row prints its ratio to the group's limit twice: in wall time and in CPU time
(steadier when other processes share the cores). Targets (issue 12): W1, ``Job(key, lambda:
work(i))``, at least 1.0x the Semaphore baseline and an ``async def`` fn 1.5x; W3, cache hits
with a new ``Job`` per call, at least 0.3x the dict-of-futures baseline (issue 25: or with
an API that answers a known key without a ``Job``, as users write it: ``Queue.cached``). The
rows with ``Queue(store=...)`` run jobs with a store: each job that must run then costs one
store read and one save; cache hits never touch the store.

The sequential figure (one ``push_and_wait`` at a time, so the lane runs dry between jobs and
each job starts a lane worker: workers never park, issue 9 item 14) is measured beside one
task per job, each awaited before the next.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import os
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agentq.queue import Job, JobOutcomeStore, LaneConfig, Priority, Queue, Queued
from agentq.store import MemoryStore, SqliteStore

N_JOBS = 20_000
PERMITS = 4
N_HITS = 100_000
N_KEYS = 1_000
ROUNDS = 5
N_STORED = 2_000  # jobs per round with a store (each one read and one save)
N_CLOSURE_HITS = 10_000  # hits of a function whose closure holds a list of N_KEYS items


async def noop() -> None:
    return None


async def value(key: str) -> str:
    return key


async def semaphore_baseline() -> float:
    """One task per job behind asyncio.Semaphore(4): seconds for N_JOBS."""
    return await _semaphore(N_JOBS)


async def _semaphore(n: int) -> float:
    sem = asyncio.Semaphore(PERMITS)

    async def one() -> None:
        async with sem:
            await noop()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - start


async def work(i: int) -> None:
    return None


async def agentq_jobs(capacity: int, form: str = "async") -> float:
    """N_JOBS no-op jobs with unique keys through one lane with 4 permits.

    `form` is how the job's fn is written: ``"async"`` (an ``async def``), ``"lambda"``
    (``lambda: work(i)``, a plain callable that returns a coroutine) or ``"partial"``.
    """
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=capacity, permits=PERMITS)})
    start = time.perf_counter()
    handles = []
    for i in range(N_JOBS):
        if form == "lambda":
            job = Job(f"job-{i}", lambda i=i: work(i))
        elif form == "partial":
            job = Job(f"job-{i}", functools.partial(work, i))
        else:
            job = Job(f"job-{i}", noop)
        accepted = await queue.push(job)
        assert isinstance(accepted, Queued)
        handles.append(accepted.handle)
    for handle in handles:
        await handle
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def task_per_job_baseline() -> float:
    """One task per job, each awaited before the next: seconds for N_JOBS."""
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    for _ in range(N_JOBS):
        await loop.create_task(noop())
    return time.perf_counter() - start


async def agentq_sequential() -> float:
    """N_JOBS no-op jobs with unique keys, one push_and_wait at a time."""
    queue = Queue({Priority.MEDIUM: LaneConfig(permits=PERMITS)})
    jobs = [Job(f"job-{i}", noop) for i in range(N_JOBS)]
    start = time.perf_counter()
    for job in jobs:
        await queue.push_and_wait(job)
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def dict_baseline() -> float:
    """A bare dict of futures answering N_HITS lookups over N_KEYS warm keys."""
    loop = asyncio.get_running_loop()
    cache: dict[str, asyncio.Future[str]] = {}

    async def get(key: str) -> str:
        fut = cache.get(key)
        if fut is None:
            fut = cache[key] = loop.create_future()
            fut.set_result(await value(key))
        return await fut

    keys = [f"key-{i}" for i in range(N_KEYS)]
    for key in keys:
        await get(key)
    start = time.perf_counter()
    for i in range(N_HITS):
        await get(keys[i % N_KEYS])
    return time.perf_counter() - start


async def agentq_hits(build_jobs: bool) -> float:
    """N_HITS push_and_wait over N_KEYS completed keys (jobs pre-built, or built per call)."""
    queue = Queue()
    keys = [f"key-{i}" for i in range(N_KEYS)]
    fns = [functools.partial(value, key) for key in keys]
    jobs = [Job(key, fn) for key, fn in zip(keys, fns, strict=True)]
    for job in jobs:
        await queue.push_and_wait(job)
    start = time.perf_counter()
    if build_jobs:
        for i in range(N_HITS):
            await queue.push_and_wait(Job(keys[i % N_KEYS], fns[i % N_KEYS]))
    else:
        for i in range(N_HITS):
            await queue.push_and_wait(jobs[i % N_KEYS])
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def agentq_memo_hits() -> float:
    """N_HITS calls of a memo as users write it over the same N_KEYS completed keys:
    `Queue.cached(key)` answers a completed key with no `Job` built; a miss pushes one."""
    queue = Queue()
    keys = [f"key-{i}" for i in range(N_KEYS)]
    fns = [functools.partial(value, key) for key in keys]

    async def get(key: str, fn: Callable[[], Coroutine[Any, Any, str]]) -> str:
        hit = queue.cached(key)
        if hit is not None:
            return hit.output  # type: ignore[no-any-return]
        return await queue.push_and_wait(Job(key, fn))  # type: ignore[no-any-return]

    for key, fn in zip(keys, fns, strict=True):
        await get(key, fn)
    start = time.perf_counter()
    for i in range(N_HITS):
        await get(keys[i % N_KEYS], fns[i % N_KEYS])
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


def logging_tool() -> Callable[[str], Coroutine[Any, Any, str]]:
    """A tool that keeps a log in its closure: a list that grows with every run."""
    log: list[str] = []

    async def logged(key: str) -> str:
        log.append(key)
        return key

    return logged


async def agentq_closure_hits() -> float:
    """N_CLOSURE_HITS push_and_wait, each with a new Job, over N_KEYS completed keys of one
    function whose closure holds a list of N_KEYS items (issue 20 item 4: a hit used to walk
    the list)."""
    queue = Queue()
    logged = logging_tool()
    keys = [f"key-{i}" for i in range(N_KEYS)]
    fns = [functools.partial(logged, key) for key in keys]
    for key, fn in zip(keys, fns, strict=True):
        await queue.push_and_wait(Job(key, fn))
    start = time.perf_counter()
    for i in range(N_CLOSURE_HITS):
        await queue.push_and_wait(Job(keys[i % N_KEYS], fns[i % N_KEYS]))
    elapsed = time.perf_counter() - start
    await queue.close()
    return elapsed


async def agentq_store_jobs(kind: str) -> float:
    """N_STORED no-op jobs with unique keys through one lane with 4 permits, with a store."""
    with tempfile.TemporaryDirectory() as tmp:
        store: JobOutcomeStore
        store = MemoryStore() if kind == "memory" else await SqliteStore.open(f"{tmp}/q.db")
        queue = Queue({Priority.MEDIUM: LaneConfig(capacity=N_STORED, permits=PERMITS)},
                      store=store)
        start = time.perf_counter()
        handles = []
        for i in range(N_STORED):
            accepted = await queue.push(Job(f"job-{i}", noop))
            assert isinstance(accepted, Queued)
            handles.append(accepted.handle)
        for handle in handles:
            await handle
        elapsed = time.perf_counter() - start
        await queue.close()
        if isinstance(store, SqliteStore):
            await store.close()
        return elapsed


async def agentq_store_hits() -> float:
    """N_HITS push_and_wait over N_KEYS completed keys, with a SqliteStore (jobs built once)."""
    with tempfile.TemporaryDirectory() as tmp:
        async with SqliteStore(f"{tmp}/q.db") as store:
            queue = Queue(store=store)
            jobs = [Job(f"key-{i}", functools.partial(value, f"key-{i}")) for i in range(N_KEYS)]
            for job in jobs:
                await queue.push_and_wait(job)
            start = time.perf_counter()
            for i in range(N_HITS):
                await queue.push_and_wait(jobs[i % N_KEYS])
            elapsed = time.perf_counter() - start
            await queue.close()
            return elapsed


def interleaved(
    rows: dict[str, Callable[[], Coroutine[Any, Any, float]]],
) -> dict[str, tuple[float, float]]:
    """Each row's shortest wall time (as the row measures it) and shortest CPU time (the
    whole run, `time.process_time`, all threads), in seconds, over ROUNDS rounds in which the
    rows take turns, each on a fresh loop: a change of the machine's load hits every row of
    a group alike."""
    wall: dict[str, float] = dict.fromkeys(rows, math.inf)
    cpu: dict[str, float] = dict.fromkeys(rows, math.inf)
    for _ in range(ROUNDS):
        for name, measure in rows.items():
            gc.collect()
            started = time.process_time()
            wall[name] = min(wall[name], asyncio.run(measure()))
            cpu[name] = min(cpu[name], time.process_time() - started)
    return {name: (wall[name], cpu[name]) for name in rows}


def _rows(
    title: str, unit: str, n: int, results: dict[str, tuple[float, float]], base: str,
    targets: dict[str, str] | None = None,
) -> None:
    """Print a group: per row its rate, then its ratio to `base` in wall and in CPU time."""
    print(f"{title} (best of {ROUNDS}, rows interleaved; ratios: wall, and CPU time)")
    b_wall, b_cpu = results[base]
    for name, (wall, cpu) in results.items():
        target = (targets or {}).get(name, "")
        print(f"  {name:<34}{n / wall:>12,.0f} {unit}/s   {b_wall / wall:5.2f}x   "
              f"cpu {b_cpu / cpu:5.2f}x{target}")


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    print(f"before: {_load()}")
    sem = "asyncio.Semaphore + task per job"
    jobs = interleaved({
        sem: semaphore_baseline,
        "agentq, Job(key, lambda: work(i))": lambda: agentq_jobs(N_JOBS, "lambda"),
        "agentq, async def fn": lambda: agentq_jobs(N_JOBS),
        "agentq, Job(key, partial(work,i))": lambda: agentq_jobs(N_JOBS, "partial"),
        "agentq, capacity 100 (push waits)": lambda: agentq_jobs(100),
    })
    _rows(f"jobs: {N_JOBS:,} no-op jobs, {PERMITS} permits", "jobs", N_JOBS, jobs, sem, {
        "agentq, Job(key, lambda: work(i))": "   target >= 1.0x",
        "agentq, async def fn": "   target >= 1.5x",
    })
    task = "a task per job, awaited"
    seq = interleaved({task: task_per_job_baseline, "agentq push_and_wait": agentq_sequential})
    _rows(f"sequential: {N_JOBS:,} no-op jobs, each awaited before the next is pushed",
          "jobs", N_JOBS, seq, task)
    dict_row = "dict of futures"
    hits = interleaved({
        dict_row: dict_baseline,
        "agentq (jobs built once)": lambda: agentq_hits(build_jobs=False),
        "agentq (a new Job per call)": lambda: agentq_hits(build_jobs=True),
        "agentq, cached(key) else a Job": agentq_memo_hits,
        "agentq cache hits, SqliteStore": agentq_store_hits,
    })
    _rows(f"cache hits: {N_HITS:,} push_and_wait over {N_KEYS:,} completed keys", "hits",
          N_HITS, hits, dict_row, {
              "agentq (a new Job per call)": "   target >= 0.3x",
              "agentq, cached(key) else a Job": "   target >= 0.3x (no Job built on a hit)",
          })
    stored = interleaved({
        sem: lambda: _semaphore(N_STORED),
        "agentq, store=MemoryStore()": lambda: agentq_store_jobs("memory"),
        "agentq, store=SqliteStore(file)": lambda: agentq_store_jobs("sqlite"),
    })
    _rows(f"with a store: {N_STORED:,} jobs (one read, one save each)", "jobs", N_STORED,
          stored, sem)
    closure = interleaved({
        "agentq (a new Job per call)": lambda: agentq_hits(build_jobs=True),
        "agentq, a closure over a log": agentq_closure_hits,
    })
    _rows(f"cache hits of a function whose closure holds a list of {N_KEYS:,} items "
          "(rates per hit)", "hits", N_CLOSURE_HITS, closure, "agentq (a new Job per call)")
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
