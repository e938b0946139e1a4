"""`SystemClock` and `FakeClock` (agentq.clock)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agentq.clock import Clock, FakeClock, SystemClock


def test_both_clocks_satisfy_the_protocol() -> None:
    assert isinstance(SystemClock(), Clock)
    assert isinstance(FakeClock(), Clock)
    assert repr(SystemClock()) == "SystemClock()"


async def test_the_system_clock_reads_the_wall_clock_and_sleeps_zero_at_once() -> None:
    clock = SystemClock()
    assert abs(clock.time() - time.time()) < 1
    await clock.sleep(0)
    await clock.sleep(-5)


async def test_fake_time_stands_still_until_advanced() -> None:
    clock = FakeClock(start=100.0)
    assert clock.time() == 100.0
    sleeper = asyncio.ensure_future(clock.sleep(10))
    await clock.wait_for_sleepers(1)
    assert clock.sleepers == 1 and clock.next_deadline == 110.0
    await clock.advance(9.5)
    assert not sleeper.done() and clock.time() == 109.5
    await clock.advance(0.5)
    assert sleeper.done() and clock.sleepers == 0 and clock.next_deadline is None


async def test_timers_fire_in_deadline_order_at_their_own_time() -> None:
    clock = FakeClock(start=0.0)
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        seen.append((name, clock.time()))

    tasks = [asyncio.ensure_future(sleeper(n, s)) for n, s in [("c", 3), ("a", 1), ("b", 2)]]
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(3)
        await clock.advance(10)
        await asyncio.gather(*tasks)
    assert seen == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.time() == 10.0


async def test_a_cancelled_sleep_leaves_nothing_behind() -> None:
    clock = FakeClock()
    sleeper = asyncio.ensure_future(clock.sleep(5))
    await clock.wait_for_sleepers(1)
    sleeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeper
    assert clock.sleepers == 0 and clock.next_deadline is None
    await clock.sleep(0)  # just yields
    assert "sleepers=0" in repr(clock)


async def test_the_fake_clock_cannot_go_backwards() -> None:
    with pytest.raises(ValueError, match="backwards"):
        await FakeClock().advance(-1)
