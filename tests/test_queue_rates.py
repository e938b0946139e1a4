"""Rate limits per lane, the lane pause of a rate-limited failure, and arbitration between lanes.

Everything runs on a `FakeClock`: time moves only when a test advances it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest
from queue_helpers import settle

from agentq import Rate as PublicRate
from agentq.clock import FakeClock
from agentq.outcomes import Completed, Failed
from agentq.queue import Rate
from agentq.queue.jobs import Job
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue
from agentq.queue.rates import MAX_RETRY_AFTER, Window, retry_after, tokens_used
from agentq.retry import RetryPolicy

T0 = FakeClock().time()


class Starts:
    """Job bodies that note the clock time they start at, and run `seconds` of fake time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.at: dict[str, float] = {}

    def body(
        self, key: str, seconds: float = 0.0, output: object = "ok"
    ) -> Callable[[], Coroutine[Any, Any, object]]:
        async def run() -> object:
            self.at.setdefault(key, self.clock.time() - T0)
            if seconds:
                await self.clock.sleep(seconds)
            return output

        return run


def most_in_any_window(times: list[float], per: float) -> int:
    """The most start times in any half-open window ``(t - per, t]``."""
    return max(sum(1 for u in times if t - per < u <= t) for t in times)


# ------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(
    ("count", "per"),
    [(0, 1.0), (-1, 1.0), (1.5, 1.0), (True, 1.0), ("3", 1.0), (1, 0), (1, -2.0),
     (1, math.inf), (1, math.nan), (1, "1"), (1, True)],
)
def test_rate_refuses_bad_values_naming_them(count: object, per: object) -> None:
    with pytest.raises(ValueError, match="Rate") as info:
        Rate(count, per)  # type: ignore[arg-type]
    assert repr(count if "count" in str(info.value) else per) in str(info.value)


def test_rate_is_exported_and_frozen() -> None:
    assert PublicRate is Rate
    rate = Rate(3, 2)
    assert rate == Rate(3, 2.0) and isinstance(rate.per_seconds, float)
    with pytest.raises(AttributeError):
        rate.count = 4  # type: ignore[misc]


def test_lane_config_and_job_and_queue_refuse_bad_values() -> None:
    with pytest.raises(TypeError, match="rate must be a Rate"):
        LaneConfig(rate=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tokens must be a Rate"):
        LaneConfig(tokens=(100, 60.0))  # type: ignore[arg-type]
    for bad in (-1, 1.5, True, "10", 2**63, 10**30):  # a store keeps 64-bit integers
        said = rf"tokens must be an int in \[0, 2\*\*63\) or None, got {bad!r}"
        with pytest.raises(ValueError, match=said):
            Job("k", lambda: None, tokens=bad)  # type: ignore[arg-type]
    assert Job("k", lambda: None, tokens=0).tokens == 0
    for bad_total in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=f"total_permits .* got {bad_total!r}"):
            Queue(total_permits=bad_total)  # type: ignore[arg-type]
    for bad_aging in (-1.0, math.inf):
        with pytest.raises(ValueError, match="aging"):
            Queue(aging=bad_aging)
    with pytest.raises(TypeError, match="aging"):
        Queue(aging="10")  # type: ignore[arg-type]


# ------------------------------------------------------------------ the sliding window


def test_window_slides_and_settles() -> None:
    window = Window(Rate(3, 10.0))
    for at in (0.0, 0.0, 5.0):
        assert window.delay(at, 1) == 0.0
        window.charge(at, 1)
    assert window.delay(9.0, 1) == 1.0  # the two starts at 0 leave the window at 10
    assert window.delay(10.0, 1) == 0.0
    tokens = Window(Rate(100, 60.0))
    big = tokens.charge(0.0, 80)
    assert tokens.delay(1.0, 30) == 59.0
    tokens.settle(big, 10)  # the actual usage was lower: room now
    assert tokens.usage(1.0) == 10 and tokens.delay(1.0, 30) == 0.0
    assert Window(Rate(100, 60.0)).delay(0.0, 500) == 0.0  # too big, but the window is empty


