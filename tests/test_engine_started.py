"""A run by id right after `start`: the row `start` stored is the run's, not read again.

A `DurableAgent` run is ``engine.start`` then ``engine.run`` of one id; the engine keeps the
row `start` got from the store (at most `STARTED_KEPT` of them) for that run. The row may be
behind the store, as any row read before a run may: the run's claims read the state again.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import WorkflowMismatchError
from agentq.store import DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.workflows.registry import STARTED_KEPT

pytestmark = pytest.mark.timeout(60)


async def echo(ctx: StepContext) -> Any:
    return ctx.input


async def test_a_run_after_start_reads_no_row_and_sees_the_stored_input(
    engine: WorkflowEngine,
) -> None:
    reads = _count_reads(engine.store)
    flow = WorkflowDef("flow", [StepDef("a", echo), StepDef("b", echo)])
    assert await engine.start(flow, "wf-1", {"pair": (1, 2)}) is True
    result = await engine.run("wf-1")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"pair": [1, 2]},) * 2  # as a reload from the store gives it
    assert reads == []
    assert engine.tables()["started"] == 0
    again = await engine.run("wf-1")  # ended: answered from the store as before
    assert again.outputs == result.outputs and reads == ["wf-1"]


async def test_a_cancel_after_start_still_ends_the_run_cancelled(engine: WorkflowEngine) -> None:
    flow = WorkflowDef("flow", [StepDef("a", echo)])
    await engine.start(flow, "wf-2", 1)
    # as another process would: the row kept by start is now behind the store
    assert await engine.store.cancel_workflow("wf-2", "stop", engine.clock.time())
    result = await engine.run("wf-2")
    assert result.status is RunStatus.CANCELLED
    assert "StepStarted" not in [str(e.kind) for e in await engine.store.load_events("wf-2")]


async def test_a_definition_changed_after_start_is_refused_as_before(
    engine: WorkflowEngine,
) -> None:
    await engine.start(WorkflowDef("flow", [StepDef("a", echo)]), "wf-3", 1)
    engine.register(WorkflowDef("flow", [StepDef("other", echo)]))
    with pytest.raises(WorkflowMismatchError, match="other"):
        await engine.run("wf-3")
    assert engine.tables()["started"] == 0


async def test_rows_kept_are_bounded_and_each_run_still_completes(engine: WorkflowEngine) -> None:
    flow = WorkflowDef("flow", [StepDef("a", echo)])
    many = STARTED_KEPT + 40
    for i in range(many):
        await engine.start(flow, f"wf-{i}", i)
    assert engine.tables()["started"] == STARTED_KEPT
    reads = _count_reads(engine.store)
    for i in range(many):
        result = await engine.run(f"wf-{i}")
        assert (result.status, result.outputs) == (RunStatus.COMPLETED, (i,))
    assert len(reads) == 40  # the oldest ones, dropped, were read again
    assert engine.tables()["started"] == 0


def _count_reads(store: DurableStore) -> list[str]:
    """The ids `store.get_workflow` is asked for from now on."""
    asked: list[str] = []
    read = store.get_workflow

    async def get_workflow(workflow_id: str) -> Any:
        asked.append(workflow_id)
        return await read(workflow_id)

    store.get_workflow = get_workflow  # type: ignore[method-assign]
    return asked


async def test_an_instance_started_here_and_ended_elsewhere_is_answered_from_the_store(
    engine: WorkflowEngine,
) -> None:
    # A coordinator starts instances, drops the definition and lets workers run them
    # (examples/bfcl_replay/workers.py): the row start kept says "running" and names a
    # definition this engine no longer has, so the run reads the row again, as before.
    flow = WorkflowDef("flow", [StepDef("a", echo)])
    await engine.start(flow, "wf-elsewhere", 1)
    engine.unregister("flow")
    assert await engine.store.cancel_workflow("wf-elsewhere", "done elsewhere", engine.clock.time())
    result = await engine.run("wf-elsewhere")
    assert result.status is RunStatus.CANCELLED
    assert engine.tables()["started"] == 0
