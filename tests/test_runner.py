"""Running jobs: timeouts, retries with backoff, threads, cancellation (agentq.queue.runner)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import random
import sys
import threading
from collections.abc import Callable

import pytest
from queue_helpers import BOUND, Gate, Recorder, settle, until

from agentq.clock import FakeClock
from agentq.errors import JobFailed, NonRetryable, QueueFull, WaitForInput
from agentq.outcomes import Completed, Failed, FailureReason, Pending, Processing
from agentq.queue.handles import InFlight, JobHandle, Queued
from agentq.queue.jobs import Job, JobEventKind
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue
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


# ------------------------------------------------------------------ whatever a body raises


class APIError(Exception):
    """An exception whose ``__str__`` raises: ``code`` is never set."""

    code: str

    def __str__(self) -> str:
        return self.code


class Abort(BaseException):
    """A custom BaseException that is not an Exception."""


def _raiser(exc: BaseException, *, thread: bool) -> object:
    if thread:

        def in_thread() -> None:
            raise exc

        return in_thread

    async def on_loop() -> None:
        raise exc

    return on_loop


def _exit_code_2() -> None:
    sys.exit(2)  # what argparse does on bad arguments


@pytest.mark.parametrize("thread", [False, True], ids=["async", "thread"])
@pytest.mark.parametrize(
    ("exc", "type_name"),
    [
        (APIError(), "test_runner.APIError"),
        (Abort("stop"), "test_runner.Abort"),
        (GeneratorExit(), "GeneratorExit"),
        (SystemExit(2), "SystemExit"),
    ],
    ids=["bad-str", "custom-base-exception", "generator-exit", "system-exit"],
)
async def test_any_exception_of_a_body_fails_its_job_and_the_lane_goes_on(
    exc: BaseException, type_name: str, thread: bool
) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}
    async with Queue(lanes) as queue:
        bad = handle_of(await queue.push(Job("bad", _raiser(exc, thread=thread))))  # type: ignore[arg-type]
        after = handle_of(await queue.push(Job("after", threading.get_ident)))
        async with asyncio.timeout(BOUND):
            outcome = await bad
            assert isinstance(await after, Completed)
            with pytest.raises(JobFailed) as caught:
                await queue.push_and_wait(Job("bad", _raiser(exc, thread=thread)))  # type: ignore[arg-type]
    assert isinstance(outcome, Failed) and outcome.reason is FailureReason.ERROR
    assert outcome.exception is exc and type(caught.value.__cause__) is type(exc)
    assert outcome.error.type == type_name
    assert outcome.error.traceback  # formatted, even for a __str__ that raises
    if isinstance(exc, APIError):
        assert outcome.error.message == "<unprintable APIError>"
        assert "<unprintable APIError>" in str(caught.value)
    lane = queue.stats()[Priority.MEDIUM]
    assert (lane.failed, lane.completed, lane.running) == (2, 1, 0)


async def test_sys_exit_in_a_thread_job_fails_the_job_and_never_stops_the_program() -> None:
    async with Queue() as queue:
        with pytest.raises(JobFailed) as caught:
            await queue.push_and_wait(Job("cli", _exit_code_2))
        assert isinstance(caught.value.__cause__, SystemExit)
        assert caught.value.__cause__.code == 2
        assert await queue.push_and_wait(Job("next", lambda: "still running")) == "still running"


async def test_a_thread_raising_stop_iteration_fails_its_job_instead_of_hanging() -> None:
    def stops() -> None:
        raise StopIteration("cannot be set on a future")

    async with Queue({Priority.MEDIUM: LaneConfig(capacity=1, permits=1)}) as queue:
        handle = handle_of(await queue.push(Job("k", stops)))
        async with asyncio.timeout(BOUND):
            outcome = await handle
            assert await queue.push_and_wait(Job("next", lambda: "ok")) == "ok"
    assert isinstance(outcome, Failed) and isinstance(outcome.exception, StopIteration)


def test_keyboard_interrupt_in_an_async_body_is_recorded_then_stops_the_loop() -> None:
    """Ctrl-C in a job on the loop: the job is Failed, the interrupt propagates, the lane
    serves the jobs queued behind it (in order) when the loop runs again."""
    order: list[str] = []

    async def interrupted() -> None:
        raise KeyboardInterrupt

    def behind(name: str) -> object:
        async def fn() -> str:
            order.append(name)
            return name

        return fn

    with asyncio.Runner() as runner:
        queue = Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)})

        async def push_all() -> list[JobHandle]:
            jobs = [Job("ki", interrupted)] + [Job(n, behind(n)) for n in ("b", "c")]  # type: ignore[arg-type]
            handles = [handle_of(await queue.push(job)) for job in jobs]
            await asyncio.sleep(3600)  # the interrupt stops the loop first
            return handles

        with pytest.raises(KeyboardInterrupt):
            runner.run(push_all())
        state = queue.state("ki")
        assert isinstance(state, Failed) and isinstance(state.exception, KeyboardInterrupt)

        async def rest() -> object:
            async with asyncio.timeout(BOUND):
                return [await queue.push_and_wait(Job(n, behind(n))) for n in ("b", "c")]  # type: ignore[arg-type]

        assert runner.run(rest()) == ["b", "c"]
        assert order == ["b", "c"]
        runner.run(queue.close())


async def test_keyboard_interrupt_raised_inside_a_thread_job_is_just_recorded() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    async with Queue() as queue:
        with pytest.raises(JobFailed) as caught:
            await queue.push_and_wait(Job("k", interrupted))
        assert isinstance(caught.value.__cause__, KeyboardInterrupt)
        assert await queue.push_and_wait(Job("next", lambda: "ok")) == "ok"


class BrokenBackoffClock(FakeClock):
    """A clock whose sleep fails for one delay: a fault outside any job body."""

    async def sleep(self, seconds: float) -> None:
        if seconds == 7:
            raise RuntimeError("the clock broke")
        await super().sleep(seconds)


async def test_a_worker_survives_a_fault_outside_the_body_and_keeps_fifo_order() -> None:
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    order: list[str] = []

    def named(name: str) -> object:
        async def fn() -> str:
            order.append(name)
            if name == "a":
                raise ValueError("retry me")
            return name

        return fn

    policy = RetryPolicy(max_attempts=3, backoff=Backoff.fixed(7))
    lanes = {Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}
    try:
        async with Queue(lanes, clock=BrokenBackoffClock()) as queue:
            handles = [
                handle_of(await queue.push(Job(n, named(n), retry=policy)))  # type: ignore[arg-type]
                for n in ("a", "b", "c")
            ]
            async with asyncio.timeout(BOUND):
                outcomes = [await h for h in handles]
    finally:
        loop.set_exception_handler(None)
    assert isinstance(outcomes[0], Failed) and outcomes[0].error.type == "RuntimeError"
    assert isinstance(outcomes[0].exception, RuntimeError)
    assert outcomes[1:] == [Completed("b"), Completed("c")]
    assert order == ["a", "b", "c"]
    assert reported and isinstance(reported[0]["exception"], RuntimeError)


# ------------------------------------------------------------------ one body per key at a time


@pytest.mark.parametrize("forget", [False, True], ids=["failed-key", "forgotten-key"])
async def test_a_new_run_of_a_key_waits_for_the_previous_thread_to_stop(
    clock: FakeClock, forget: bool
) -> None:
    """A timed-out thread still runs: the key's next run holds a permit but starts after it."""
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    log: list[str] = []

    def body(n: int) -> str:
        log.append(f"start {n}")
        started[n].set()
        release[n].wait(BOUND)
        log.append(f"end {n}")
        return f"run {n}"

    lanes = {Priority.MEDIUM: LaneConfig(capacity=0, permits=2)}
    async with Queue(lanes, clock=clock) as queue:
        first = handle_of(await queue.push(Job("k", functools.partial(body, 0), timeout=1)))
        await wait_thread_event(started[0])
        await clock.wait_for_sleepers(1)
        await clock.advance(1)
        assert isinstance(first.outcome, Failed)  # decided at once, the thread still runs
        if forget:
            assert await queue.forget("k")
        second = handle_of(await queue.push(Job("k", functools.partial(body, 1))))
        await settle()
        assert log == ["start 0"]  # the new body has not started
        assert queue.state("k") == Processing()
        assert queue.stats()[Priority.MEDIUM].running == 2  # it holds its permit meanwhile
        release[0].set()
        await wait_thread_event(started[1])
        release[1].set()
        async with asyncio.timeout(BOUND):
            assert await second == Completed("run 1")
    assert log == ["start 0", "end 0", "start 1", "end 1"]