async def test_at_most_count_jobs_start_in_any_window(clock: FakeClock) -> None:
    starts = Starts(clock)
    lanes = {Priority.MEDIUM: LaneConfig(capacity=20, permits=10, rate=Rate(3, 10.0))}
    async with Queue(lanes, clock=clock) as queue:
        handles = [queue.push_nowait(Job(f"j{i}", starts.body(f"j{i}"))) for i in range(10)]
        await settle()
        assert len(starts.at) == 3
        assert queue.stats()[Priority.MEDIUM].window_starts == 3
        assert queue.stats()[Priority.MEDIUM].queued == 7  # waiting, holding no permit
        assert queue.stats()[Priority.MEDIUM].running == 0
        await clock.advance(9.9)
        assert len(starts.at) == 3
        for _ in range(40):
            await clock.advance(1.0)
        assert all(h.handle.done() for h in handles)  # type: ignore[union-attr]
    times = sorted(starts.at.values())
    assert most_in_any_window(times, 10.0) == 3
    assert times[-1] == pytest.approx(30.0)  # 3 per 10 s, back to back: 0, 10, 20, 30


async def test_the_window_slides_rather_than_resets(clock: FakeClock) -> None:
    starts = Starts(clock)
    lanes = {Priority.MEDIUM: LaneConfig(capacity=20, permits=10, rate=Rate(3, 10.0))}
    async with Queue(lanes, clock=clock) as queue:
        queue.push_nowait(Job("a", starts.body("a")))
        queue.push_nowait(Job("b", starts.body("b")))
        await clock.advance(5.0)
        queue.push_nowait(Job("c", starts.body("c")))  # 3 in (-5, 5]
        await clock.advance(4.0)
        queue.push_nowait(Job("d", starts.body("d")))  # must wait for a and b to leave at 10
        queue.push_nowait(Job("e", starts.body("e")))
        queue.push_nowait(Job("f", starts.body("f")))  # (5, 10] holds c, d, e: waits for 15
        await settle()
        assert "d" not in starts.at
        await clock.advance(1.0)
        assert starts.at["d"] == starts.at["e"] == pytest.approx(10.0)
        assert "f" not in starts.at
        await clock.advance(5.0)
        assert starts.at["f"] == pytest.approx(15.0)


# ------------------------------------------------------------------ tokens


@dataclass
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass
class Reply:
    text: str
    used: Usage

    def usage(self) -> Usage:
        return self.used


async def test_tokens_budget_waits_for_room_and_settles_by_reported_usage(
    clock: FakeClock,
) -> None:
    starts = Starts(clock)
    lanes = {Priority.HIGH: LaneConfig(capacity=10, permits=10, tokens=Rate(100, 60.0))}
    async with Queue(lanes, clock=clock) as queue:
        # a reports a usage of 10 tokens (estimate 40); b keeps its estimate.
        a = Job("a", starts.body("a", 2.0, Reply("x", Usage(4, 6))), Priority.HIGH, tokens=40)
        b = Job("b", starts.body("b", 5.0), Priority.HIGH, tokens=40)
        c = Job("c", starts.body("c"), Priority.HIGH, tokens=40)
        d = Job("d", starts.body("d"), Priority.HIGH, tokens=70)
        for job in (a, b, c, d):
            queue.push_nowait(job)
        await settle()
        assert set(starts.at) == {"a", "b"}
        assert queue.stats()[Priority.HIGH].window_tokens == 80
        await clock.advance(2.0)  # a ends having used 10: 50 in the window, c (40) fits
        assert starts.at["c"] == pytest.approx(2.0)
        assert "d" not in starts.at  # 90 + 70 > 100
        await clock.advance(57.9)
        assert "d" not in starts.at
        await clock.advance(0.2)  # a and b leave the window at 60: 40 + 70 > 100 still
        assert "d" not in starts.at
        await clock.advance(2.0)  # c leaves at 62
        assert starts.at["d"] == pytest.approx(62.0)


async def test_a_job_bigger_than_the_budget_runs_alone(clock: FakeClock) -> None:
    starts = Starts(clock)
    lanes = {Priority.MEDIUM: LaneConfig(tokens=Rate(100, 10.0))}
    async with Queue(lanes, clock=clock) as queue:
        queue.push_nowait(Job("small", starts.body("small"), tokens=10))
        queue.push_nowait(Job("huge", starts.body("huge"), tokens=500))
        await settle()
        assert "huge" not in starts.at
        await clock.advance(10.0)
        assert starts.at["huge"] == pytest.approx(10.0)


