"""Budgets shared through a store: queues on one store (as processes on one database) keep
within one lane budget together, and a pause one of them is asked for holds them all.

Two `SqliteStore` objects on one file stand for two processes (each has its own connection,
as a process would); one test runs the same on PostgreSQL. Everything runs on a `FakeClock`:
time moves only when a test advances it, and `drain` lets the store calls in flight finish
(they run on the stores' threads) without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import Target
from queue_helpers import settle

from agentq.clock import FakeClock
from agentq.outcomes import Failed
from agentq.queue import Job, LaneConfig, Priority, Queue, Rate
from agentq.queue.budgets import SharedBudgets
from agentq.retry import RetryPolicy
from agentq.store import MemoryStore, PostgresStore, SqliteStore

pytestmark = pytest.mark.timeout(60)

T0 = FakeClock().time()


def budgets(queue: Queue) -> SharedBudgets:
    shared = queue._dispatch.arbiter.shared
    assert shared is not None
    return shared


async def drain(*queues: Queue) -> None:
    """Let every queue's store calls finish, and what they start, until nothing is in flight."""
    for _ in range(200):
        await settle()
        pending = [task for q in queues for task in budgets(q).tasks]
        if not pending:
            await settle()
            if not any(budgets(q).tasks for q in queues):
                return
        await asyncio.gather(*pending, return_exceptions=True)
    raise AssertionError("the store calls never came to rest")


async def run_for(clock: FakeClock, seconds: float, *queues: Queue, step: float = 0.5) -> None:
    """Advance `seconds` in steps of `step`, draining the store calls after each."""
    await drain(*queues)
    for _ in range(round(seconds / step)):
        await clock.advance(step)
        await drain(*queues)


