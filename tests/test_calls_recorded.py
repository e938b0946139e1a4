"""`ctx.recorded()`: the workflow's recorded calls and waits from the attempt's one read of the
log, the read its calls and waits share (an agent step reads the log once, not twice)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import StepContextError
from agentq.queue import Job, LaneConfig, Priority, Queue
from agentq.retry import RetryPolicy
from agentq.store import CallRow, MemoryStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

LANES = {Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}


class CountingStore(MemoryStore):
    """A MemoryStore that counts its reads of the recorded calls."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def calls(self, workflow_id: str | None = None, step_index: int | None = None) -> Any:
        self.reads += 1
        return await super().calls(workflow_id, step_index)


class World:
    """The outside world: the tools that ran, in order; "b" is down the first time."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def tool(self, name: str) -> str:
        self.ran.append(name)
        if name == "b" and self.ran.count("b") == 1:
            raise ConnectionError("b is down")
        return name.upper()


async def test_recorded_shares_the_attempts_one_read_and_follows_its_calls(
    clock: FakeClock,
) -> None:
    store = CountingStore()
    world = World()
    seen: list[tuple[int, list[tuple[str, str]], list[tuple[str, str]]]] = []

    def states(rows: list[CallRow]) -> list[tuple[str, str]]:
        return [(row.key, row.state) for row in rows]

    async def body(ctx: StepContext) -> list[str]:
        first = states(await ctx.recorded())
        a = await ctx.call(Job("a", functools.partial(world.tool, "a")))
        after_a = states(await ctx.recorded())
        seen.append((ctx.attempt, first, after_a))
        b = await ctx.call(Job("b", functools.partial(world.tool, "b")))  # fails once
        return [a, b]

    async with Queue(LANES, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w1", clock=clock)
        wf = Workflow("wf-recorded", [StepDef("s", body, retry=RetryPolicy(2))])
        result = await engine.run(wf)
        await engine.close()
    assert result.status is RunStatus.COMPLETED and result.output == ["A", "B"]
    assert world.ran == ["a", "b", "b"]  # the retry answers "a" from the log
    assert seen == [
        (1, [], [("a", "completed")]),
        (2, [("a", "completed"), ("b", "failed")], [("a", "completed"), ("b", "failed")]),
    ]
    assert store.reads == 2  # one read per attempt, shared by recorded() and the calls
    # What the attempts saw is what the store lists.
    assert states(await store.calls("wf-recorded")) == [("a", "completed"), ("b", "completed")]


async def test_recorded_needs_a_live_attempt(clock: FakeClock) -> None:
    kept: list[StepContext] = []

    async def body(ctx: StepContext) -> str:
        kept.append(ctx)
        return "done"

    async with Queue(LANES, clock=clock) as q:
        engine = WorkflowEngine(q, MemoryStore(), worker_id="w1", clock=clock)
        result = await engine.run(Workflow("wf-ended", [StepDef("s", body)]))
        await engine.close()
    assert result.status is RunStatus.COMPLETED
    with pytest.raises(StepContextError, match="after its step attempt ended"):
        await kept[0].recorded()
    by_hand = StepContext("wf-x", 0, "s", 1, None, (), None)
    with pytest.raises(StepContextError, match="built by hand"):
        await by_hand.recorded()
