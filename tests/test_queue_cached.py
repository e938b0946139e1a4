"""`Queue.cached`: a completed key answered by key alone, with no `Job` built."""

from __future__ import annotations

import functools

import pytest
from queue_helpers import Gate, Recorder

from agentq.clock import FakeClock
from agentq.errors import JobFailed
from agentq.outcomes import Completed
from agentq.queue import Job, JobEventKind, LaneConfig, Priority, Queue, Queued


async def value(x: object) -> object:
    return x


async def boom() -> None:
    raise ValueError("boom")


async def test_a_completed_key_is_answered_and_counted_as_a_cache_hit() -> None:
    async with Queue() as queue:
        log = Recorder(queue)
        assert queue.cached("k") is None  # unknown: the memo pushes
        assert await queue.push_and_wait(Job("k", functools.partial(value, 42))) == 42
        assert queue.cached("k") == Completed(42)
        assert queue.cached("k") == Completed(42)
        stats = queue.stats().lanes[1]
        assert stats.priority is Priority.MEDIUM and stats.cache_hits == 2
        assert log.kinds("k") == [JobEventKind.QUEUED, JobEventKind.STARTED,
                                  JobEventKind.COMPLETED, JobEventKind.CACHED,
                                  JobEventKind.CACHED]


async def test_pending_running_failed_and_forgotten_keys_are_not_answered() -> None:
    async with Queue({Priority.HIGH: LaneConfig(capacity=1, permits=1)}) as queue:
        gate, waiting = Gate(1), Gate(2)
        running = await queue.push(Job("running", gate, Priority.HIGH))
        pending = await queue.push(Job("pending", waiting, Priority.HIGH))
        await gate.started.wait()
        assert queue.cached("running") is None and queue.cached("pending") is None
        gate.release.set()
        waiting.release.set()
        assert isinstance(running, Queued) and isinstance(pending, Queued)
        assert await pending.handle == Completed(2)
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("failed", boom))
        assert queue.cached("failed") is None
        assert queue.cached("pending") == Completed(2)
        assert await queue.forget("pending")
        assert queue.cached("pending") is None
        assert queue.stats().lanes[0].cache_hits == 1  # counted in the lane that ran it


async def test_an_expired_key_is_not_answered(clock: FakeClock) -> None:
    async with Queue(key_ttl=10, clock=clock) as queue:
        await queue.push_and_wait(Job("k", functools.partial(value, 1)))
        assert queue.cached("k") == Completed(1)
        await clock.advance(10)
        assert queue.cached("k") is None
        assert queue.state("k") is None


async def test_a_key_that_is_not_a_str_is_refused() -> None:
    async with Queue() as queue:
        with pytest.raises(TypeError, match="key"):
            queue.cached(42)  # type: ignore[arg-type]
        assert queue.cached("") is None  # a str that can be no key is simply not known
