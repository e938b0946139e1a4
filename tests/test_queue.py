"""The queue: key semantics, lanes and backpressure, isolation, cancel safety, close."""

from __future__ import annotations

import asyncio
import functools
import gc
import threading

import pytest
from queue_helpers import BOUND, Gate, Recorder, settle, until

from agentq.clock import FakeClock
from agentq.errors import (
    DeadlockError,
    InvalidKeyError,
    JobFailed,
    JobLost,
    QueueClosed,
    QueueFull,
    WrongLoopError,
)
from agentq.outcomes import Completed, Failed, FailureReason, Pending, Processing
from agentq.queue.handles import Cached, InFlight, JobHandle, Queued
from agentq.queue.jobs import Job, JobEventKind
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue
from agentq.queue.shutdown import CloseReport

K = JobEventKind


async def constant(value: object = "out") -> object:
    return value


async def boom() -> None:
    raise ValueError("boom")


def handle_of(accepted: object) -> JobHandle:
    assert isinstance(accepted, Queued | InFlight), accepted
    return accepted.handle


# ------------------------------------------------------------------ key semantics


async def test_push_runs_the_job_and_the_handle_yields_completed() -> None:
    async with Queue() as queue:
        handle = handle_of(await queue.push(Job("k", functools.partial(constant, 42))))
        assert handle.key == "k"
        assert await handle == Completed(42)
        assert handle.done() and handle.outcome == Completed(42)
        assert queue.state("k") == Completed(42)


async def test_bh01_concurrent_pushes_of_one_key_run_once_across_lanes(clock: FakeClock) -> None:
    """BH-01: 50 concurrent push_and_wait of k1 (half HIGH, half LOW) run fn once."""
    queue = Queue(clock=clock)
    log = Recorder(queue)
    runs = 0

    async def fn() -> str:
        nonlocal runs
        runs += 1
        await clock.sleep(0.2)
        return f"result-{runs}"

    priorities = [Priority.HIGH if i % 2 else Priority.LOW for i in range(50)]
    calls = asyncio.gather(*(queue.push_and_wait(Job("k1", fn, p)) for p in priorities))
    async with asyncio.timeout(BOUND):
        await clock.wait_for_sleepers(1)
        await clock.advance(0.2)
        outputs = await calls
    assert runs == 1
    assert outputs == ["result-1"] * 50
    assert log.kinds("k1").count(K.STARTED) == 1
    assert [e.kind for e in log.terminal("k1")] == [K.COMPLETED]
    stats = queue.stats()
    assert stats[Priority.HIGH].joins + stats[Priority.LOW].joins == 49
    assert stats[Priority.LOW].completed + stats[Priority.HIGH].completed == 1
    await queue.close()


async def test_completed_key_is_cached_and_needs_no_capacity() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}) as queue:
        assert await queue.push_and_wait(Job("done", functools.partial(constant, 7))) == 7
        gate = Gate()
        await queue.push(Job("busy", gate))  # the lane is now full
        with pytest.raises(QueueFull):
            queue.push_nowait(Job("other", gate))
        again = Job("done", functools.partial(constant, 7))
        assert queue.push_nowait(again) == Cached(7)
        assert await queue.push(again) == Cached(7)
        assert await queue.push_and_wait(again) == 7
        assert queue.stats()[Priority.MEDIUM].cache_hits == 3
        gate.release.set()


async def test_pending_or_running_key_is_joined_without_capacity() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=1, permits=1)}) as queue:
        first, second = Gate("one"), Gate("two")
        h1 = handle_of(await queue.push(Job("running", first)))
        h2 = handle_of(await queue.push(Job("waiting", second)))  # lane full now
        await first.started.wait()
        assert queue.state("running") == Processing()
        assert queue.state("waiting") == Pending()
        joined_running = queue.push_nowait(Job("running", first))
        joined_waiting = await queue.push(Job("waiting", second, Priority.HIGH))
        assert isinstance(joined_running, InFlight) and isinstance(joined_waiting, InFlight)
        first.release.set()
        second.release.set()
        async with asyncio.timeout(BOUND):
            assert await joined_running.handle == await h1 == Completed("one")
            assert await joined_waiting.handle == await h2 == Completed("two")
        assert first.calls == second.calls == 1


