"""Jobs waiting for jobs of their own queue (BH-20): inline runs and deadlock detection."""

from __future__ import annotations

import asyncio
import contextlib
import gc

import pytest
from queue_helpers import BOUND, Gate, until

from agentq.clock import FakeClock
from agentq.errors import DeadlockError, JobFailed
from agentq.outcomes import Completed, Failed, FailureReason
from agentq.queue.handles import Queued
from agentq.queue.jobs import Job
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue
from agentq.queue.records import Record

TIGHT = {Priority.HIGH: LaneConfig(capacity=1, permits=1)}


async def test_bh20_a_job_that_waits_for_a_job_on_its_own_full_lane_does_not_hang() -> None:
    """BH-20: HIGH has permits=1, capacity=1; A push_and_waits B on HIGH: B runs inline."""
    queue = Queue(TIGHT)
    tasks: dict[str, asyncio.Task[object] | None] = {}

    async def fn_b() -> str:
        tasks["B"] = asyncio.current_task()
        return "b"

    async def fn_a() -> str:
        tasks["A"] = asyncio.current_task()
        return "a+" + await queue.push_and_wait(Job("B", fn_b, Priority.HIGH))

    async def fn_c() -> str:
        return "b"

    async def scenario() -> object:
        async with queue:
            result = await queue.push_and_wait(Job("A", fn_a, Priority.HIGH))
            after = await queue.push_and_wait(Job("C", fn_c, Priority.HIGH))
            return result, after

    assert await asyncio.wait_for(scenario(), 5) == ("a+b", "b")
    assert tasks["A"] is tasks["B"]  # B ran inline, on A's permit
    lane = queue.stats()[Priority.HIGH]
    assert (lane.completed, lane.running, lane.queued) == (3, 0, 0)


async def test_a_job_waiting_for_itself_gets_a_deadlock_error() -> None:
    async with Queue(TIGHT) as queue:

        async def selfish() -> str:
            try:
                await queue.push_and_wait(Job("A", selfish, Priority.HIGH))
            except DeadlockError as exc:
                return f"refused: {exc}"
            return "impossible"

        async with asyncio.timeout(BOUND):
            result = await queue.push_and_wait(Job("A", selfish, Priority.HIGH))
        assert result.startswith("refused: job 'A' would wait for job 'A'")


async def test_a_wait_cycle_between_running_jobs_is_refused() -> None:
    lanes = {Priority.HIGH: LaneConfig(capacity=0, permits=2)}
    async with Queue(lanes) as queue:
        b_started = asyncio.Event()

        async def fn_b() -> str:
            b_started.set()
            await until(lambda: a_record_waits())
            try:
                return await queue.push_and_wait(Job("A", fn_a, Priority.HIGH))
            except DeadlockError:
                return "B refused to wait for A"

        async def fn_a() -> object:
            accepted = await queue.push(Job("B", fn_b, Priority.HIGH))
            assert isinstance(accepted, Queued)
            await b_started.wait()  # B runs on the second permit
            return await accepted.handle

        def a_record_waits() -> bool:
            record = queue._keys["A"]
            return bool(record.waiting_on)

        async with asyncio.timeout(BOUND):
            outcome = await queue.push_and_wait(Job("A", fn_a, Priority.HIGH))
        assert outcome == Completed("B refused to wait for A")


async def test_a_plain_push_into_its_own_full_lane_raises_instead_of_hanging() -> None:
    async with Queue(TIGHT) as queue:

        async def child() -> str:
            return "child"

        async def parent() -> object:
            first = await queue.push(Job("B", child, Priority.HIGH))  # fills the waiting area
            with pytest.raises(DeadlockError, match="could never end"):
                await queue.push(Job("C", child, Priority.HIGH))
            assert queue.state("C") is None  # nothing claimed
            assert isinstance(first, Queued)
            return await first.handle  # B has not started: it runs inline

        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("A", parent, Priority.HIGH)) == Completed("child")
            assert await queue.push_and_wait(Job("D", child, Priority.HIGH)) == "child"


async def test_a_push_from_a_job_waits_when_another_permit_will_free_room() -> None:
    lanes = {Priority.HIGH: LaneConfig(capacity=0, permits=2)}
    async with Queue(lanes) as queue:
        other = Gate("other")
        await queue.push(Job("X", other, Priority.HIGH))
        await other.started.wait()

        async def parent() -> str:
            accepted = await queue.push(Job("C", other, Priority.HIGH))  # waits for X
            assert isinstance(accepted, Queued)
            return "pushed"

        waiter = asyncio.ensure_future(queue.push_and_wait(Job("A", parent, Priority.HIGH)))
        await until(lambda: bool(queue._lanes[Priority.HIGH].space))
        assert not waiter.done()
        other.release.set()
        async with asyncio.timeout(BOUND):
            assert await waiter == "pushed"


