"""Child runs: `ctx.child` and `ctx.children` (on MemoryStore and SqliteStore).

The parent's step starts a child once, waits for it holding no lease (the step is Waiting on
``child:<key>``), and returns its output; the store answers that wait in the transaction
that ends the child. Failures and cancels of the child raise `ChildFailed` in the parent; a
cancel of the parent cancels its children; a replay of the parent joins the same child.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from agentq import (
    ChildFailed,
    NonRetryable,
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.errors import KeyConflictError, UnknownWorkflowError
from agentq.events import EventKind
from agentq.store import DurableStore, StepState, WorkflowState

pytestmark = pytest.mark.timeout(60)


def doubler(runs: Counter[str] | None = None) -> WorkflowDef:
    """A one-step child definition: doubles its input, counting its runs by workflow id."""

    async def double(ctx: StepContext) -> Any:
        if runs is not None:
            runs[ctx.workflow_id] += 1
        if ctx.input == "boom":
            raise NonRetryable("the child refuses 'boom'")
        return ctx.input * 2

    return WorkflowDef("double", [StepDef("double", double)])


def parent_of_one(child: WorkflowDef, value: Any, log: list[str]) -> WorkflowDef:
    async def body(ctx: StepContext) -> Any:
        log.append("body")
        try:
            got = await ctx.child(child, value, key="c")
        except ChildFailed as failed:
            return {"failed": failed.child_id, "state": failed.state, "reason": failed.reason}
        return {"got": got}

    return WorkflowDef("parent", [StepDef("ask", body)])


async def kinds(store: DurableStore, workflow_id: str) -> list[EventKind]:
    return [e.kind for e in await store.load_events(workflow_id)]


async def test_a_parent_with_one_child_completes_with_its_output(engine: WorkflowEngine) -> None:
    runs: Counter[str] = Counter()
    log: list[str] = []
    parent = parent_of_one(doubler(runs), 21, log)
    await engine.start(parent, "p1")
    result = await engine.run("p1")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"got": 42},)
    assert runs == Counter({"p1/c": 1})
    child = await engine.store.get_workflow("p1/c")
    assert child is not None and child.state is WorkflowState.COMPLETED
    assert child.definition == "double"
    started = (await engine.store.load_events("p1/c"))[0]
    assert started.data["parent"] == {"workflow_id": "p1", "step": 0, "key": "child:c"}
    wait = {r.key: r for r in await engine.store.calls("p1")}["child:c"]
    assert wait.kind == "wait" and wait.state == "answered"
    assert wait.details == {"child": "p1/c", "definition": "double"}
    assert wait.output == {"child": "p1/c", "state": "completed", "output": 42}
    assert await kinds(engine.store, "p1") == [
        EventKind.WORKFLOW_STARTED,
        EventKind.STEP_STARTED,
        EventKind.CHILD_STARTED,
        EventKind.STEP_WAITING,
        EventKind.STEP_RESUMED,
        EventKind.STEP_STARTED,
        EventKind.STEP_COMPLETED,
        EventKind.WORKFLOW_COMPLETED,
    ]
    assert log == ["body", "body"]
    assert engine.tables()["children"] == 0