def test_tokens_used_reads_the_usage_an_output_reports() -> None:
    @dataclass
    class Total:
        total_tokens: int

    assert tokens_used(Reply("x", Usage(3, 4))) == 7
    assert tokens_used(type("R", (), {"usage": Total(12)})()) == 12
    assert tokens_used("plain output") is None
    assert tokens_used(type("R", (), {"usage": Usage(-1, 2)})()) is None


# ------------------------------------------------------------------ 429 and retry_after


class RateLimited(Exception):
    """An HTTP error as a provider client raises it."""

    def __init__(self, status_code: int, headers: dict[str, str] | None) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.headers = headers


class Throttled(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"retry after {seconds}")
        self.retry_after = seconds


def test_retry_after_reads_attributes_and_429_headers() -> None:
    assert retry_after(Throttled(2.5)) == 2.5
    assert retry_after(RateLimited(429, {"retry-after": "30"})) == 30.0
    assert retry_after(RateLimited(429, {"Retry-After": "7"})) == 7.0
    assert retry_after(RateLimited(429, {"retry-after-ms": "1500"})) == 1.5
    assert retry_after(RateLimited(503, {"retry-after": "30"})) is None
    assert retry_after(RateLimited(429, None)) is None
    assert retry_after(RateLimited(429, {"retry-after": "Wed, 21 Oct 2015"})) is None
    assert retry_after(Throttled(-1)) is None
    assert retry_after(ValueError("x")) is None and retry_after(None) is None


def test_retry_after_above_the_maximum_is_clamped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentq.queue.rates"):
        assert retry_after(RateLimited(429, {"retry-after": "99999999"}), "LOW") == (
            MAX_RETRY_AFTER
        )
        assert retry_after(Throttled(1e9)) == MAX_RETRY_AFTER
        assert retry_after(Throttled(MAX_RETRY_AFTER)) == MAX_RETRY_AFTER
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "lane LOW" in warnings[0] and "99999999" in warnings[0]


async def test_a_huge_retry_after_pauses_the_lane_at_most_max(clock: FakeClock) -> None:
    async def refused() -> str:
        raise RateLimited(429, {"retry-after": "1e9"})

    async with Queue(clock=clock) as queue:
        queue.push_nowait(Job("j", refused, Priority.LOW))
        await settle()
        assert queue.stats()[Priority.LOW].paused_until == pytest.approx(
            T0 + MAX_RETRY_AFTER
        )


def test_retry_after_of_pydantic_ai_http_error() -> None:
    exceptions = pytest.importorskip("pydantic_ai.exceptions")
    error = exceptions.ModelHTTPError(429, "m", headers={"Retry-After": "12"})
    assert retry_after(error) == 12.0
    assert retry_after(exceptions.ModelHTTPError(500, "m", headers={"Retry-After": "12"})) in (
        None,
        12.0,  # a pydantic-ai that reads the header itself sets retry_after
    )


async def test_a_429_storm_pauses_the_lane_then_it_resumes(clock: FakeClock) -> None:
    starts: dict[str, list[float]] = {}
    def body(key: str) -> Callable[[], Coroutine[Any, Any, str]]:
        async def run() -> str:
            starts.setdefault(key, []).append(clock.time() - T0)
            if len(starts[key]) == 1:
                raise RateLimited(429, {"retry-after": "30"})
            return key

        return run

    lanes = {
        Priority.LOW: LaneConfig(capacity=10, permits=3),
        Priority.HIGH: LaneConfig(capacity=10, permits=3),
    }
    policy = RetryPolicy(max_attempts=3)
    async with Queue(lanes, clock=clock) as queue:
        handles = [
            queue.push_nowait(Job(f"j{i}", body(f"j{i}"), Priority.LOW, retry=policy)).handle  # type: ignore[union-attr]
            for i in range(6)
        ]
        await settle()
        # The 3 running jobs were refused; the lane is paused: no new first attempt.
        assert sorted(starts) == ["j0", "j1", "j2"]
        assert queue.stats()[Priority.LOW].paused_until == pytest.approx(T0 + 30.0)
        async def fine() -> str:
            return "fine"

        # Another lane is not paused.
        assert await queue.push_and_wait(Job("other", fine, Priority.HIGH)) == "fine"
        await clock.advance(29.9)
        assert sorted(starts) == ["j0", "j1", "j2"]
        assert all(len(times) == 1 for times in starts.values())
        await clock.advance(0.1)
        assert sum(times.count(30.0) for times in starts.values()) >= 1  # resumed at 30
        for _ in range(10):
            await clock.advance(30.0)
        outcomes = [await h for h in handles]
        assert outcomes == [Completed(f"j{i}") for i in range(6)]
    # Every first attempt was refused with Retry-After: 30; no attempt of the lane started
    # within 30 s after a refusal.
    refusals = [times[0] for times in starts.values()]
    attempts = [t for times in starts.values() for t in times]
    assert all(not (f < a < f + 30.0) for f in refusals for a in attempts)
    assert all(len(times) == 2 for times in starts.values())


