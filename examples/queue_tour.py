"""A tour of agentq's queue: idempotency, lanes and backpressure, failure isolation, stats.

Run it with ``python -m examples.queue_tour`` (or ``python examples/queue_tour.py``). It needs
no third-party package and takes well under a second.
"""

from __future__ import annotations

import asyncio
import functools
import time

from agentq import (
    Cached,
    Failed,
    InFlight,
    Job,
    JobFailed,
    KeyConflictError,
    LaneConfig,
    Priority,
    Queue,
    Queued,
    QueueFull,
)

calls: dict[str, int] = {}


async def lookup_weather(city: str) -> str:
    """A stand-in for a slow tool call (an HTTP request, an LLM call…)."""
    calls[city] = calls.get(city, 0) + 1
    await asyncio.sleep(0.05)
    return f"sunny in {city}"


def resize_image(name: str) -> str:
    """A plain (blocking) function: it runs in a worker thread."""
    time.sleep(0.01)
    return f"{name} resized"


async def flaky_tool() -> str:
    raise ConnectionError("upstream timed out")


def title(text: str) -> None:
    print(f"\n== {text}")


async def idempotency(queue: Queue) -> None:
    title("1. Idempotency: one execution per key")
    job = Job("weather:paris", functools.partial(lookup_weather, "Paris"))
    outputs = await asyncio.gather(*(queue.push_and_wait(job) for _ in range(10)))
    print(f"10 concurrent callers got {set(outputs)}; the tool ran {calls['Paris']} time(s)")
    match await queue.push(job):
        case Cached(output):
            print(f"pushed again later: Cached({output!r}), nothing ran")
    other = Job("weather:paris", functools.partial(lookup_weather, "Rome"))
    try:
        await queue.push(other)
    except KeyConflictError:
        print("the same key for another call (Rome): KeyConflictError, not Paris's result")


async def lanes(queue: Queue) -> None:
    title("2. Lanes and backpressure")
    accepted = []
    try:
        for i in range(10):
            job = Job(f"resize:{i}", functools.partial(resize_image, f"img{i}.png"), Priority.LOW)
            accepted.append(queue.push_nowait(job))
    except QueueFull:
        low = queue.stats()[Priority.LOW]
        print(f"LOW admitted {len(accepted)} jobs (permits {low.permits} + capacity "
              f"{low.capacity}); the next push_nowait raised QueueFull")
    urgent = Job("weather:oslo", functools.partial(lookup_weather, "Oslo"), Priority.HIGH)
    print(f"HIGH is not slowed by the full LOW lane: {await queue.push_and_wait(urgent)!r}")
    late = Job("resize:late", functools.partial(resize_image, "late.png"), Priority.LOW)
    result = await queue.push(late)  # waits for room instead of raising
    print(f"push() waited for room, then: {type(result).__name__}")
    for item in [*accepted, result]:
        if isinstance(item, Queued | InFlight):
            await item.handle


async def isolation(queue: Queue) -> None:
    title("3. Failure isolation")
    bad = await queue.push(Job("tool:flaky", flaky_tool))
    good = await queue.push(Job("weather:lima", functools.partial(lookup_weather, "Lima")))
    assert isinstance(bad, Queued) and isinstance(good, Queued)
    outcome = await bad.handle
    assert isinstance(outcome, Failed)
    print(f"the failing job ended {outcome.reason}: {outcome.error}")
    print(f"traceback recorded: {len(outcome.error.traceback.splitlines())} lines")
    print(f"the job beside it still completed: {await good.handle}")
    try:
        await queue.push_and_wait(Job("tool:flaky", flaky_tool))
    except JobFailed as exc:
        print(f"push_and_wait raises JobFailed; __cause__ = {exc.__cause__!r}")


def show_stats(queue: Queue) -> None:
    title("4. Stats (a frozen snapshot per lane)")
    print(f"{'lane':<8}{'permits':>8}{'queued':>8}{'running':>8}{'done':>6}{'failed':>8}"
          f"{'cached':>8}{'joins':>7}")
    for lane in queue.stats():
        print(f"{lane.priority:<8}{lane.permits:>8}{lane.queued:>8}{lane.running:>8}"
              f"{lane.completed:>6}{lane.failed:>8}{lane.cache_hits:>8}{lane.joins:>7}")


async def main() -> None:
    lanes_config = {
        Priority.HIGH: LaneConfig(capacity=10, permits=4),
        Priority.LOW: LaneConfig(capacity=3, permits=1),
    }
    async with Queue(lanes_config, max_keys=10_000) as queue:
        await idempotency(queue)
        await lanes(queue)
        await isolation(queue)
        show_stats(queue)
    report = await queue.close()
    print(f"\nclosed: every job finished on its own: {report.clean}")


if __name__ == "__main__":
    asyncio.run(main())
