"""Rate limits and arbitration on the real clock: achieved rates beside their limits.

Run: ``python -m bench.rates`` (about 10 s). Rows:

- **jobs/s**: 250 no-op jobs through a lane with ``rate=Rate(50, 1.0)`` and 10 permits; the
  achieved rate over the run, and the most body starts seen in any 1 s window, beside the
  limit. A start is counted when its permit is given; a body begins a loop turn or more
  later, so on a busy loop a window of body starts can hold a job (or 100 tokens) more than
  the limit, which the gate itself never admits.
- **tokens/s**: 60 jobs of an estimated 100 tokens through ``tokens=Rate(1_000, 1.0)``.
- **429 storm**: 20 jobs whose first attempt fails with HTTP 429 and ``Retry-After: 0.5``;
  the shortest gap between a refusal and the next start in that lane (must be >= 0.5 s;
  bodies dispatched in the same loop turn as the refused one are counted apart).
- **Low under High load**: ``total_permits=4``, a HIGH lane kept full of 50 ms jobs, LOW jobs
  pushed every 0.2 s; each LOW job's wait beside ``aging`` (1 s): the bound is aging plus one
  job's length.

In-process budgets (one queue); ``bench/rates_shared.py`` measures budgets shared by two
processes through PostgreSQL. Each row ends with the machine's load average.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agentq.queue import Job, LaneConfig, Priority, Queue, Rate
from agentq.retry import RetryPolicy


def load() -> str:
    """The machine's 1-minute load average, for the rows (the machine may be shared)."""
    return f"load {os.getloadavg()[0]:.2f}"


def _most_in_window(times: list[float], per: float) -> int:
    return max(sum(1 for u in times if t - per < u <= t) for t in times)


async def _starts_through(lane: LaneConfig, n: int, tokens: int | None) -> list[float]:
    starts: list[float] = []

    async def job() -> None:
        starts.append(time.monotonic())

    async def warm() -> None:
        pass

    async with Queue({Priority.MEDIUM: lane}) as queue:
        # The first job a process runs starts late (imports, first task): warm up another lane.
        await queue.push_and_wait(Job("warm-up", warm, Priority.HIGH))
        for i in range(n):
            await queue.push(Job(f"j{i}", job, tokens=tokens))
            # Let a started body run now: a start is counted when its permit is given, and
            # a loop kept busy by the pushing loop would start the bodies late, in a bunch.
            await asyncio.sleep(0)
    return starts


async def jobs_rate() -> None:
    limit = Rate(50, 1.0)
    starts = await _starts_through(LaneConfig(capacity=300, permits=10, rate=limit), 250, None)
    span = starts[-1] - starts[0]
    achieved = (len(starts) - limit.count) / span  # the first window is a burst of `count`
    print(f"  jobs/s    limit {limit.count}/s   achieved {achieved:6.1f}/s after the first "
          f"burst   most in any 1 s window: {_most_in_window(starts, 1.0)}   {load()}")


async def tokens_rate() -> None:
    limit = Rate(1_000, 1.0)
    starts = await _starts_through(LaneConfig(capacity=100, permits=10, tokens=limit), 60, 100)
    span = starts[-1] - starts[0]
    achieved = (len(starts) - 10) * 100 / span
    print(f"  tokens/s  limit {limit.count}/s achieved {achieved:6.0f}/s after the first "
          f"burst   most in any 1 s window: {100 * _most_in_window(starts, 1.0)}   {load()}")


class TooMany(Exception):
    def __init__(self) -> None:
        super().__init__("HTTP 429")
        self.status_code = 429
        self.headers = {"retry-after": "0.5"}


async def storm() -> None:
    attempts: list[tuple[float, bool]] = []  # (time, refused)
    seen: set[str] = set()

    def body(key: str) -> Callable[[], Coroutine[Any, Any, str]]:
        async def run() -> str:
            first = key not in seen
            seen.add(key)
            attempts.append((time.monotonic(), first))
            if first:
                raise TooMany()
            return key

        return run

    policy = RetryPolicy(max_attempts=3)
    async with Queue({Priority.LOW: LaneConfig(capacity=30, permits=4)}) as queue:
        handles = [
            await queue.push(Job(f"s{i}", body(f"s{i}"), Priority.LOW, retry=policy))
            for i in range(20)
        ]
        for accepted in handles:
            await accepted.handle  # type: ignore[union-attr]
    refusals = sorted(t for t, refused in attempts if refused)
    # Per attempt, the time since the last refusal before it. Bodies dispatched in the same
    # loop turn as a refused one begin a few ms after it (they were started before it
    # failed): those are counted apart; every other start must wait out the pause.
    gaps = [a - max(r for r in refusals if r < a) for a, _ in attempts if a > refusals[0]]
    batch = [g for g in gaps if g < 0.01]
    later = [g for g in gaps if g >= 0.01]
    print(f"  429 storm Retry-After 0.50 s   {len(attempts)} attempts; after a refusal the "
          f"next start came {min(later):.3f} s later ({len(batch)} bodies dispatched with a "
          f"refused one began within 10 ms)   {load()}")


async def low_under_high() -> None:
    aging, job_s = 1.0, 0.05
    lanes = {p: LaneConfig(capacity=200, permits=4) for p in (Priority.HIGH, Priority.LOW)}
    waits: list[float] = []

    async def high() -> None:
        await asyncio.sleep(job_s)

    def low(pushed: float) -> Callable[[], Coroutine[Any, Any, None]]:
        async def run() -> None:
            waits.append(time.monotonic() - pushed)
            await asyncio.sleep(job_s)

        return run

    async with Queue(lanes, total_permits=4, aging=aging) as queue:
        n = 0
        end = time.monotonic() + 4.0
        next_low = time.monotonic()
        while time.monotonic() < end:
            while queue.stats()[Priority.HIGH].queued < 20:
                n += 1
                queue.push_nowait(Job(f"h{n}", high, Priority.HIGH))
            if time.monotonic() >= next_low and next_low < end - 1.5:
                now = time.monotonic()
                queue.push_nowait(Job(f"l{now}", low(now), Priority.LOW))
                next_low += 0.2
            await asyncio.sleep(0.01)
        await queue.close(drain=False)
    print(f"  LOW under HIGH load  aging {aging:.2f} s (+ one job {job_s:.2f} s)   LOW waits: "
          f"min {min(waits):.3f} s, max {max(waits):.3f} s over {len(waits)} jobs; "
          f"{n} HIGH jobs pushed   {load()}")


def main() -> None:
    print("Rate limits and arbitration (real clock, one process)")
    for scenario in (jobs_rate, tokens_rate, storm, low_under_high):
        asyncio.run(scenario())


if __name__ == "__main__":
    main()