async def test_failed_key_runs_again_when_pushed_again() -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("first time")
        return "second time"

    async with Queue() as queue:
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("k", flaky))
        assert isinstance(queue.state("k"), Failed)
        assert await queue.push_and_wait(Job("k", flaky)) == "second time"
        assert attempts == 2


async def test_a_failing_jobs_joiners_see_the_failure_with_error_info() -> None:
    gate = asyncio.Event()

    async def fails_later() -> None:
        await gate.wait()
        raise ValueError("bad input 42")

    async with Queue() as queue:
        owner = asyncio.ensure_future(queue.push_and_wait(Job("k", fails_later)))
        await settle()
        joiner = asyncio.ensure_future(queue.push_and_wait(Job("k", fails_later)))
        handle = handle_of(await queue.push(Job("k", fails_later)))
        gate.set()
        for call in (owner, joiner):
            with pytest.raises(JobFailed) as caught:
                await call
            assert isinstance(caught.value.__cause__, ValueError)
        outcome = await handle
        assert isinstance(outcome, Failed) and outcome.reason is FailureReason.ERROR
        assert outcome.error.type == "ValueError"
        assert outcome.error.message == "bad input 42"
        assert "fails_later" in outcome.error.traceback
        assert "raise ValueError" in outcome.error.traceback


async def test_a_raising_job_does_not_stop_its_lane_or_disturb_others() -> None:
    async with Queue({Priority.LOW: LaneConfig(capacity=10, permits=1)}) as queue:
        bad = handle_of(await queue.push(Job("bad", boom, Priority.LOW)))
        good = handle_of(await queue.push(Job("good", constant, Priority.LOW)))
        other = handle_of(await queue.push(Job("other", constant, Priority.HIGH)))
        async with asyncio.timeout(BOUND):
            assert isinstance(await bad, Failed)
            assert await good == Completed("out")
            assert await other == Completed("out")
        lane = queue.stats()[Priority.LOW]
        assert (lane.completed, lane.failed) == (1, 1)


async def test_a_handle_awaited_after_the_job_finished_resolves_at_once() -> None:
    async with Queue() as queue:
        handle = handle_of(await queue.push(Job("k", constant)))
        await handle
        step = handle.__await__()
        with pytest.raises(StopIteration) as stop:
            step.send(None)  # no suspension at all
        assert stop.value.value == Completed("out")


async def test_dropping_a_handle_does_not_stop_the_job() -> None:
    gate = Gate()
    async with Queue() as queue:
        await queue.push(Job("k", gate))
        gc.collect()
        await gate.started.wait()
        gate.release.set()
        await until(lambda: queue.state("k") == Completed("done"))


async def test_cancelling_a_task_that_awaits_a_handle_does_not_stop_the_job() -> None:
    gate = Gate()
    async with Queue() as queue:
        handle = handle_of(await queue.push(Job("k", gate)))
        waiter = asyncio.ensure_future(_await(handle))
        await gate.started.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.release.set()
        async with asyncio.timeout(BOUND):
            assert await handle == Completed("done")


async def _await(handle: JobHandle) -> object:
    return await handle


async def test_plain_callables_run_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("t", threading.get_ident)) != loop_thread


async def test_an_awaitable_returned_by_a_plain_callable_is_awaited() -> None:
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("l", lambda: constant("from lambda"))) == (
            "from lambda"
        )


# ------------------------------------------------------------------ lanes and backpressure


async def test_a_lane_admits_exactly_permits_plus_capacity() -> None:
    async with Queue({Priority.HIGH: LaneConfig(capacity=3, permits=2)}) as queue:
        gate = Gate()
        admitted = 0
        with pytest.raises(QueueFull):
            for i in range(100):
                queue.push_nowait(Job(f"k{i}", gate, Priority.HIGH))
                admitted += 1
        assert admitted == 2 + 3
        assert queue.state("k5") is None  # the refused job left nothing behind
        await until(lambda: gate.running == 2)
        lane = queue.stats()[Priority.HIGH]
        assert (lane.running, lane.queued) == (2, 3)
        gate.release.set()