async def test_retry_after_pauses_the_lane_even_without_retry(clock: FakeClock) -> None:
    started: list[str] = []

    async def throttled() -> None:
        started.append("first")
        raise Throttled(5.0)

    async def later() -> str:
        started.append("later")
        return "later"

    lanes = {Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}
    async with Queue(lanes, clock=clock) as queue:
        first = queue.push_nowait(Job("first", throttled)).handle  # type: ignore[union-attr]
        second = queue.push_nowait(Job("later", later)).handle  # type: ignore[union-attr]
        outcome = await first
        assert isinstance(outcome, Failed) and isinstance(outcome.exception, Throttled)
        await settle()
        assert started == ["first"] and queue.stats()[Priority.MEDIUM].queued == 1
        await clock.advance(4.9)
        assert started == ["first"]
        await clock.advance(0.1)
        assert await second == Completed("later")
        assert queue.stats()[Priority.MEDIUM].paused_until is None


async def test_resume_lane_lifts_the_pause_and_the_waiting_jobs_start(clock: FakeClock) -> None:
    started: list[str] = []

    async def throttled() -> None:
        started.append("first")
        raise Throttled(30.0)

    async def later(name: str) -> str:
        started.append(name)
        return name

    lanes = {Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}
    async with Queue(lanes, clock=clock) as queue:
        first = queue.push_nowait(Job("first", throttled)).handle  # type: ignore[union-attr]
        second = queue.push_nowait(Job("b", functools.partial(later, "b"))).handle  # type: ignore[union-attr]
        assert isinstance(await first, Failed)
        await settle()
        assert started == ["first"]
        assert queue.stats()[Priority.MEDIUM].paused_until == pytest.approx(clock.time() + 30.0)
        assert await queue.resume_lane("medium") is True  # no time passes
        assert await second == Completed("b")
        assert queue.stats()[Priority.MEDIUM].paused_until is None
        assert await queue.push_and_wait(Job("c", functools.partial(later, "c"))) == "c"
        assert started == ["first", "b", "c"]
        assert await queue.resume_lane(Priority.MEDIUM) is False  # nothing to lift
        assert await queue.resume_lane(Priority.LOW) is False
        for bad in ("urgent", "", 3, None):
            with pytest.raises(ValueError, match=f"no lane {bad!r}") as info:
                await queue.resume_lane(bad)  # type: ignore[arg-type]
            assert "'high'" in str(info.value)


# ------------------------------------------------------------------ arbitration


async def test_highest_priority_first_within_total_permits(clock: FakeClock) -> None:
    starts = Starts(clock)
    lanes = {p: LaneConfig(capacity=10, permits=2) for p in Priority}
    async with Queue(lanes, clock=clock, total_permits=2, aging=100.0) as queue:
        for key, priority in (("l1", "low"), ("m1", "medium"), ("h1", "high"),
                              ("h2", "high"), ("l2", "low"), ("m2", "medium")):
            queue.push_nowait(Job(key, starts.body(key, 1.0), Priority(priority)))
        await settle()
        # l1 and m1 took the free permits at once; then HIGH goes first.
        assert sorted(starts.at) == ["l1", "m1"]
        await clock.advance(1.0)
        assert sorted(starts.at) == ["h1", "h2", "l1", "m1"]
        await clock.advance(1.0)
        assert "m2" in starts.at and "l2" in starts.at
        assert sum(s.running for s in queue.stats()) <= 2
        await clock.advance(1.0)