class Starts:
    """Job bodies that note the clock time they start at (relative to T0)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.at: dict[str, float] = {}

    def body(self, key: str, output: object = "ok") -> Callable[[], Coroutine[Any, Any, object]]:
        async def run() -> object:
            self.at.setdefault(key, self.clock.time() - T0)
            return output

        return run


def job(key: str, fn: Callable[[], Any], **kwargs: Any) -> Job:
    """A job that keeps no outcome in the store: it starts as soon as its permit is given
    (a persisted job reads the store first, in real time, while the fake clock may move)."""
    return Job(key, fn, persist=False, **kwargs)


def most_in_any_window(times: list[float], per: float) -> int:
    return max(sum(1 for u in times if t - per < u <= t) for t in times)


def lanes(**budget: Rate) -> dict[Priority, LaneConfig]:
    return {Priority.MEDIUM: LaneConfig(capacity=50, permits=10, **budget)}


@contextlib.asynccontextmanager
async def two_queues(path: Path, clock: FakeClock, **budget: Rate) -> AsyncIterator[
    tuple[Queue, Queue]
]:
    """Two queues, each on its own `SqliteStore` of one file (two processes)."""
    async with SqliteStore(path) as one, SqliteStore(path) as two, Queue(
        lanes(**budget), clock=clock, store=one
    ) as a, Queue(lanes(**budget), clock=clock, store=two) as b:
        yield a, b
        await drain(a, b)


async def shared_rate_holds(clock: FakeClock, one: Any, two: Any) -> None:
    starts = Starts(clock)
    rate = Rate(3, 10.0)
    async with Queue(lanes(rate=rate), clock=clock, store=one) as a, Queue(
        lanes(rate=rate), clock=clock, store=two
    ) as b:
        for i in range(6):
            a.push_nowait(job(f"a{i}", starts.body(f"a{i}")))
            b.push_nowait(job(f"b{i}", starts.body(f"b{i}")))
        await run_for(clock, 45.0, a, b)
        assert len(starts.at) == 12
        times = sorted(starts.at.values())
        assert most_in_any_window(times, 10.0) == 3  # one budget for both, never more
        assert times[-1] == pytest.approx(30.0)  # and no slower: 3 per 10 s, back to back
        await drain(a, b)


async def test_two_queues_on_one_sqlite_file_share_the_rate(
    clock: FakeClock, tmp_path: Path
) -> None:
    async with SqliteStore(tmp_path / "rates.db") as one, SqliteStore(
        tmp_path / "rates.db"
    ) as two:
        await shared_rate_holds(clock, one, two)


async def test_two_queues_on_one_memory_store_share_the_rate(clock: FakeClock) -> None:
    store = MemoryStore()
    await shared_rate_holds(clock, store, store)


async def test_two_queues_on_one_postgres_schema_share_the_rate(
    clock: FakeClock, pg_target: Target
) -> None:
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as one, PostgresStore(
        pg_target.dsn, schema=pg_target.schema
    ) as two:
        await shared_rate_holds(clock, one, two)


class TooMany(Exception):
    """An HTTP 429 with ``Retry-After: 5``."""

    status_code = 429
    headers = {"retry-after": "5"}  # noqa: RUF012 - read only


async def test_a_429_in_one_queue_pauses_the_lane_in_the_other(
    clock: FakeClock, tmp_path: Path
) -> None:
    starts = Starts(clock)
    tried: list[float] = []

    async def refused_once() -> str:
        tried.append(clock.time() - T0)
        if len(tried) == 1:
            raise TooMany()
        return "ok"

    async with two_queues(tmp_path / "rates.db", clock, rate=Rate(100, 1.0)) as (a, b):
        failing = a.push_nowait(job("x", refused_once, retry=RetryPolicy(max_attempts=2)))
        await run_for(clock, 1.0, a, b)
        assert tried == [0.0]
        assert a.stats()[Priority.MEDIUM].paused_until == T0 + 5.0
        b.push_nowait(job("y", starts.body("y")))  # another process, same lane
        await run_for(clock, 3.5, a, b)
        assert "y" not in starts.at
        assert b.stats()[Priority.MEDIUM].paused_until == T0 + 5.0  # read from the store
        await run_for(clock, 1.5, a, b)
        assert starts.at["y"] == pytest.approx(5.0)
        assert tried[1] >= 5.0
        assert (await failing.handle).output == "ok"  # type: ignore[union-attr]
        await drain(a, b)


async def test_resume_lane_lifts_the_stored_pause_for_the_other_queue_too(
    clock: FakeClock, tmp_path: Path
) -> None:
    starts = Starts(clock)

    async def refused() -> str:
        raise TooMany()

    async with two_queues(tmp_path / "rates.db", clock, rate=Rate(100, 1.0)) as (a, b):
        failed = a.push_nowait(job("x", refused))
        await run_for(clock, 1.0, a, b)
        b.push_nowait(job("y", starts.body("y")))  # another process: it reads the pause
        await drain(a, b)
        assert b.stats()[Priority.MEDIUM].paused_until == T0 + 5.0
        assert await a.resume_lane("medium") is True  # here, and in the store for all
        assert a.stats()[Priority.MEDIUM].paused_until is None
        a.push_nowait(job("z", starts.body("z")))
        await drain(a, b)
        assert starts.at == {"z": pytest.approx(1.0)}  # at once here
        await run_for(clock, 1.0, a, b)  # the other asks the store again within a second
        assert starts.at["y"] == pytest.approx(2.0)
        assert b.stats()[Priority.MEDIUM].paused_until is None
        assert await a.resume_lane("medium") is False  # nothing left to lift
        assert isinstance(await failed.handle, Failed)  # type: ignore[union-attr]


@dataclass
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass
class Reply:
    text: str
    usage: Usage


async def test_tokens_are_settled_by_the_usage_a_job_reports(
    clock: FakeClock, tmp_path: Path
) -> None:
    starts = Starts(clock)
    async with two_queues(tmp_path / "rates.db", clock, tokens=Rate(100, 60.0)) as (a, b):
        a.push_nowait(job("a", starts.body("a", Reply("x", Usage(4, 6))), tokens=80))
        await run_for(clock, 1.0, a, b)  # a used 10 tokens: its charge says so now
        b.push_nowait(job("b", starts.body("b"), tokens=80))  # 10 + 80 fits
        b.push_nowait(job("c", starts.body("c"), tokens=80))  # keeps its estimate: waits
        await run_for(clock, 2.0, a, b)
        assert starts.at["b"] == pytest.approx(1.0)
        assert "c" not in starts.at
        await run_for(clock, 57.5, a, b)  # a leaves the window at 60, b at 61
        assert "c" not in starts.at
        await run_for(clock, 0.5, a, b)
        assert starts.at["c"] == pytest.approx(61.0)
        await drain(a, b)


async def test_a_restarted_queue_finds_the_window_in_the_store(
    clock: FakeClock, tmp_path: Path
) -> None:
    starts = Starts(clock)
    path = tmp_path / "rates.db"
    async with SqliteStore(path) as store, Queue(lanes(rate=Rate(2, 10.0)), clock=clock,
                                                 store=store) as queue:
        for key in ("a", "b"):
            queue.push_nowait(job(key, starts.body(key)))
        await run_for(clock, 1.0, queue)
    assert set(starts.at) == {"a", "b"}
    async with SqliteStore(path) as store, Queue(lanes(rate=Rate(2, 10.0)), clock=clock,
                                                 store=store) as queue:
        queue.push_nowait(job("c", starts.body("c")))
        await run_for(clock, 8.5, queue)
        assert "c" not in starts.at  # a and b still fill the window of the process before
        await run_for(clock, 1.0, queue)
        assert starts.at["c"] == pytest.approx(10.0)
        await drain(queue)


class Counting(MemoryStore):
    """A MemoryStore that counts the rate verbs it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def take_budget(self, *args: Any, **kwargs: Any) -> Any:
        self.asked += 1
        return await super().take_budget(*args, **kwargs)

    async def pause_lane(self, *args: Any, **kwargs: Any) -> None:
        self.asked += 1
        await super().pause_lane(*args, **kwargs)