async def test_push_waits_for_room_then_is_admitted() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}) as queue:
        gate = Gate()
        await queue.push(Job("a", gate))
        blocked = asyncio.ensure_future(queue.push(Job("b", gate)))
        await settle()
        assert not blocked.done()
        assert queue.state("b") == Pending()
        gate.release.set()
        async with asyncio.timeout(BOUND):
            accepted = await blocked
        assert await handle_of(accepted) == Completed("done")


async def test_a_saturated_lane_does_not_starve_another() -> None:
    lanes = {Priority.LOW: LaneConfig(capacity=5, permits=1)}
    async with Queue(lanes) as queue:
        gate = Gate()
        for i in range(6):
            queue.push_nowait(Job(f"low{i}", gate, Priority.LOW))
        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("high", constant, Priority.HIGH)) == "out"
            assert await queue.push_and_wait(Job("medium", constant)) == "out"
        gate.release.set()


async def test_peak_running_never_exceeds_permits_under_load() -> None:
    permits = {Priority.HIGH: 3, Priority.MEDIUM: 2, Priority.LOW: 1}
    lanes = {p: LaneConfig(capacity=8, permits=n) for p, n in permits.items()}
    running = dict.fromkeys(permits, 0)
    peak = dict.fromkeys(permits, 0)
    stats_peak = dict.fromkeys(permits, 0)

    async with Queue(lanes) as queue:

        def body(priority: Priority, spins: int) -> Job:
            async def fn() -> int:
                running[priority] += 1
                peak[priority] = max(peak[priority], running[priority])
                for lane in queue.stats():
                    stats_peak[lane.priority] = max(stats_peak[lane.priority], lane.running)
                for _ in range(spins):
                    await asyncio.sleep(0)
                running[priority] -= 1
                return spins

            return Job(f"{priority}-{spins}-{id(fn)}", fn, priority)

        jobs = [body(p, (i * 7) % 5) for i in range(120) for p in permits]
        async with asyncio.timeout(BOUND):
            results = await asyncio.gather(*(queue.push_and_wait(j) for j in jobs))
    assert len(results) == 360
    assert peak == permits
    assert stats_peak == permits


# ------------------------------------------------------------------ cancel safety


async def test_a_blocked_push_cancelled_by_a_timeout_releases_its_key() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}) as queue:
        gate = Gate()
        await queue.push(Job("busy", gate))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await queue.push(Job("k", gate))
        assert queue.state("k") is None
        gate.release.set()
        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("k", constant)) == "out"  # free to use


async def test_a_cancelled_push_keeps_the_keys_earlier_failed_state() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}) as queue:
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("k", boom))
        failed = queue.state("k")
        assert isinstance(failed, Failed)
        gate = Gate()
        await queue.push(Job("busy", gate))
        blocked = asyncio.ensure_future(queue.push(Job("k", boom)))
        await settle()
        assert queue.state("k") == Pending()
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert queue.state("k") == failed
        gate.release.set()


async def test_joiners_of_an_abandoned_push_get_job_lost() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}) as queue:
        log = Recorder(queue)
        gate = Gate()
        await queue.push(Job("busy", gate))
        owner = asyncio.ensure_future(queue.push_and_wait(Job("k", constant)))
        await settle()
        joiner = asyncio.ensure_future(queue.push_and_wait(Job("k", constant)))
        handle = handle_of(await queue.push(Job("k", constant)))
        await settle()
        owner.cancel()
        async with asyncio.timeout(BOUND):
            with pytest.raises(JobLost) as caught:
                await joiner
            outcome = await handle
        assert isinstance(outcome, Failed) and isinstance(outcome.exception, JobLost)
        message = "job 'k' was abandoned before it ran: its push was cancelled"
        assert outcome.error.message == str(caught.value) == message  # said once, not twice
        assert [e.kind for e in log.terminal("k")] == [K.LOST]
        assert queue.state("k") is None
        gate.release.set()