async def test_concurrent_nested_calls_take_turns_on_the_callers_permit() -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}
    running = peak = 0
    async with Queue(lanes) as queue:

        def child(i: int) -> Job:
            async def fn() -> int:
                nonlocal running, peak
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0)
                running -= 1
                return i

            return Job(f"child-{i}", fn)

        async def parent() -> list[int]:
            return list(await asyncio.gather(*(queue.push_and_wait(child(i)) for i in range(5))))

        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("parent", parent)) == [0, 1, 2, 3, 4]
    assert peak == 1


async def test_concurrent_nested_calls_use_the_free_permits_of_their_lane() -> None:
    """The tool calls of one step overlap up to the lane's permits: one inline on the
    caller's permit, the others on the permits free at once; the rest take turns."""
    lanes = {Priority.MEDIUM: LaneConfig(capacity=0, permits=3)}
    running = peak = 0
    async with Queue(lanes) as queue:

        def child(i: int) -> Job:
            async def fn() -> int:
                nonlocal running, peak
                running += 1
                peak = max(peak, running)
                for _ in range(5):
                    await asyncio.sleep(0)
                running -= 1
                return i

            return Job(f"child-{i}", fn)

        async def parent() -> list[int]:
            return list(await asyncio.gather(*(queue.push_and_wait(child(i)) for i in range(6))))

        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("parent", parent)) == [0, 1, 2, 3, 4, 5]
        lane = queue.stats()[Priority.MEDIUM]
        assert (lane.running, lane.queued, lane.completed) == (0, 0, 7)
    assert peak == 3  # the parent's permit (lent) and the two free ones


async def test_a_thread_job_can_wait_for_a_job_through_the_loop() -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=0, permits=1)}
    async with Queue(lanes) as queue:
        loop = asyncio.get_running_loop()

        async def child() -> str:
            return "from the loop"

        def parent() -> object:
            future = asyncio.run_coroutine_threadsafe(queue.push_and_wait(Job("B", child)), loop)
            return future.result(BOUND)

        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("A", parent)) == "from the loop"


async def test_a_parents_timeout_cancels_its_inline_child(clock: FakeClock) -> None:
    async with Queue(clock=clock) as queue:

        async def child() -> None:
            await clock.sleep(3600)

        async def parent() -> None:
            await queue.push_and_wait(Job("child", child))

        waiter = asyncio.ensure_future(queue.push_and_wait(Job("parent", parent, timeout=1)))
        async with asyncio.timeout(BOUND):
            await clock.wait_for_sleepers(2)
            await clock.advance(1)
            with pytest.raises(JobFailed) as caught:
                await waiter
        outcome = caught.value.outcome
        assert isinstance(outcome, Failed) and outcome.reason is FailureReason.TIMEOUT
        child_state = queue.state("child")
        assert isinstance(child_state, Failed) and child_state.reason is FailureReason.CANCELLED


async def test_jobs_being_drained_may_still_wait_for_children() -> None:
    queue = Queue()
    gate = asyncio.Event()

    async def child() -> str:
        return "child"

    async def parent() -> str:
        await gate.wait()
        return await queue.push_and_wait(Job("child", child))

    handle = await queue.push(Job("parent", parent))
    closing = asyncio.ensure_future(queue.close())
    await asyncio.sleep(0)
    gate.set()
    async with asyncio.timeout(BOUND):
        report = await closing
    assert report.clean
    assert isinstance(handle, Queued) and handle.handle.outcome == Completed("child")


async def test_a_nested_call_into_another_lane_runs_on_that_lanes_permits() -> None:
    """A workflow step in MEDIUM pushing tool calls into HIGH/LOW uses those lanes' permits."""
    lanes = {
        Priority.MEDIUM: LaneConfig(capacity=4, permits=2),
        Priority.HIGH: LaneConfig(capacity=10, permits=1),
        Priority.LOW: LaneConfig(capacity=10, permits=3),
    }
    queue = Queue(lanes)
    seen: list[tuple[str, int, int]] = []
    tasks: dict[str, asyncio.Task[object] | None] = {}

    async def tool(name: str) -> str:
        tasks[name] = asyncio.current_task()
        stats = queue.stats()
        seen.append((name, stats[Priority.HIGH].running, stats[Priority.LOW].running))
        await asyncio.sleep(0)
        return name

    async def step() -> list[str]:
        tasks["step"] = asyncio.current_task()
        a = await queue.push_and_wait(Job("read", lambda: tool("read"), Priority.LOW))
        b = await queue.push_and_wait(Job("write", lambda: tool("write"), Priority.HIGH))
        return [a, b]

    async with queue:
        result = await asyncio.wait_for(queue.push_and_wait(Job("step", step)), 5)
    assert result == ["read", "write"]
    assert seen == [("read", 0, 1), ("write", 1, 0)]
    assert tasks["read"] is not tasks["step"] and tasks["write"] is not tasks["step"]
    stats = queue.stats()
    assert stats[Priority.LOW].completed == 1 and stats[Priority.HIGH].completed == 1