async def test_lanes_without_budgets_never_ask_the_store(clock: FakeClock) -> None:
    store = Counting()

    async def refused() -> None:
        raise TooMany()

    async with Queue(clock=clock, store=store) as queue:
        assert queue._dispatch.arbiter.shared is None
        for i in range(5):
            queue.push_nowait(job(f"j{i}", refused))
        await clock.advance(10.0)
    budgets_queue = Queue(
        {Priority.LOW: LaneConfig(rate=Rate(5, 1.0)), Priority.HIGH: LaneConfig()},
        clock=clock, store=store,
    )
    async with budgets_queue:
        handle = budgets_queue.push_nowait(
            job("h", Starts(clock).body("h"), priority=Priority.HIGH)
        )
        await handle.handle  # type: ignore[union-attr]
    assert store.asked == 0


class Broken(MemoryStore):
    """A MemoryStore whose rate windows fail once, then work."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def take_budget(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise OSError("disk on fire")
        return await super().take_budget(*args, **kwargs)


async def test_a_failing_store_is_reported_and_asked_again(clock: FakeClock) -> None:
    starts = Starts(clock)
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        async with Queue(lanes(rate=Rate(5, 1.0)), clock=clock, store=Broken()) as queue:
            queue.push_nowait(job("a", starts.body("a")))
            await run_for(clock, 0.5, queue)
            assert "a" not in starts.at
            assert "disk on fire" in str(reported[0]["exception"])
            await run_for(clock, 1.0, queue)
            assert starts.at["a"] == pytest.approx(1.0)  # asked again ERROR_BACKOFF later
            await drain(queue)
    finally:
        loop.set_exception_handler(None)


async def test_bad_inputs_of_sharing_and_settling(clock: FakeClock) -> None:
    async with Queue(lanes(tokens=Rate(100, 60.0)), clock=clock) as queue:
        with pytest.raises(TypeError, match=r"RateLedger.*'a store'"):
            queue.share_budgets("a store")  # type: ignore[arg-type]
        for bad in (-1, 1.5, True):
            with pytest.raises(ValueError, match=f"tokens must be an int >= 0, got {bad!r}"):
                queue.settle_tokens("k", bad)  # type: ignore[arg-type]
        assert queue.settle_tokens("unknown", 5) is False
        await queue.push_and_wait(job("k", Starts(clock).body("k"), tokens=80))
        assert queue.settle_tokens("k", 10) is True  # its output reported nothing
        assert queue.settle_tokens("k", 10) is False  # once
        assert queue.stats()[Priority.MEDIUM].window_tokens == 10
        store = MemoryStore()
        queue.share_budgets(store)  # from now on through the store
        queue.share_budgets(MemoryStore())  # a second store is ignored: the first is kept
        assert budgets(queue).store is store


class SlowPause(MemoryStore):
    """A MemoryStore whose pause_lane waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.paused: list[str] = []

    async def pause_lane(self, lane: str, until: float) -> None:
        await self.release.wait()
        await super().pause_lane(lane, until)
        self.paused.append(lane)


async def test_close_waits_for_the_pause_being_stored(clock: FakeClock) -> None:
    store = SlowPause()

    async def refused() -> None:
        raise TooMany()

    queue = Queue(lanes(rate=Rate(5, 1.0)), clock=clock, store=store)
    handle = queue.push_nowait(job("x", refused)).handle  # type: ignore[union-attr]
    await handle
    closing = asyncio.get_running_loop().create_task(queue.close())
    await settle()
    assert not closing.done()  # the pause is not stored yet: other processes must see it
    store.release.set()
    await closing
    assert store.paused == ["medium"]
