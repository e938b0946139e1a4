"""`engine.start` then `engine.run(id)`: the run is of the workflow the store holds then.

Between the two another process may end the instance, sweep it and start its id again, with
another input or from another definition: the run must be of what is stored at the run (a
session-10 speed change ran the row `start` had got instead, and was withdrawn).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentq.errors import UnknownWorkflowError
from agentq.workflows import RunStatus, StepContext, StepDef, WorkflowDef, WorkflowEngine

pytestmark = pytest.mark.timeout(60)


async def echo(ctx: StepContext) -> Any:
    return {"ran with": ctx.input}


FLOW = WorkflowDef("flow", [StepDef("a", echo)])


async def _reuse_id(engine: WorkflowEngine, input: Any, definition: str, steps: list[str]) -> None:
    """As another process would: cancel "w", sweep it, start "w" again."""
    store, now = engine.store, engine.clock.time()
    assert await store.cancel_workflow("w", "stop", now)
    report = await store.sweep(ended_before=now + 1)
    assert report.workflows == 1
    _, created = await store.start_workflow("w", steps, input, now, definition=definition)
    assert created


async def test_an_id_swept_and_started_again_runs_with_the_new_input(
    engine: WorkflowEngine,
) -> None:
    assert await engine.start(FLOW, "w", {"who": "alice"})
    await _reuse_id(engine, {"who": "bob"}, "flow", ["a"])
    result = await engine.run("w")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"ran with": {"who": "bob"}},)


async def test_an_id_started_again_from_a_definition_not_registered_here_is_refused(
    engine: WorkflowEngine,
) -> None:
    assert await engine.start(FLOW, "w", {"who": "alice"})
    await _reuse_id(engine, {"who": "bob"}, "other", ["x"])
    with pytest.raises(UnknownWorkflowError, match="'other'"):
        await engine.run("w")
    assert [str(e.kind) for e in await engine.store.load_events("w")] == ["WorkflowStarted"]


async def test_an_instance_started_here_and_ended_elsewhere_is_answered_from_the_store(
    engine: WorkflowEngine,
) -> None:
    # A coordinator starts instances, drops the definition, and workers run them
    # (examples/bfcl_replay/workers.py): run(id) answers with what the store holds.
    await engine.start(FLOW, "w", 1)
    engine.unregister("flow")
    assert await engine.store.cancel_workflow("w", "done elsewhere", engine.clock.time())
    assert (await engine.run("w")).status is RunStatus.CANCELLED
