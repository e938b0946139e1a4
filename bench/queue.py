"""Queue throughput and cache hits beside bare asyncio baselines (issue 2's benchmark).

Run: ``python bench/queue.py``. Each figure is the best of a few rounds, each on a fresh event
loop. Targets: jobs/s at least 0.5x the Semaphore baseline; cache hits at least 0.25x the
dict-of-futures baseline. The rows with ``Queue(store=...)`` run the same jobs and hits with a
store: each job that must run then costs one store read and one save; cache hits never touch
the store.

The sequential figure (one ``push_and_wait`` at a time, so the lane runs dry between jobs and
each job starts a lane worker: workers never park, issue 9 item 14) is measured beside one
task per job, each awaited before the next.
"""

from __future__ import annotations

import asyncio
import functools
import gc
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


async def noop() -> None:
    return None


async def value(key: str) -> str:
    return key


async def semaphore_baseline() -> float:
    """One task per job behind asyncio.Semaphore(4): seconds for N_JOBS."""
    sem = asyncio.Semaphore(PERMITS)

    async def one() -> None:
        async with sem:
            await noop()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(N_JOBS)))
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


def best(measure: Callable[[], Coroutine[Any, Any, float]]) -> float:
    """The shortest of ROUNDS runs, each on a fresh loop, in seconds."""
    times: list[float] = []
    for _ in range(ROUNDS):
        gc.collect()
        times.append(asyncio.run(measure()))
    return min(times)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    print(f"before: {_load()}")
    sem = N_JOBS / best(semaphore_baseline)
    pooled = N_JOBS / best(lambda: agentq_jobs(capacity=N_JOBS))
    bounded = N_JOBS / best(lambda: agentq_jobs(capacity=100))
    print(f"jobs: {N_JOBS:,} no-op async jobs, {PERMITS} permits (best of {ROUNDS})")
    print(f"  asyncio.Semaphore + task per job  {sem:>12,.0f} jobs/s   1.00x")
    print(f"  agentq (capacity {N_JOBS:,})        {pooled:>12,.0f} jobs/s   {pooled / sem:.2f}x")
    print(f"  agentq (capacity 100, push waits) {bounded:>12,.0f} jobs/s   {bounded / sem:.2f}x")
    lam = N_JOBS / best(lambda: agentq_jobs(capacity=N_JOBS, form="lambda"))
    part = N_JOBS / best(lambda: agentq_jobs(capacity=N_JOBS, form="partial"))
    print(f"  agentq, Job(key, lambda: work(i)) {lam:>12,.0f} jobs/s   {lam / sem:.2f}x"
          "   (target >= 1.0x)")
    print(f"  agentq, Job(key, partial(work,i)) {part:>12,.0f} jobs/s   {part / sem:.2f}x")
    one = N_JOBS / best(task_per_job_baseline)
    seq = N_JOBS / best(agentq_sequential)
    print(f"sequential: {N_JOBS:,} no-op jobs, each awaited before the next is pushed")
    print(f"  a task per job, awaited           {one:>12,.0f} jobs/s   1.00x")
    print(f"  agentq push_and_wait              {seq:>12,.0f} jobs/s   {seq / one:.2f}x")
    base = N_HITS / best(dict_baseline)
    hits = N_HITS / best(lambda: agentq_hits(build_jobs=False))
    built = N_HITS / best(lambda: agentq_hits(build_jobs=True))
    print(f"cache hits: {N_HITS:,} push_and_wait over {N_KEYS:,} completed keys")
    print(f"  dict of futures                   {base:>12,.0f} hits/s   1.00x")
    print(f"  agentq (jobs built once)          {hits:>12,.0f} hits/s   {hits / base:.2f}x")
    print(f"  agentq (a new Job per call)       {built:>12,.0f} hits/s   {built / base:.2f}x")
    mem = N_STORED / best(lambda: agentq_store_jobs("memory"))
    lite = N_STORED / best(lambda: agentq_store_jobs("sqlite"))
    stored_hits = N_HITS / best(agentq_store_hits)
    print(f"with a store: {N_STORED:,} jobs (one read, one save each); the same cache hits")
    print(f"  agentq, store=MemoryStore()       {mem:>12,.0f} jobs/s   {mem / sem:.2f}x")
    print(f"  agentq, store=SqliteStore(file)   {lite:>12,.0f} jobs/s   {lite / sem:.2f}x")
    print(f"  agentq cache hits, SqliteStore    {stored_hits:>12,.0f} hits/s   "
          f"{stored_hits / base:.2f}x")
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