async def test_low_jobs_are_served_within_aging_under_steady_high_load(
    clock: FakeClock,
) -> None:
    starts = Starts(clock)
    lanes = {
        Priority.HIGH: LaneConfig(capacity=50, permits=4),
        Priority.LOW: LaneConfig(capacity=50, permits=4),
    }
    aging, job_seconds = 10.0, 1.0
    peak = 0
    async with Queue(lanes, clock=clock, total_permits=4, aging=aging) as queue:

        def watch(event: object) -> None:
            nonlocal peak
            peak = max(peak, sum(s.running for s in queue.stats()))

        queue.subscribe(watch)
        n = 0

        def top_up() -> None:
            nonlocal n
            while queue.stats()[Priority.HIGH].queued < 8:
                n += 1
                queue.push_nowait(Job(f"h{n}", starts.body(f"h{n}", job_seconds), Priority.HIGH))

        top_up()
        await settle()
        pushed_at = {}
        for i in range(3):
            pushed_at[f"low{i}"] = clock.time() - T0
            queue.push_nowait(Job(f"low{i}", starts.body(f"low{i}", job_seconds), Priority.LOW))
            await clock.advance(0.25)
        for _ in range(200):
            top_up()
            await clock.advance(0.25)
        await queue.close(drain=False)
    for key, at in pushed_at.items():
        waited = starts.at[key] - at
        assert aging <= waited <= aging + job_seconds, (key, waited)
    assert peak <= 4


async def test_total_permits_shared_without_rates_every_lane_still_bounded(
    clock: FakeClock,
) -> None:
    gates: dict[str, asyncio.Future[str]] = {}
    running = 0
    peak = 0

    async def body(key: str) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            return await gates[key]
        finally:
            running -= 1

    lanes = {p: LaneConfig(capacity=10, permits=2) for p in Priority}
    async with Queue(lanes, clock=clock, total_permits=3) as queue:
        loop = asyncio.get_running_loop()
        for i in range(6):
            for priority in Priority:
                key = f"{priority}{i}"
                gates[key] = loop.create_future()
                queue.push_nowait(Job(key, functools.partial(body, key), priority))
        for _ in range(20):
            await settle()
            stats = queue.stats()
            assert sum(s.running for s in stats) <= 3
            assert all(s.running <= 2 for s in stats)
            open_gates = [k for k, g in gates.items() if not g.done()]
            if not open_gates:
                break
            for key in open_gates[:2]:
                gates[key].set_result(key)
        for gate in gates.values():
            if not gate.done():
                gate.set_result("late")
    assert peak == 3


async def test_cancel_and_close_while_jobs_wait_for_the_window(clock: FakeClock) -> None:
    starts = Starts(clock)
    lanes = {Priority.MEDIUM: LaneConfig(capacity=10, permits=5, rate=Rate(1, 60.0))}
    queue = Queue(lanes, clock=clock)
    async with asyncio.timeout(5):
        first = queue.push_nowait(Job("a", starts.body("a"))).handle  # type: ignore[union-attr]
        waiting = queue.push_nowait(Job("b", starts.body("b"))).handle  # type: ignore[union-attr]
        dropped = queue.push_nowait(Job("c", starts.body("c"))).handle  # type: ignore[union-attr]
        assert await first == Completed("ok")
        assert waiting.cancel() is True
        await clock.advance(60.0)  # b was cancelled: c takes the next start
        assert sorted(starts.at) == ["a", "c"]
        assert await dropped == Completed("ok")
        queue.push_nowait(Job("d", starts.body("d")))
        queue.push_nowait(Job("e", starts.body("e")))
        await settle()
        assert sorted(starts.at) == ["a", "c"]  # d and e wait for the window
        report = await queue.close(drain=False)
        assert queue.state("d") is None and queue.state("e") is None  # released, never ran
        assert "d" not in starts.at and report is not None
        await settle()
        assert clock.sleepers == 0  # the arbiter's timer is gone with the waiting jobs
