"""What an end-of-run hook is called with when its end is delivered late, after the workflow
was retried and ended again: the `RunResult` of the end the outbox row stands for (status,
failed step, reason, outputs as of that end), not the workflow's latest state; on every store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore
from agentq.workflows import RunResult, RunStatus, StepContext, StepDef, WorkflowDef, WorkflowEngine

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True),
]


@pytest.fixture
async def queue(clock: FakeClock) -> AsyncIterator[Queue]:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        yield q


def engine_on(queue: Queue, store: DurableStore, clock: FakeClock, **kw: Any) -> WorkflowEngine:
    return WorkflowEngine(queue, store, worker_id="w1", lease_ttl=30.0, clock=clock, **kw)


def first(ctx: StepContext) -> str:
    return "A"


class Second:
    """A step body that fails ``RuntimeError: boom <n>`` on its n-th call while `fails`."""

    def __init__(self) -> None:
        self.calls = 0
        self.fails = True

    def __call__(self, ctx: StepContext) -> str:
        self.calls += 1
        if self.fails:
            raise RuntimeError(f"boom {self.calls}")
        return f"B{self.calls}"


async def ends_then_delivers(
    queue: Queue, store: DurableStore, clock: FakeClock, second: Second, pass_at_retry: bool
) -> list[RunResult]:
    """Run "w" (fails at step "b"), retry it (fails again, or completes if `pass_at_retry`)
    with no hook anywhere, then deliver both ends with an engine that has the hook."""
    seen: list[RunResult] = []
    steps = [StepDef("a", first), StepDef("b", second)]
    async with engine_on(queue, store, clock) as engine:  # no hook: the ends wait
        engine.register(WorkflowDef("job", steps))
        assert (await engine.run(WorkflowDef("job", steps).workflow("w"))).reason
        second.fails = not pass_at_retry
        await engine.retry("w", from_step="b")
    assert [r.delivered for r in await store.hooks("w")] == [False, False]
    async with engine_on(queue, store, clock) as engine:
        engine.register(WorkflowDef("job", steps, on_end=seen.append))
        await engine.run("w")  # finds it ended: delivers its pending ends (the block settles)
    assert [r.delivered for r in await store.hooks("w")] == [True, True]
    return seen


async def test_two_failed_ends_are_each_reported_with_their_own_reason(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    results = await ends_then_delivers(queue, store, clock, Second(), pass_at_retry=False)
    assert [(r.status, r.step, r.reason, r.outputs) for r in results] == [
        (RunStatus.FAILED, "b", "RuntimeError: boom 1", ("A",)),
        (RunStatus.FAILED, "b", "RuntimeError: boom 2", ("A",)),
    ]


async def test_a_failed_end_delivered_after_a_retry_completed_keeps_its_step_and_reason(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    results = await ends_then_delivers(queue, store, clock, Second(), pass_at_retry=True)
    assert [(r.status, r.step, r.reason, r.outputs) for r in results] == [
        (RunStatus.FAILED, "b", "RuntimeError: boom 1", ("A",)),
        (RunStatus.COMPLETED, None, None, ("A", "B2")),
    ]
    assert results[1].output == "B2"


async def test_an_end_delivered_while_the_retried_run_is_open_is_that_end(
    queue: Queue, store: DurableStore, clock: FakeClock
) -> None:
    """Cancelled while waiting, retried, and waiting again: the cancelled end is reported as
    cancelled (its step and reason), not as the open run's state."""
    seen: list[RunResult] = []
    delivered = asyncio.Event()

    def hook(result: RunResult) -> None:
        seen.append(result)
        delivered.set()

    async def asks(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("approve", "ok?")

    steps = [StepDef("a", first), StepDef("ask", asks)]
    async with engine_on(queue, store, clock) as engine:
        engine.register(WorkflowDef("job", steps))
        await engine.run(WorkflowDef("job", steps).workflow("w"))
        assert await engine.cancel("w", "not now")
        assert (await engine.retry("w", from_step="ask")).status is RunStatus.WAITING
    async with engine_on(queue, store, clock) as engine:
        engine.register(WorkflowDef("job", steps, on_end=hook))
        server = asyncio.ensure_future(engine.serve(poll_interval=1.0))  # its poll delivers
        try:
            async with asyncio.timeout(10):
                await delivered.wait()
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    assert (await store.get_workflow("w")).state.value == "waiting"  # type: ignore[union-attr]
    assert [(r.status, r.step, r.reason, r.outputs) for r in seen] == [
        (RunStatus.CANCELLED, "ask", "not now", ("A",)),
    ]
