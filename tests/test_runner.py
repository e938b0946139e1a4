"""Running jobs: timeouts, retries with backoff, threads, cancellation (agentq._runner)."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading

import pytest
from queue_helpers import BOUND, Gate, Recorder, settle, until

from agentq.clock import FakeClock
from agentq.errors import JobFailed, QueueFull
from agentq.jobs import InFlight, Job, JobEventKind, JobHandle, Queued
from agentq.lanes import LaneConfig, Priority
from agentq.outcomes import Completed, Failed, FailureReason, Pending
from agentq.queue import Queue
from agentq.retry import Backoff, RetryPolicy

K = JobEventKind


def handle_of(accepted: object) -> JobHandle:
    assert isinstance(accepted, Queued | InFlight), accepted
    return accepted.handle


async def wait_thread_event(event: threading.Event) -> None:
    """Wait, off the loop, until a worker thread sets `event`."""
    async with asyncio.timeout(BOUND):
        assert await asyncio.to_thread(event.wait, BOUND)


# ------------------------------------------------------------------ timeouts and retries


async def test_a_timeout_cancels_the_body_and_fails_with_reason_timeout(clock: FakeClock) -> None:
    cancelled = []

    async def slow() -> None:
        try:
            await clock.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async with Queue(clock=clock) as queue:
        handle = handle_of(await queue.push(Job("k", slow, timeout=2.5)))
        async with asyncio.timeout(BOUND):
            await clock.wait_for_sleepers(2)  # the body and its timeout
            await clock.advance(2.5)
            outcome = await handle
    assert isinstance(outcome, Failed) and outcome.reason is FailureReason.TIMEOUT
    assert isinstance(outcome.exception, TimeoutError)
    assert "2.5 s" in outcome.error.message
    assert cancelled == [True]


async def test_retries_follow_the_policy_with_backoff_on_the_clock(clock: FakeClock) -> None:
    attempts = []

    async def flaky() -> str:
        attempts.append(clock.time())
        if len(attempts) < 3:
            raise ConnectionError(f"attempt {len(attempts)}")
        return "ok"

    policy = RetryPolicy(max_attempts=3, backoff=Backoff.exponential(5, 60))
    async with Queue(clock=clock) as queue:
        log = Recorder(queue)
        waiter = asyncio.ensure_future(queue.push_and_wait(Job("k", flaky, retry=policy)))
        async with asyncio.timeout(BOUND):
            await clock.wait_for_sleepers(1)
            assert queue.state("k") is not None and len(attempts) == 1
            await clock.advance(5)
            await clock.wait_for_sleepers(1)
            await clock.advance(10)
            assert await waiter == "ok"
    assert [b - a for a, b in itertools.pairwise(attempts)] == [5, 10]
    assert log.kinds("k") == [
        K.QUEUED, K.STARTED, K.RETRY, K.STARTED, K.RETRY, K.STARTED, K.COMPLETED
    ]
    retry = next(e for e in log.events if e.kind is K.RETRY)
    assert retry.attempt == 1 and isinstance(retry.outcome, Failed)


async def test_exhausted_retries_fail_with_the_last_error(clock: FakeClock) -> None:
    calls = 0

    async def always() -> None:
        nonlocal calls
        calls += 1
        raise ValueError(f"failure {calls}")

    policy = RetryPolicy(max_attempts=4, backoff=Backoff.fixed(0))
    async with Queue(clock=clock) as queue:
        log = Recorder(queue)
        with pytest.raises(JobFailed) as caught:
            await queue.push_and_wait(Job("k", always, retry=policy))
    assert calls == 4
    assert str(caught.value.__cause__) == "failure 4"
    assert log.terminal("k")[0].attempt == 4


async def test_a_timeout_counts_as_a_failed_attempt_toward_the_policy(clock: FakeClock) -> None:
    calls = 0

    async def first_hangs() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            await clock.sleep(3600)
        return "second attempt"

    policy = RetryPolicy(max_attempts=2, backoff=Backoff.fixed(1))
    async with Queue(clock=clock) as queue:
        waiter = asyncio.ensure_future(
            queue.push_and_wait(Job("k", first_hangs, timeout=1, retry=policy))
        )
        async with asyncio.timeout(BOUND):
            await clock.wait_for_sleepers(2)
            await clock.advance(1)  # timeout
            await clock.wait_for_sleepers(1)
            await clock.advance(1)  # backoff
            assert await waiter == "second attempt"


async def test_bh26_a_timed_out_thread_never_overlaps_the_next_attempt(clock: FakeClock) -> None:
    """BH-26: a thread that outlives its timeout delays the retry and keeps its permit."""
    log: list[tuple[str, int]] = []
    started = [threading.Event() for _ in range(3)]
    release = [threading.Event() for _ in range(3)]

    def blocking() -> str:
        n = sum(1 for kind, _ in log if kind == "start")
        log.append(("start", n))
        started[n].set()
        release[n].wait(BOUND)
        log.append(("end", n))
        return f"attempt {n + 1}"

    policy = RetryPolicy(max_attempts=3, backoff=Backoff.fixed(0.1))
    lanes = {Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}
    async with Queue(lanes, clock=clock) as queue:
        events = Recorder(queue)
        handle = handle_of(await queue.push(Job("k", blocking, timeout=0.5, retry=policy)))
        for n in range(3):
            await wait_thread_event(started[n])
            await clock.wait_for_sleepers(1)  # the timeout
            await clock.advance(0.5)
            failures = [e for e in events.events if e.kind in (K.RETRY, K.FAILED)]
            assert len(failures) == n + 1  # the timeout is recorded at once
            assert failures[-1].outcome.reason is FailureReason.TIMEOUT  # type: ignore[union-attr]
            await clock.advance(5)
            await settle()
            assert sum(1 for kind, _ in log if kind == "start") == n + 1  # no new attempt yet
            assert queue.stats()[Priority.MEDIUM].running == 1  # the permit is still held
            with pytest.raises(QueueFull):
                queue.push_nowait(Job("other", blocking))
            release[n].set()
            if n < 2:
                await clock.wait_for_sleepers(1)  # the backoff, after the thread returned
                await clock.advance(0.1)
        assert handle.outcome is not None and handle.outcome.reason is FailureReason.TIMEOUT  # type: ignore[union-attr]
        async with asyncio.timeout(BOUND):
            await handle.stopped()
        assert queue.stats()[Priority.MEDIUM].running == 0
    assert log == [("start", 0), ("end", 0), ("start", 1), ("end", 1), ("start", 2), ("end", 2)]


async def test_an_async_body_that_swallows_cancellation_keeps_its_permit(
    clock: FakeClock,
) -> None:
    gate = asyncio.Event()

    async def stubborn() -> str:
        try:
            await clock.sleep(3600)
        except asyncio.CancelledError:
            await gate.wait()  # ignores the cancellation and goes on
        return "too late"

    async with Queue(clock=clock) as queue:
        handle = handle_of(await queue.push(Job("k", stubborn, timeout=1)))
        await clock.wait_for_sleepers(2)
        await clock.advance(1)
        assert isinstance(handle.outcome, Failed)  # decided at once
        assert handle.outcome.reason is FailureReason.TIMEOUT
        stopped = asyncio.ensure_future(handle.stopped())
        await settle()
        assert not stopped.done()
        assert queue.stats()[Priority.MEDIUM].running == 1
        gate.set()
        async with asyncio.timeout(BOUND):
            await stopped
        assert queue.stats()[Priority.MEDIUM].running == 0
        assert isinstance(handle.outcome, Failed)  # the late output is discarded


# ------------------------------------------------------------------ JobHandle.cancel


async def test_cancelling_a_waiting_job_means_it_never_runs() -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=1, permits=1)}
    async with Queue(lanes) as queue:
        first, second = Gate(), Gate()
        await queue.push(Job("a", first))
        handle = handle_of(await queue.push(Job("b", second)))
        blocked = asyncio.ensure_future(queue.push(Job("c", first)))
        await settle()
        assert queue.state("c") == Pending() and not blocked.done()
        assert handle.cancel() is True
        assert handle.cancel() is False
        assert isinstance(handle.outcome, Failed)
        assert handle.outcome.reason is FailureReason.CANCELLED
        assert queue.state("b") == handle.outcome
        async with asyncio.timeout(BOUND):
            await blocked  # the cancelled job's room went to the waiting push
            first.release.set()
            await until(lambda: queue.stats()[Priority.MEDIUM].running == 0)
        assert second.calls == 0


async def test_cancelling_a_running_job_cancels_its_body() -> None:
    async with Queue() as queue:
        gate = Gate()
        handle = handle_of(await queue.push(Job("k", gate)))
        await gate.started.wait()
        assert handle.cancel() is True
        async with asyncio.timeout(BOUND):
            await handle.stopped()
        assert gate.running == 0
        assert isinstance(await handle, Failed)
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("unrelated-then-k", boom_after_cancel))
        # the key failed: it may run again
        gate2 = Gate("again")
        gate2.release.set()
        assert await queue.push_and_wait(Job("k", gate2)) == "again"


async def boom_after_cancel() -> None:
    raise RuntimeError("the lane still works")


async def test_cancelling_a_finished_job_changes_nothing() -> None:
    async with Queue() as queue:
        handle = handle_of(await queue.push(Job("k", Gate.__call__.__get__(_released()))))
        await handle
        assert handle.cancel() is False
        assert handle.outcome == Completed("done")


def _released() -> Gate:
    gate = Gate()
    gate.release.set()
    return gate


async def test_cancelling_during_backoff_stops_the_retries(clock: FakeClock) -> None:
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("no")

    policy = RetryPolicy(max_attempts=5, backoff=Backoff.fixed(30))
    async with Queue(clock=clock) as queue:
        handle = handle_of(await queue.push(Job("k", fails, retry=policy)))
        await clock.wait_for_sleepers(1)
        assert handle.cancel() is True
        async with asyncio.timeout(BOUND):
            await handle.stopped()
        await clock.advance(100)
        assert calls == 1


async def test_cancelling_a_running_thread_job_keeps_the_permit_until_it_returns() -> None:
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        release.wait(BOUND)
        return "ignored"

    async with Queue() as queue:
        handle = handle_of(await queue.push(Job("k", blocking)))
        await wait_thread_event(started)
        assert handle.cancel() is True
        assert isinstance(handle.outcome, Failed)
        assert queue.stats()[Priority.MEDIUM].running == 1
        release.set()
        async with asyncio.timeout(BOUND):
            await handle.stopped()
        assert queue.stats()[Priority.MEDIUM].running == 0
        assert isinstance(handle.outcome, Failed)


async def test_bh12_cancel_racing_completion_leaves_one_consistent_terminal_state() -> None:
    """BH-12: 1000 trials of cancel() at a random point close to the job's return."""
    rng = random.Random(12)
    wins = {True: 0, False: 0}
    async with Queue() as queue:
        log = Recorder(queue)
        for trial in range(1000):
            key = f"trial-{trial}"
            spins = rng.randint(0, 6)

            async def body(spins: int = spins, key: str = key) -> str:
                for _ in range(spins):
                    await asyncio.sleep(0)
                return key

            job = Job(key, body)
            handle = handle_of(await queue.push(job))
            joiner = asyncio.ensure_future(queue.push_and_wait(job))
            await asyncio.sleep(0)  # the joiner joins; the job may have started
            for _ in range(rng.randint(0, 7)):
                await asyncio.sleep(0)
            won = handle.cancel()
            wins[won] += 1
            outcome = await handle
            try:
                joined: object = Completed(await joiner)
            except JobFailed as exc:
                joined = exc.outcome
            assert outcome == joined == queue.state(key)
            if won:
                assert isinstance(outcome, Failed) and outcome.reason is FailureReason.CANCELLED
            else:
                assert outcome == Completed(key)
            terminal = log.terminal(key)
            assert len(terminal) == 1 and terminal[0].outcome == outcome
            await handle.stopped()
            assert handle.outcome == outcome  # never changes afterwards
    assert wins[True] > 100 and wins[False] > 100  # both sides of the race were exercised
