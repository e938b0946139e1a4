"""The store verbs a step costs the engine: a completion claims the next step with it
(``advance_step``), a continued run claims none of its completed steps, a wait for input
reads no step row.

The log a reader sees stays what it was (the same events, in the same order); the claim a
completion gets is handed back if its run is cancelled before using it, and is never kept
while another run waits for the engine's claim slot.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import WaitForInput
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import (
    Claimed,
    ClaimResult,
    DurableStore,
    MemoryStore,
    StepRow,
    StepState,
    WorkflowRow,
)
from agentq.workflows import RunResult, RunStatus, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.workflows.advancing import advance

pytestmark = pytest.mark.timeout(60)

VERBS = (
    "start_workflow", "claim_step", "complete_step", "advance_step", "step_rows", "calls",
    "wait_step", "resume_step",
)


def count_verbs(store: DurableStore) -> Counter[str]:
    """Count the calls of `VERBS` on `store` from now on (instance attributes)."""
    counts: Counter[str] = Counter()

    def counted(name: str, verb: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return await verb(*args, **kwargs)

        return call

    for name in VERBS:
        setattr(store, name, counted(name, getattr(store, name)))
    return counts


async def echo(ctx: StepContext) -> Any:
    return [ctx.step_name, ctx.previous]


def three(wid: str) -> Workflow:
    return Workflow(wid, [StepDef("a", echo), StepDef("b", echo), StepDef("c", echo)], input=0)


async def test_each_completion_claims_the_next_step_in_its_transaction(
    engine: WorkflowEngine,
) -> None:
    counts = count_verbs(engine.store)
    result = await engine.run(three("wf"))
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == (["a", 0], ["b", ["a", 0]], ["c", ["b", ["a", 0]]])
    assert (counts["claim_step"], counts["advance_step"], counts["complete_step"]) == (1, 2, 1)
    events = await engine.store.load_events("wf")
    assert [(e.kind, e.step_index) for e in events] == [
        ("WorkflowStarted", None),
        ("StepStarted", 0), ("StepCompleted", 0),
        ("StepStarted", 1), ("StepCompleted", 1),
        ("StepStarted", 2), ("StepCompleted", 2),
        ("WorkflowCompleted", None),
    ]
    assert {e.worker_id for e in events if e.kind == "StepStarted"} == {"w1"}
    assert [e.data["lease_token"] for e in events if e.kind == "StepStarted"] == [1, 1, 1]
    assert engine._driver.tables()["offered"] == 0


async def test_a_completion_keeps_no_slot_another_run_waits_for(
    store: DurableStore, clock: FakeClock
) -> None:
    counts = count_verbs(store)
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=1)}, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        try:
            results = await asyncio.gather(engine.run(three("x")), engine.run(three("y")))
        finally:
            await engine.close()
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 2
    started = [
        (e.workflow_id, e.step_index) for e in await store.load_events()
        if e.kind == "StepStarted"
    ]
    assert started == [("x", 0), ("y", 0), ("x", 1), ("y", 1), ("x", 2), ("y", 2)]
    assert counts["advance_step"] == 0  # the slot went to the other run each time


class LateAdvance(MemoryStore):
    """A store whose advance commits at once but answers only when told (as a busy SQLite
    file's may): a run cancelled meanwhile never learns that it got the next lease."""

    def __init__(self) -> None:
        super().__init__()
        self.advanced = asyncio.Event()
        self.reply = asyncio.Event()

    async def advance_step(
        self, *args: Any, **kwargs: Any
    ) -> tuple[WorkflowRow, ClaimResult | None]:
        result = await super().advance_step(*args, **kwargs)
        self.advanced.set()
        await self.reply.wait()
        return result


async def test_a_next_lease_got_while_the_engine_closed_is_handed_back(clock: FakeClock) -> None:
    store = LateAdvance()
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="a", lease_ttl=3600.0, clock=clock)
        run = asyncio.ensure_future(engine.run(three("wf")))
        async with asyncio.timeout(10):
            await store.advanced.wait()
            closing = asyncio.ensure_future(engine.close())
            await asyncio.sleep(0)
            store.reply.set()
            await closing
            with pytest.raises(asyncio.CancelledError):
                await run
        assert_handed_back(await store.step_rows("wf"), (await store.load_events("wf"))[-1])
        again = WorkflowEngine(queue, store, worker_id="b", lease_ttl=3600.0, clock=clock)
        result = await again.run(three("wf"))
        await again.close()
    assert result.status is RunStatus.COMPLETED and len(result.outputs) == 3


def assert_handed_back(steps: list[StepRow], last: Any) -> None:
    """Step 0 completed; step 1 pending again, its one lease handed back (not a crash)."""
    assert [s.state for s in steps] == [StepState.COMPLETED, StepState.PENDING, StepState.PENDING]
    assert (steps[1].attempt, steps[1].recoveries, steps[1].lease_token) == (0, 0, 1)
    assert (last.kind, last.step_index, last.data["crash"]) == ("WorkerRecovered", 1, False)


async def test_an_advance_cancelled_in_flight_hands_the_next_lease_back(clock: FakeClock) -> None:
    store = LateAdvance()
    await store.start_workflow("wf", ["a", "b", "c"], 0, clock.time())
    claimed = await store.claim_step("wf", 0, "a", 60.0, clock.time())
    assert isinstance(claimed, Claimed)
    advancing = asyncio.ensure_future(
        advance(store, clock, claimed.execution, "a", clock.time(), 60.0, 3)
    )
    async with asyncio.timeout(10):
        await store.advanced.wait()
        advancing.cancel()
        await asyncio.sleep(0)
        assert not advancing.done()  # it waits for the answer, to hand the lease back
        store.reply.set()
        with pytest.raises(asyncio.CancelledError):
            await advancing
    assert_handed_back(await store.step_rows("wf"), (await store.load_events("wf"))[-1])


async def test_a_continued_run_claims_none_of_its_completed_steps(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def ask(ctx: StepContext) -> Any:
        if not ctx.resumed:
            raise WaitForInput("approve?")
        return ctx.resume_input

    wf = Workflow("wf", [StepDef("a", echo), StepDef("b", echo), StepDef("ask", ask),
                         StepDef("d", echo)], input=0)
    counts = count_verbs(engine.store)
    first = await engine.run(wf)
    assert (first.status, first.step) == (RunStatus.WAITING, "ask")
    # a wait for input (no child run) is not read back from the store
    assert (counts["step_rows"], counts["claim_step"], counts["advance_step"]) == (0, 1, 2)
    await clock.advance(1.0)
    counts.clear()
    result = await engine.resume("wf", "ask", "yes")
    assert isinstance(result, RunResult) and result.status is RunStatus.COMPLETED
    assert result.outputs == (["a", 0], ["b", ["a", 0]], "yes", ["d", "yes"])
    # one read of the step rows instead of a claim of each completed step
    assert (counts["claim_step"], counts["advance_step"], counts["step_rows"]) == (1, 1, 1)
    kinds = [(str(e.kind), e.step_index) for e in await engine.store.load_events("wf")]
    assert kinds.count(("StepStarted", 0)) == 1 and kinds.count(("StepStarted", 2)) == 2