async def test_cancelling_a_run_that_waits_for_the_previous_body(clock: FakeClock) -> None:
    started, release = threading.Event(), threading.Event()

    def blocking() -> str:
        started.set()
        release.wait(BOUND)
        return "late"

    async with Queue(clock=clock) as queue:
        first = handle_of(await queue.push(Job("k", blocking, timeout=1)))
        await wait_thread_event(started)
        await clock.wait_for_sleepers(1)
        await clock.advance(1)
        ran: list[int] = []
        second = handle_of(await queue.push(Job("k", lambda: ran.append(1))))
        await settle()
        assert second.cancel() is True
        async with asyncio.timeout(BOUND):
            await second.stopped()  # it never started its body: nothing to wait for
            release.set()
            await first.stopped()
        assert ran == [] and queue.stats()[Priority.MEDIUM].running == 0


async def test_a_previous_body_that_waits_for_its_own_key_gets_a_deadlock(
    clock: FakeClock,
) -> None:
    async def other() -> str:
        return "other"

    async def stubborn() -> object:
        with contextlib.suppress(asyncio.CancelledError):
            await clock.sleep(3600)  # ignores its timeout, then asks for its own key again
        try:
            return await queue.push_and_wait(Job("k", other))
        except JobFailed as exc:
            return type(exc.__cause__).__name__

    queue = Queue(clock=clock)
    async with queue:
        first = handle_of(await queue.push(Job("k", stubborn, timeout=1)))
        await clock.wait_for_sleepers(2)
        await clock.advance(1)
        async with asyncio.timeout(BOUND):
            await first.stopped()
        assert isinstance(first.outcome, Failed)
        state = queue.state("k")
        assert isinstance(state, Failed) and state.error.type == "agentq.errors.DeadlockError"


