"""Time as an injectable dependency.

Everything in agentq that reads the time or waits for it (backoff, job and step timeouts,
leases, key expiry) goes through a `Clock`. Production code uses `SystemClock`; tests use
`FakeClock`, whose time moves only when the test says so, so that waits of minutes are exact
and take no real time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock", "unix_seconds"]


def unix_seconds(when: float | datetime, name: str) -> float:
    """A point in time as Unix seconds: `when` given as Unix seconds or an aware `datetime`.

    Args:
        when: Unix seconds (an int or float, finite) or a timezone-aware `datetime`.
        name: What the value is called in error messages (e.g. ``"run_at"``).

    Returns:
        Seconds since the Unix epoch (UTC), a float.

    Raises:
        ValueError: A naive `datetime` (its zone would be a guess), or a number that is not
            finite.
        TypeError: Neither a number nor a `datetime` (a bool is refused too).
    """
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                f"{name} must be an aware datetime (with a tzinfo, e.g. "
                f"datetime.now(timezone.utc)) or Unix seconds; got the naive {when!r}"
            )
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float):
        raise TypeError(f"{name} must be Unix seconds or an aware datetime, got {when!r:.80}")
    if not math.isfinite(when):
        raise ValueError(f"{name} must be a finite number of Unix seconds, got {when!r}")
    return float(when)


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time and of waits measured against it."""

    def time(self) -> float:
        """Return the current time in seconds since the Unix epoch (UTC)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time; zero or negative just yields to the loop.

        Cancellation-safe: a cancelled sleep leaves nothing behind.
        """
        ...


class SystemClock:
    """The real clock: `time.time()` and `asyncio.sleep`."""

    def time(self) -> float:
        """Return `time.time()`: seconds since the Unix epoch."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` real seconds on the running loop."""
        await asyncio.sleep(max(seconds, 0.0))

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock for tests: time stands still until `advance` moves it.

    `sleep` registers a timer and waits; `advance` moves the time forward, firing the timers
    that fall due in deadline order and letting the woken tasks run between them.

    Must be used from one event loop (the one the sleepers run on).

    Args:
        start: Initial time in seconds since the Unix epoch.

    Example:
        >>> clock = FakeClock()
        >>> async def scenario():
        ...     waiter = asyncio.ensure_future(clock.sleep(60))
        ...     await clock.advance(60)
        ...     return waiter.done()
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:
        self._now = float(start)
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._changed: asyncio.Event | None = None

    def time(self) -> float:
        """Return the fake time in seconds since the Unix epoch."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Wait until `advance` has moved the time `seconds` forward."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self._now + seconds, next(self._seq), fut))
        self._notify()
        await fut

    @property
    def sleepers(self) -> int:
        """Number of pending (not cancelled) sleeps."""
        return sum(1 for _, _, fut in self._timers if not fut.done())

    @property
    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or None when nobody sleeps."""
        self._drop_cancelled()
        return self._timers[0][0] if self._timers else None

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait (in real time, without moving the clock) until `count` tasks sleep on it.

        Bound it with `asyncio.timeout` in tests.
        """
        while self.sleepers < count:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()
            self._changed = None

    async def advance(self, seconds: float, *, settle: int = 20) -> None:
        """Move the time forward by `seconds`, firing due timers in deadline order.

        Args:
            seconds: How far to move, in seconds (>= 0).
            settle: Loop iterations granted to woken tasks after each timer fires.

        Raises:
            ValueError: `seconds` is negative.
        """
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards: seconds={seconds!r}")
        target = self._now + seconds
        await self._settle(settle)
        while True:
            self._drop_cancelled()
            if not self._timers or self._timers[0][0] > target:
                break
            deadline, _, fut = heapq.heappop(self._timers)
            self._now = max(self._now, deadline)
            fut.set_result(None)
            await self._settle(settle)
        self._now = target
        await self._settle(settle)

    @contextlib.asynccontextmanager
    async def autojump(self, *, real_delay: float = 0.0005) -> AsyncIterator[FakeClock]:
        """Let time jump to the next deadline whenever the loop is otherwise idle.

        Inside the block, a helper task repeatedly lets the loop run (for `real_delay` real
        seconds, so work in threads can finish), then advances the clock to the earliest
        pending deadline. Code under test then sees minutes pass in milliseconds, with
        deadlines firing in order. Use `advance` instead when a test needs to choose exactly
        when time moves.

        Args:
            real_delay: Real seconds to wait between jumps.
        """

        async def jumper() -> None:
            while True:
                await asyncio.sleep(real_delay)
                await self._settle(20)
                deadline = self.next_deadline
                if deadline is None:
                    await self.wait_for_sleepers(1)
                    continue
                await self.advance(max(deadline - self._now, 0.0))

        task = asyncio.get_running_loop().create_task(jumper(), name="agentq.FakeClock.autojump")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _drop_cancelled(self) -> None:
        while self._timers and self._timers[0][2].done():
            heapq.heappop(self._timers)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    @staticmethod
    async def _settle(rounds: int) -> None:
        for _ in range(rounds):
            await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"FakeClock(time={self._now!r}, sleepers={self.sleepers})"