async def test_a_cycle_of_lanes_waiting_on_each_other_does_not_hang() -> None:
    """HIGH's only permit waits on LOW, LOW's only permit waits on HIGH: the closer runs inline."""
    lanes = {
        Priority.HIGH: LaneConfig(capacity=2, permits=1),
        Priority.LOW: LaneConfig(capacity=2, permits=1),
    }
    queue = Queue(lanes)
    low_started = asyncio.Event()
    high_waiting = asyncio.Event()

    async def leaf() -> str:
        return "leaf"

    async def low_job() -> str:
        low_started.set()
        await high_waiting.wait()
        return "low+" + await queue.push_and_wait(Job("leaf-h", leaf, Priority.HIGH))

    async def high_job() -> str:
        await low_started.wait()
        waiting = asyncio.ensure_future(
            queue.push_and_wait(Job("leaf-l", leaf, Priority.LOW))
        )
        await asyncio.sleep(0)
        high_waiting.set()
        return "high+" + await waiting

    async with queue:
        low = asyncio.ensure_future(queue.push_and_wait(Job("low", low_job, Priority.LOW)))
        high = asyncio.ensure_future(queue.push_and_wait(Job("high", high_job, Priority.HIGH)))
        results = await asyncio.wait_for(asyncio.gather(low, high), 5)
    assert results == ["low+leaf", "high+leaf"]


async def test_a_child_in_another_lane_that_waits_for_its_parent_is_refused() -> None:
    """A (MEDIUM) waits for B, run on HIGH's permits; B joins A: a cycle, not a hang."""
    async with Queue() as queue:

        async def fn_b() -> str:
            try:
                await queue.push_and_wait(Job("A", fn_a))
            except DeadlockError as exc:
                return f"refused: {exc}"
            return "impossible"

        async def fn_a() -> str:
            return await queue.push_and_wait(Job("B", fn_b, Priority.HIGH))

        async with asyncio.timeout(BOUND):
            result = await queue.push_and_wait(Job("A", fn_a))
        assert result.startswith("refused: job 'B' would wait for job 'A'")


async def test_a_timed_out_body_pushing_its_own_key_into_another_lane_is_refused(
    clock: FakeClock,
) -> None:
    async def other() -> str:
        return "other"

    async def stubborn() -> object:
        with contextlib.suppress(asyncio.CancelledError):
            await clock.sleep(3600)  # ignores its timeout
        try:
            return await queue.push_and_wait(Job("k", other, Priority.HIGH))
        except JobFailed as exc:
            return exc.__cause__

    queue = Queue(clock=clock)
    async with queue:
        first = await queue.push(Job("k", stubborn, timeout=1))
        await clock.wait_for_sleepers(2)
        await clock.advance(1)
        assert isinstance(first, Queued)
        async with asyncio.timeout(BOUND):
            await first.handle.stopped()
        state = queue.state("k")
        assert isinstance(state, Failed) and isinstance(state.exception, DeadlockError)


async def test_jobs_run_on_lane_workers_and_inline_leave_no_reference_cycle() -> None:
    """Session 10: a record named itself as its root (the permit it runs on), a reference
    cycle that only the garbage collector frees: every job run on a lane worker (a durable
    agent's model requests, its steps) outlived its use until a collection, and piled up in
    the oldest generation. A root record now names none; one run inline names its root."""
    async def child() -> int:
        return 1

    async def inline() -> int:
        return 2

    async def parent() -> int:
        other = await queue.push_and_wait(Job("child", child, Priority.HIGH))  # a worker
        same = await queue.push_and_wait(Job("inline", inline))  # inline, on parent's permit
        return int(other) + int(same)

    gc.collect()
    gc.disable()
    try:
        async with Queue() as queue:
            assert await queue.push_and_wait(Job("parent", parent)) == 3
            for key in ("parent", "child", "inline"):
                assert await queue.forget(key)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            cyclic = [o for o in gc.garbage if type(o) is Record]
            gc.garbage.clear()
    finally:
        gc.set_debug(0)
        gc.enable()
    assert cyclic == []
