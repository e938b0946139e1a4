"""``ctx.call(..., tokens=n)``: a durable call's estimate charged to its lane's token budget,
settled by the tokens it used (its output's usage, else its recorded usage), on every store
kind the engine suites use (the engine shares the budget through a store that keeps windows).

Everything runs on a `FakeClock` that moves only when the test moves it: a call that waited
for its window to slide would never finish, and the test's time bound would say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.queue import Job, LaneConfig, Priority, Queue, Rate
from agentq.store import DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

LANES = {
    Priority.MEDIUM: LaneConfig(capacity=50, permits=4),
    Priority.HIGH: LaneConfig(capacity=50, permits=4, tokens=Rate(100, 60.0)),
}


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(LANES, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def reply() -> str:
    return "ok"


async def answer() -> dict[str, Any]:
    return {"text": "ok", "usage": {"input_tokens": 2, "output_tokens": 3}}


async def run(engine: WorkflowEngine, workflow_id: str, body: Any) -> RunStatus:
    async with asyncio.timeout(10):  # a call waiting for its window would never end
        result = await engine.run(Workflow(workflow_id, [StepDef("s", body)]))
    return result.status


async def test_a_call_is_settled_by_its_recorded_usage(engine: WorkflowEngine) -> None:
    async def step(ctx: StepContext) -> str:
        await ctx.call(
            Job("a", reply, Priority.HIGH), tokens=80,
            usage={"input_tokens": 4, "output_tokens": 6},
        )
        # 80 charged, 10 used: 10 + 80 fits the 100 of the window at once.
        return str(await ctx.call(Job("b", reply, Priority.HIGH), tokens=80))

    assert await run(engine, "wf", step) == RunStatus.COMPLETED
    assert engine.queue.stats()[Priority.HIGH].window_tokens == 90


async def test_a_usage_function_settles_too(engine: WorkflowEngine) -> None:
    async def step(ctx: StepContext) -> None:
        await ctx.call(Job("a", reply, Priority.HIGH), tokens=90,
                       usage=lambda _: {"total_tokens": 20})
        await ctx.call(Job("b", answer, Priority.HIGH), tokens=70,
                       usage=lambda output: output["usage"])  # 5
        await ctx.call(Job("c", reply, Priority.HIGH, tokens=60))  # Job(tokens=) works too

    assert await run(engine, "wf", step) == RunStatus.COMPLETED
    assert engine.queue.stats()[Priority.HIGH].window_tokens == 85


async def test_a_call_without_usage_keeps_its_estimate(engine: WorkflowEngine) -> None:
    async def step(ctx: StepContext) -> None:
        await ctx.call(Job("a", reply, Priority.HIGH), tokens=80)  # nothing says what it used

    assert await run(engine, "wf", step) == RunStatus.COMPLETED
    assert engine.queue.stats()[Priority.HIGH].window_tokens == 80


async def test_bad_tokens_are_refused_before_anything_is_recorded(
    engine: WorkflowEngine,
) -> None:
    async def step(ctx: StepContext) -> None:
        with pytest.raises(ValueError, match="-1"):
            await ctx.call(Job("a", reply, Priority.HIGH), tokens=-1)

    assert await run(engine, "wf", step) == RunStatus.COMPLETED
    assert not await engine.store.calls("wf")
