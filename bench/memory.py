"""What a queue holds in memory (issue 12's memory rows).

    python -m bench.memory [--queued 100000] [--ttl-jobs 1000000] [--completed 20000]

Rows:

- queued: `--queued` no-op jobs pushed with ``push_nowait`` into one lane (4 permits, room
  for all of them) before any of them runs; the row prints the Python heap they take
  (tracemalloc, current minus before) and the process's resident set growth, beside the
  same number of ``asyncio.Task`` objects waiting on a ``Semaphore(4)`` (the 1x limit row of
  the throughput benchmark). Target: at most 100 MiB for 100,000 queued jobs.
- completed: `--completed` jobs run one after the other through a queue without `key_ttl` or
  `max_keys`, each ``lambda deps=deps, i=i: ask(deps, i)`` over its own 1 KB object; the row
  prints the heap the finished keys hold and how many of those objects are still alive (a
  finished key keeps its fingerprint, not its job or callable: 0 expected).
- key_ttl: `--ttl-jobs` jobs with unique keys through a queue with ``key_ttl=1.0`` (seconds),
  1,000 at a time, on a `FakeClock` that moves 1 ms a job (so about 1,000 finished keys are
  remembered at any time, whatever the machine's speed); the resident set is printed every
  tenth of the run. Finished keys older than the ttl are forgotten as new ones finish, so
  the resident set must stay flat. Target: flat (the last figure within 8 MiB of the one at
  20%).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
import tracemalloc
import weakref
from pathlib import Path

from agentq.clock import FakeClock
from agentq.queue import Job, LaneConfig, Priority, Queue, Queued

MIB = 1024 * 1024


async def work(i: int) -> int:
    return i


def rss() -> int:
    """The process's resident set size, in bytes (Linux /proc)."""
    fields = Path("/proc/self/statm").read_text().split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")


async def queued_jobs(n: int, trace: bool) -> float:
    """MiB held by `n` jobs queued and not yet run: heap by tracemalloc if `trace`, else the
    growth of the resident set (tracemalloc's own tables would inflate it)."""
    gc.collect()
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=n, permits=4)})
    before = _start(trace)
    handles = []
    for i in range(n):
        accepted = queue.push_nowait(Job(f"job-{i}", lambda i=i: work(i)))
        assert isinstance(accepted, Queued)
        handles.append(accepted.handle)
    held = _stop(trace, before)
    for handle in handles:
        await handle
    await queue.close()
    return held


async def waiting_tasks(n: int, trace: bool) -> float:
    """MiB held by `n` tasks waiting on a Semaphore(4) (heap or RSS growth, as above)."""
    gc.collect()
    sem = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        async with sem:
            await work(i)

    before = _start(trace)
    tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
    held = _stop(trace, before)
    await asyncio.gather(*tasks)
    return held


def _start(trace: bool) -> int:
    if trace:
        tracemalloc.start()
        return tracemalloc.get_traced_memory()[0]
    return rss()


def _stop(trace: bool, before: int) -> float:
    if trace:
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    else:
        held = rss() - before
    return held / MIB


async def ttl_jobs(n: int, batch: int = 1_000) -> list[tuple[int, float, float, int]]:
    """Run `n` jobs through a queue with key_ttl=1.0 on a clock that moves 1 ms a job (so the
    run keeps about 1,000 finished keys whatever the machine's speed); samples of (jobs
    done, seconds, RSS MiB, keys remembered)."""
    clock = FakeClock()
    lanes = {Priority.MEDIUM: LaneConfig(capacity=batch, permits=4)}
    queue = Queue(lanes, key_ttl=1.0, clock=clock)
    samples: list[tuple[int, float, float, int]] = []
    step = max(n // 10, batch)
    start = time.perf_counter()
    done = 0
    while done < n:
        handles = []
        for i in range(done, min(done + batch, n)):
            accepted = queue.push_nowait(Job(f"job-{i}", lambda i=i: work(i)))
            assert isinstance(accepted, Queued)
            handles.append(accepted.handle)
        for handle in handles:
            await handle
        done += len(handles)
        if done % step == 0 or done == n:
            known = _known(queue, done)
            samples.append((done, time.perf_counter() - start, rss() / MIB, known))
        await clock.advance(len(handles) / 1000)
    await queue.close()
    return samples


class Deps:
    """What a job's callable may hold and nothing else needs: an agent's deps, a client."""

    def __init__(self) -> None:
        self.buffer = bytearray(1_000)


async def ask(deps: Deps, i: int) -> int:
    return i


async def completed_keys(n: int) -> tuple[float, int]:
    """Heap MiB held by a queue (no key_ttl, no max_keys) after `n` jobs completed, each
    ``lambda: ask(deps, i)`` over its own `Deps` (1 KB the callable alone holds); and how
    many of those `Deps` are still alive (the queue keeps each key's fingerprint: not its
    job, nor its callable)."""
    gc.collect()
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=n, permits=4)})
    alive = weakref.WeakSet[Deps]()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        deps = Deps()
        alive.add(deps)
        await queue.push_and_wait(Job(f"job-{i}", lambda deps=deps, i=i: ask(deps, i)))
    del deps
    gc.collect()
    held = (tracemalloc.get_traced_memory()[0] - before) / MIB
    tracemalloc.stop()
    await queue.close()
    return held, len(alive)


def _known(queue: Queue, done: int) -> int:
    """How many of the last 3,000 keys the queue still remembers (about 1,000 expected)."""
    return sum(queue.state(f"job-{i}") is not None for i in range(max(0, done - 3_000), done))


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--ttl-jobs", type=int, default=1_000_000)
    parser.add_argument("--completed", type=int, default=20_000)
    args = parser.parse_args()
    print(f"before: {_load()}")
    n = args.queued
    t_grown = asyncio.run(waiting_tasks(n, trace=False))
    t_heap = asyncio.run(waiting_tasks(n, trace=True))
    grown = asyncio.run(queued_jobs(n, trace=False))
    heap = asyncio.run(queued_jobs(n, trace=True))
    print(f"memory: {n:,} jobs queued before any runs (heap by tracemalloc; RSS growth)")
    print(f"  asyncio tasks behind Semaphore(4)     heap {t_heap:7.1f} MiB   "
          f"RSS +{t_grown:6.1f} MiB")
    print(f"  agentq Queue, Job(key, lambda)        heap {heap:7.1f} MiB   RSS +{grown:6.1f} MiB"
          f"   {'met' if heap <= 100 else 'MISSED'} (target <= 100 MiB)")
    held, alive = asyncio.run(completed_keys(args.completed))
    print(f"memory: {args.completed:,} completed keys, no key_ttl or max_keys, each job's "
          "callable holding 1 KB of its own")
    print(f"  agentq Queue                          heap {held:7.1f} MiB   "
          f"{alive:,} of the callables' objects still alive")
    samples = asyncio.run(ttl_jobs(args.ttl_jobs))
    print(f"memory: {args.ttl_jobs:,} jobs with key_ttl=1.0 s (a clock moving 1 ms a job), "
          "1,000 at a time: RSS as they run")
    for done, seconds, mib, known in samples:
        print(f"  {done:>10,} jobs  {seconds:7.1f} s   RSS {mib:7.1f} MiB   "
              f"{known:,} of the last 3,000 keys remembered")
    early = samples[min(1, len(samples) - 1)][2]
    last = samples[-1][2]
    flat = last - early <= 8
    print(f"  RSS from 20% to the end: {last - early:+.1f} MiB   "
          f"{'met' if flat else 'MISSED'} (target: flat, within 8 MiB)")
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