async def test_cancelling_push_and_wait_before_dispatch_releases_the_key() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}) as queue:
        gate = Gate()
        await queue.push(Job("busy", gate))
        ran = []
        waiter = asyncio.ensure_future(queue.push_and_wait(Job("k", lambda: ran.append(1))))
        await settle()
        assert queue.state("k") == Pending()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert queue.state("k") is None
        gate.release.set()
        await until(lambda: queue.stats()[Priority.MEDIUM].running == 0)
        assert ran == []
        assert queue.stats()[Priority.MEDIUM].queued == 0


async def test_a_dispatched_job_runs_to_completion_when_its_caller_is_cancelled() -> None:
    async with Queue() as queue:
        gate = Gate()
        waiter = asyncio.ensure_future(queue.push_and_wait(Job("k", gate)))
        await gate.started.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert queue.state("k") == Processing()
        gate.release.set()
        await until(lambda: queue.state("k") == Completed("done"))


# ------------------------------------------------------------------ validation and loops


@pytest.mark.parametrize(
    "key",
    ["", "\ud83d", "x" * 1025, "é" * 513, "a" * 1_000_000],
    ids=["empty", "lone-surrogate", "1025-bytes", "1026-utf8-bytes", "1MB"],
)
async def test_bh15_invalid_keys_are_rejected_before_anything_is_admitted(key: str) -> None:
    """BH-15: empty, non-UTF-8 and over-long keys raise InvalidKeyError naming the problem."""
    async with Queue() as queue:
        with pytest.raises(InvalidKeyError):
            await queue.push(Job(key, constant))
        with pytest.raises(InvalidKeyError):
            queue.state(key)
        assert queue.stats()[Priority.MEDIUM].queued == 0
        assert not queue._keys


