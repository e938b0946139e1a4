"""Issue 9 item 6: a long-lived engine does not keep every workflow it ever ran.

A registration is dropped once its run ends completed, failed or cancelled (the store keeps
the record); waiting workflows stay registered, since `resume` needs their bodies;
`engine.unregister` forgets one on purpose. Runs, attempts and wake-ups are forgotten as they
end.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import NotWaitingError, UnknownWorkflowError, WorkflowClosedError
from agentq.queue import Job, LaneConfig, Priority, Queue
from agentq.store import MemoryStore
from agentq.workflows import (
    NonRetryable,
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
    recover,
)

pytestmark = pytest.mark.timeout(120)

EMPTY = {
    "registered": 0, "runs": 0, "delivering": 0, "attempts": 0, "offered": 0, "admitted": 0,
    "wakers": 0, "lingering": 0, "children": 0, "watchers": 0,
}


async def gate(ctx: StepContext) -> Any:
    if not ctx.resumed:
        raise WaitForInput("approve?")
    return ctx.resume_input


async def done(ctx: StepContext) -> str:
    return "done"


async def refuse(ctx: StepContext) -> None:
    raise NonRetryable("no")


async def test_two_thousand_workflows_leave_no_table_behind(clock: FakeClock) -> None:
    """Completed, failed, cancelled and resumed workflows, 500 of each: afterwards the
    engine's registry, runs, deliveries, attempts and wake-ups are all empty."""
    store = MemoryStore()
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=4000, permits=8)}, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w", clock=clock)

        def workflow(i: int) -> Workflow:
            kind = i % 4
            steps = [StepDef("a", done), StepDef("b", refuse if kind == 1 else gate if kind > 1
                                               else done)]
            return Workflow(f"wf-{i}", steps)

        results = await asyncio.gather(*(engine.run(workflow(i)) for i in range(2000)))
        statuses = [r.status for r in results]
        assert statuses.count(RunStatus.COMPLETED) == statuses.count(RunStatus.FAILED) == 500
        assert statuses.count(RunStatus.WAITING) == 1000
        assert engine.tables() == {**EMPTY, "registered": 1000}  # only the waiting ones
        await asyncio.gather(*(
            engine.cancel(f"wf-{i}", "stop") if i % 4 == 2 else engine.resume(f"wf-{i}", "b", i)
            for i in range(2, 2000) if i % 4 >= 2
        ))
        assert engine.tables() == EMPTY
        assert engine.workflow_ids == ()
        # Nor the queue: an attempt's job (its key the attempt's own, its outcome in the
        # log) is forgotten once its body stopped, with the closure that reaches its context.
        assert len(q._keys) == 0
    assert len(await store.workflows()) == 2000  # the store keeps every record


async def test_definition_instances_with_durable_calls_leave_nothing_behind(
    clock: FakeClock,
) -> None:
    """2,000 runs by id of stored instances whose step makes durable calls: afterwards no
    table of the engine nor the queue's key table holds an entry of them."""

    async def calls(ctx: StepContext) -> int:
        one = await ctx.call(Job("one", functools.partial(int, 1)))
        two = await ctx.call(Job("two", functools.partial(int, 2)))
        return int(one) + int(two)

    store = MemoryStore()
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=4000, permits=8)}, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w", clock=clock)
        adds = WorkflowDef("adds", [StepDef("a", calls), StepDef("b", done)])
        for i in range(2000):
            await engine.start(adds, f"adds-{i}", i)
        results = await asyncio.gather(*(engine.run(f"adds-{i}") for i in range(2000)))
        assert {r.status for r in results} == {RunStatus.COMPLETED}, results[0].reason
        assert {r.outputs for r in results} == {(3, "done")}
        assert engine.tables() == EMPTY
        assert len(q._keys) == 0


async def test_an_ended_workflow_still_answers_by_id_once_dropped(engine: WorkflowEngine) -> None:
    wf = Workflow("wf-dropped", [StepDef("a", done), StepDef("b", gate)])
    assert (await engine.run(wf)).status is RunStatus.WAITING
    assert engine.workflow_ids == ("wf-dropped",)  # waiting: kept for resume
    finished = await engine.resume("wf-dropped", "b", {"ok": 1})
    assert finished.status is RunStatus.COMPLETED
    assert engine.registered("wf-dropped") is None
    assert await engine.run("wf-dropped") == finished  # the stored result, nothing appended
    with pytest.raises(NotWaitingError, match="'b'"):
        await engine.resume("wf-dropped", "b", {"ok": 2})
    with pytest.raises(NotWaitingError):
        await engine.resume("wf-dropped", 1, None)
    assert [e.kind for e in await engine.store.load_events("wf-dropped")].count(
        "StepResumed"
    ) == 1
    assert (await engine.run(wf)).status is RunStatus.COMPLETED  # the object still works


async def test_resume_of_a_dropped_cancelled_workflow_says_it_is_closed(
    engine: WorkflowEngine,
) -> None:
    wf = Workflow("wf-dropped-c", [StepDef("b", gate)])
    await engine.run(wf)
    assert engine.registered("wf-dropped-c") is not None  # waiting: kept
    assert await engine.cancel("wf-dropped-c", "no")
    assert engine.registered("wf-dropped-c") is None  # cancelled: dropped
    assert (await engine.run("wf-dropped-c")).status is RunStatus.CANCELLED
    with pytest.raises(WorkflowClosedError, match="cancelled"):
        await engine.resume("wf-dropped-c", "b", True)


async def test_unknown_ids_are_still_refused(engine: WorkflowEngine) -> None:
    with pytest.raises(UnknownWorkflowError, match="never-seen"):
        await engine.run("never-seen")
    with pytest.raises(UnknownWorkflowError, match="never-seen"):
        await engine.resume("never-seen", 0, None)


async def test_unregister_forgets_a_waiting_workflow_until_registered_again(
    engine: WorkflowEngine,
) -> None:
    wf = Workflow("wf-unreg", [StepDef("b", gate)])
    await engine.run(wf)
    assert engine.unregister("wf-unreg") is True
    assert engine.unregister("wf-unreg") is False
    assert engine.unregister("not-registered") is False
    with pytest.raises(TypeError, match="None"):
        engine.unregister(None)  # type: ignore[arg-type]
    with pytest.raises(UnknownWorkflowError, match="not registered"):
        await engine.resume("wf-unreg", "b", True)
    assert (await recover(engine)).resumed == ()
    engine.register_workflow(wf)
    assert (await engine.resume("wf-unreg", "b", 7)).output == 7
    assert engine.tables()["registered"] == 0