# ------------------------------------------------------------------ what is never retried


class Permanent(Exception):
    retryable = False


@pytest.mark.parametrize(
    "make", [lambda: NonRetryable("bad input"), lambda: WaitForInput("approve?"), Permanent],
    ids=["NonRetryable", "WaitForInput", "retryable-False"],
)
async def test_exceptions_marked_not_retryable_are_never_retried(
    make: Callable[[], Exception],
) -> None:
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise make()

    async with Queue() as queue:
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("k", fails, retry=RetryPolicy(8)))
    assert calls == 1


async def test_other_exceptions_are_still_retried() -> None:
    calls = 0

    class Flaky(Exception):
        retryable = True

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise Flaky if calls % 2 else ValueError

    async with Queue() as queue:
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("k", fails, retry=RetryPolicy(4)))
    assert calls == 4


def _group(*leaves: Exception) -> ExceptionGroup[Exception]:
    return ExceptionGroup("parallel calls", [ValueError("sibling failed"), *leaves])


@pytest.mark.parametrize(
    ("make", "calls_expected"),
    [
        (lambda: _group(NonRetryable("bad input")), 1),
        (lambda: _group(Permanent("no")), 1),
        (lambda: _group(WaitForInput("approve?")), 1),
        (lambda: ExceptionGroup("outer", [_group(NonRetryable("deep"))]), 1),
        (lambda: _group(KeyError("transient")), 4),
    ],
    ids=["NonRetryable", "retryable-False", "WaitForInput", "nested", "ordinary"],
)
async def test_exception_groups_are_judged_by_their_leaves(
    make: Callable[[], Exception], calls_expected: int
) -> None:
    """Issue 9 items 4-5: the queue and the engine share one rule (agentq.retry.classify)."""
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        async with asyncio.TaskGroup() as group:  # what parallel tool calls raise
            group.create_task(_raise(make()))

    async with Queue() as queue:
        with pytest.raises(JobFailed) as failed:
            await queue.push_and_wait(Job("k", fails, retry=RetryPolicy(4)))
    assert calls == calls_expected
    assert isinstance(failed.value.__cause__, BaseExceptionGroup)


async def _raise(exc: Exception) -> None:
    raise exc