async def test_bh15_unusual_valid_keys_dedupe_exactly() -> None:
    """BH-15: NFC vs NFD, NUL, emoji and trailing spaces are distinct, byte-exact keys."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    keys = [nfc, nfd, "a\x00b", "\N{SNAKE}", "k", "k ", "x" * 1024]
    async with Queue() as queue:
        for key in keys:
            assert await queue.push_and_wait(Job(key, functools.partial(constant, key))) == key
        for key in keys:
            assert queue.state(key) == Completed(key)
            assert await queue.push(Job(key, functools.partial(constant, key))) == Cached(key)
        assert sum(lane.completed for lane in queue.stats()) == len(keys)


async def test_push_rejects_what_is_not_a_job() -> None:
    async with Queue() as queue:
        with pytest.raises(TypeError, match="expected a Job"):
            await queue.push("k")  # type: ignore[arg-type]


def test_the_queue_starts_lazily_and_belongs_to_its_first_loop() -> None:
    queue = Queue()
    assert "open" in repr(queue)

    async def first() -> object:
        return await queue.push_and_wait(Job("k", constant))

    async def second() -> object:
        return await queue.push_and_wait(Job("k2", constant))

    assert asyncio.run(first()) == "out"
    with pytest.raises(WrongLoopError, match="another event loop"):
        asyncio.run(second())


async def test_cancelled_error_is_never_swallowed_or_wrapped() -> None:
    async with Queue() as queue:
        gate = Gate()
        waiter = asyncio.ensure_future(queue.push_and_wait(Job("k", gate)))
        await gate.started.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.release.set()


# ------------------------------------------------------------------ close


async def test_close_with_drain_finishes_admitted_jobs_and_refuses_new_ones() -> None:
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)})
    gate = Gate()
    handles = [handle_of(await queue.push(Job(f"k{i}", gate))) for i in range(3)]
    closing = asyncio.ensure_future(queue.close())
    await settle()
    with pytest.raises(QueueClosed):
        await queue.push(Job("late", constant))
    with pytest.raises(QueueClosed):
        await queue.push_and_wait(Job("late", constant))
    gate.release.set()
    async with asyncio.timeout(BOUND):
        report = await closing
    assert report.clean and report.abandoned == () and not report.already_closed
    assert all(handle.outcome == Completed("done") for handle in handles)
    assert await queue.close() == CloseReport(already_closed=True)


async def test_close_without_drain_drops_waiting_jobs_and_cancels_running_ones() -> None:
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)})
    log = Recorder(queue)
    gate = Gate()
    running = handle_of(await queue.push(Job("running", gate)))
    waiting = handle_of(await queue.push(Job("waiting", gate)))
    await gate.started.wait()
    async with asyncio.timeout(BOUND):
        report = await queue.close(drain=False)
    assert report.dropped == ("waiting",)
    assert report.cancelled == ("running",)
    assert report.unstopped == ()
    assert report.abandoned == ("waiting", "running")
    assert isinstance(waiting.outcome, Failed) and isinstance(waiting.outcome.exception, JobLost)
    assert isinstance(running.outcome, Failed)
    assert running.outcome.reason is FailureReason.CANCELLED
    assert gate.calls == 1
    assert [e.kind for e in log.terminal("waiting")] == [K.LOST]
    assert [e.kind for e in log.terminal("running")] == [K.FAILED]


async def test_close_timeout_cancels_what_is_left_at_the_deadline(clock: FakeClock) -> None:
    queue = Queue(clock=clock)
    gate = Gate()
    handle = handle_of(await queue.push(Job("slow", gate)))
    await gate.started.wait()
    closing = asyncio.ensure_future(queue.close(timeout=10))
    async with asyncio.timeout(BOUND):
        await clock.wait_for_sleepers(1)
        await clock.advance(9)
        assert not closing.done()
        await clock.advance(1)
        report = await closing
    assert report.cancelled == ("slow",)
    assert isinstance(handle.outcome, Failed)


async def test_close_refuses_pushes_waiting_for_room() -> None:
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=0, permits=1)})
    gate = Gate()
    await queue.push(Job("busy", gate))
    blocked = asyncio.ensure_future(queue.push(Job("blocked", gate)))
    await settle()
    closing = asyncio.ensure_future(queue.close())
    with pytest.raises(QueueClosed):
        await blocked
    assert queue.state("blocked") is None
    gate.release.set()
    async with asyncio.timeout(BOUND):
        assert (await closing).clean


async def test_close_from_inside_a_job_raises_instead_of_waiting_for_itself() -> None:
    async with Queue() as queue:

        async def closes() -> str:
            try:
                await queue.close()
            except DeadlockError as exc:
                return str(exc)
            return "closed"

        async with asyncio.timeout(BOUND):
            message = await queue.push_and_wait(Job("k", closes))
        assert "would wait for job 'k' itself" in message
        assert await queue.push_and_wait(Job("after", constant)) == "out"  # still open


async def test_close_from_a_thread_job_raises_instead_of_waiting_for_itself() -> None:
    loop = asyncio.get_running_loop()
    async with Queue() as queue:

        def closes() -> str:
            future = asyncio.run_coroutine_threadsafe(queue.close(), loop)
            try:
                future.result(BOUND)
            except DeadlockError:
                return "refused"
            return "closed"

        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("k", closes)) == "refused"


async def test_a_job_may_schedule_the_close_of_its_queue() -> None:
    queue = Queue()
    closing: list[asyncio.Task[object]] = []

    async def schedules() -> str:
        closing.append(asyncio.get_running_loop().create_task(queue.close()))
        await asyncio.sleep(0)
        return "done"

    async with asyncio.timeout(BOUND):
        assert await queue.push_and_wait(Job("k", schedules)) == "done"
        report = await closing[0]
    assert report.clean  # type: ignore[attr-defined]
    with pytest.raises(QueueClosed):
        await queue.push(Job("late", constant))


async def test_async_with_cancels_everything_when_the_block_raises() -> None:
    gate = Gate()
    with pytest.raises(RuntimeError, match="stop"):
        async with Queue() as queue:
            handle = handle_of(await queue.push(Job("k", gate)))
            await gate.started.wait()
            raise RuntimeError("stop")
    assert isinstance(handle.outcome, Failed)
    assert handle.outcome.reason is FailureReason.CANCELLED


async def test_close_of_a_queue_never_used_returns_an_empty_report() -> None:
    assert (await Queue().close()).clean


async def test_issue9_a_second_close_reports_what_it_did_not_the_first_report(
    clock: FakeClock,
) -> None:
    """The first close cancels a thread job that cannot stop and reports it unstopped; once
    the thread has returned, a second close says so (it used to return the first, stale
    report) and is marked already_closed."""
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        release.wait(BOUND)
        return "ignored"

    queue = Queue(clock=clock)
    await queue.push(Job("thread", blocking))
    async with asyncio.timeout(BOUND):
        assert await asyncio.to_thread(started.wait, BOUND)
        closing = asyncio.ensure_future(queue.close(drain=False, timeout=5))
        await clock.wait_for_sleepers(1)
        await clock.advance(5)
        first = await closing
    assert first == CloseReport(cancelled=("thread",), unstopped=("thread",))
    release.set()
    async with asyncio.timeout(BOUND):
        second = await queue.close()  # waits for the thread, which returns
    assert second == CloseReport(already_closed=True)
    assert second.clean and first.unstopped == ("thread",)


async def test_issue9_a_close_without_drain_during_a_draining_close_cancels_at_once() -> None:
    """Two overlapping closes: the impatient one cancels now and reports it; the draining
    one then ends and reports that it abandoned nothing itself."""
    gate = Gate()
    queue = Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)})
    running = handle_of(await queue.push(Job("running", gate)))
    waiting = handle_of(await queue.push(Job("waiting", gate)))
    await gate.started.wait()
    draining = asyncio.ensure_future(queue.close())
    await settle()
    assert not draining.done()
    async with asyncio.timeout(BOUND):
        now = await queue.close(drain=False)
        assert now == CloseReport(("waiting",), ("running",), already_closed=True)
        assert await draining == CloseReport()
    assert isinstance(waiting.outcome, Failed) and isinstance(running.outcome, Failed)
    assert gate.calls == 1


# ------------------------------------------------------------------ state, stats, events


async def test_state_follows_a_job_through_its_life() -> None:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=1, permits=1)}) as queue:
        first, second = Gate(1), Gate(2)
        assert queue.state("b") is None
        await queue.push(Job("a", first))
        await queue.push(Job("b", second))
        await first.started.wait()
        assert (queue.state("a"), queue.state("b")) == (Processing(), Pending())
        first.release.set()
        second.release.set()
        await until(lambda: queue.state("b") == Completed(2))
        assert queue.state("a") == Completed(1)


async def test_events_trace_each_job_with_one_terminal_event() -> None:
    async with Queue() as queue:
        log = Recorder(queue)
        await queue.push_and_wait(Job("ok", constant))
        await queue.push_and_wait(Job("ok", constant))
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("bad", boom))
        assert log.kinds("ok") == [K.QUEUED, K.STARTED, K.COMPLETED, K.CACHED]
        assert log.kinds("bad") == [K.QUEUED, K.STARTED, K.FAILED]
        completed = log.terminal("ok")[0]
        assert completed.attempt == 1 and completed.outcome == Completed("out")
        assert completed.priority is Priority.MEDIUM
        log.unsubscribe()
        log.unsubscribe()
        await queue.push_and_wait(Job("after", constant))
        assert log.kinds("after") == []


async def test_a_raising_subscriber_does_not_affect_the_queue() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    async with Queue() as queue:

        def broken(event: object) -> None:
            raise RuntimeError("subscriber bug")

        queue.subscribe(broken)
        assert await queue.push_and_wait(Job("k", constant)) == "out"
    assert reported and isinstance(reported[0]["exception"], RuntimeError)
    loop.set_exception_handler(None)


async def test_queue_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="unknown lane"):
        Queue({"urgent": LaneConfig()})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="LaneConfig"):
        Queue({Priority.HIGH: (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="key_ttl"):
        Queue(key_ttl=-1)
    with pytest.raises(ValueError, match="max_keys"):
        Queue(max_keys=True)
    with pytest.raises(TypeError, match="clock"):
        Queue(clock=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        Queue().subscribe("not callable")  # type: ignore[arg-type]
    assert Queue({"high": LaneConfig(permits=1)}).stats()[Priority.HIGH].permits == 1  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"'HIGH'.*'low', 'medium', 'high'"):
        Queue({"HIGH": LaneConfig()})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"key_ttl .*got 1000000"):
        Queue(key_ttl=10**400)
    with pytest.raises(ValueError, match=r"timeout .*got 1000000"):
        await Queue().close(timeout=10**400)


# ------------------------------------------------------------------ remembered keys


async def test_key_ttl_forgets_finished_keys_by_the_queue_clock(clock: FakeClock) -> None:
    runs = []

    async def fn() -> int:
        runs.append(1)
        return len(runs)

    async with Queue(key_ttl=60, clock=clock) as queue:
        assert await queue.push_and_wait(Job("k", fn)) == 1
        await clock.advance(59.9)
        assert await queue.push_and_wait(Job("k", fn)) == 1
        await clock.advance(0.1)
        assert queue.state("k") is None
        assert await queue.push_and_wait(Job("k", fn)) == 2
        await clock.advance(61)
        await queue.push_and_wait(Job("other", fn))  # finishing purges expired keys
        assert "k" not in queue._keys


async def test_max_keys_evicts_the_least_recently_finished_key() -> None:
    async with Queue(max_keys=2) as queue:
        for key in ("a", "b", "c"):
            await queue.push_and_wait(Job(key, functools.partial(constant, key)))
        assert queue.state("a") is None
        assert queue.state("b") == Completed("b") and queue.state("c") == Completed("c")


async def test_keys_in_flight_are_never_evicted() -> None:
    async with Queue(max_keys=1, key_ttl=0) as queue:
        gate = Gate("slow")
        handle = handle_of(await queue.push(Job("slow", gate)))
        for i in range(5):
            await queue.push_and_wait(Job(f"fast{i}", constant))
        assert queue.state("slow") == Processing()
        assert isinstance(await queue.push(Job("slow", gate)), InFlight)
        gate.release.set()
        async with asyncio.timeout(BOUND):
            assert await handle == Completed("slow")


async def test_forget_makes_a_finished_key_run_again() -> None:
    runs = []

    async def fn() -> int:
        runs.append(1)
        return len(runs)

    async with Queue() as queue:
        assert await queue.forget("never") is False
        await queue.push_and_wait(Job("k", fn))
        assert await queue.forget("k") is True
        assert queue.state("k") is None
        assert await queue.push_and_wait(Job("k", fn)) == 2
        gate = Gate()
        await queue.push(Job("busy", gate))
        assert await queue.forget("busy") is False
        assert queue.state("busy") is not None
        gate.release.set()


async def test_bh10_memory_of_completed_keys_stays_within_max_keys() -> None:
    """BH-10: 30,000 unique keys returning 1 KB each, max_keys=1,000: memory stays bounded.

    The documented bound is about 0.5 KB per remembered key plus its output; unbounded, these
    outputs alone would take 30 MB.
    """
    import tracemalloc

    async def kilobyte() -> str:
        return "x" * 1024

    lanes = {Priority.MEDIUM: LaneConfig(capacity=1000, permits=4)}
    async with Queue(lanes, max_keys=1000) as queue:
        slow = Gate("in flight")
        first = handle_of(await queue.push(Job("in-flight", slow)))
        await queue.push_and_wait(Job("warm-up", kilobyte))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for start in range(0, 30_000, 1000):
                batch = [queue.push_nowait(Job(f"k{i}", kilobyte))
                         for i in range(start, start + 1000)]
                for accepted in batch:
                    await handle_of(accepted)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < 1000 * (1024 + 1024), grown  # 1,000 keys x (output + ~0.5 KB)
        assert queue.state("k29999") == Completed("x" * 1024)  # recent keys are still cached
        assert queue.state("k0") is None  # the oldest were forgotten
        assert queue.state("in-flight") == Processing()  # never evicted
        slow.release.set()
        assert await first == Completed("in flight")
