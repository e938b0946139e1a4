"""What a durable call's body gets from the integration (`_units`): the guarded run context
(``enqueue``/``cancel`` refused, since a call answered from the log does not run again) made as
pydantic-ai makes it, only cheaper."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec._toolset import guard_run_context
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from agentq import MemoryStore, Queue, RunStatus, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.integrations.pydantic_ai._units import guarded

pytestmark = pytest.mark.timeout(60)


def test_the_guarded_context_is_pydantic_ais_field_for_field() -> None:
    ctx: RunContext[dict[str, int]] = RunContext(
        deps={"a": 1}, model=TestModel(), usage=RunUsage(requests=2), run_id="r", retry=1,
    )
    ours = guarded(ctx, "call", "workflow")
    theirs = guard_run_context(ctx, unit_noun="call", container_noun="workflow")
    assert ours is not None and type(ours) is RunContext and ours is not ctx
    guards = {"pending_messages", "_cancellation"}
    assert ours.__dict__.keys() == theirs.__dict__.keys()
    for name, value in theirs.__dict__.items():
        if name in guards:
            assert type(ours.__dict__[name]) is type(value), name
            assert ours.__dict__[name] is not ctx.__dict__[name], name
        else:
            assert ours.__dict__[name] is value, name  # shared, as `replace` shares them
    # The original is untouched; each copy has guards of its own.
    assert ctx.pending_messages is not ours.pending_messages
    again = guarded(ctx, "call", "workflow")
    assert again is not None and again.pending_messages is not ours.pending_messages
    with pytest.raises(Exception) as ours_error:
        ours.cancel()
    with pytest.raises(Exception) as theirs_error:
        theirs.cancel()
    assert type(ours_error.value) is type(theirs_error.value)
    assert str(ours_error.value) == str(theirs_error.value)


def test_a_subclass_of_run_context_is_left_to_pydantic_ai() -> None:
    class Custom(RunContext[None]):
        pass

    ctx = Custom(deps=None, model=TestModel(), usage=RunUsage())
    assert guarded(ctx, "call", "workflow") is None


async def test_a_tool_cannot_enqueue_or_cancel_inside_its_durable_call() -> None:
    agent: Agent[int, str] = Agent(TestModel(), name="guarded", deps_type=int)
    seen: list[str] = []

    @agent.tool
    def probe(ctx: RunContext[int]) -> str:
        seen.append(f"deps={ctx.deps} run_id={ctx.run_id is not None}")
        for attempt in (lambda: ctx.enqueue("more"), ctx.cancel):
            try:
                attempt()
            except Exception as error:  # its type is checked by name below
                seen.append(f"{type(error).__name__}: {error}")
        return "probed"

    async with Queue() as queue:
        durable = DurableAgent(agent, WorkflowEngine(queue, MemoryStore()))
        run: Any = await durable.run("Probe.", run_id="g1", deps=7)
    assert run.status is RunStatus.COMPLETED, run.reason
    assert seen[0] == "deps=7 run_id=True"
    assert len(seen) == 3
    assert seen[1].startswith("UserError: `ctx.enqueue()` is not supported inside a durable call")
    assert seen[2].startswith("UserError: `cancel` is not supported inside a durable call")
