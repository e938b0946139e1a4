"""How often a `DurableAgent` run reads the store: its attempt reads the recorded calls once
(the read its durable calls share); the report takes the rows the completing attempt ended
with (a recorded run's report reads them); a new run's row is stored without being read first
(only `engine.run` reads it)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from agentq import MemoryStore, Queue, RunStatus, WorkflowEngine
from agentq.errors import WorkflowMismatchError
from agentq.integrations.pydantic_ai import DurableAgent

pytestmark = pytest.mark.timeout(60)


class CountingStore(MemoryStore):
    """A MemoryStore that counts its reads of the recorded calls and of workflow rows."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.rows = 0

    async def get_workflow(self, workflow_id: str) -> Any:
        self.rows += 1
        return await super().get_workflow(workflow_id)

    async def calls(self, workflow_id: str | None = None, step_index: int | None = None) -> Any:
        self.reads += 1
        return await super().calls(workflow_id, step_index)


async def test_a_run_reads_its_recorded_calls_once_in_its_attempt() -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="reader")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    store = CountingStore()
    async with Queue() as queue:
        durable = DurableAgent(agent, WorkflowEngine(queue, store))
        run = await durable.run("Add.", run_id="r1")
        assert run.status is RunStatus.COMPLETED, run.reason
        assert run.usage.requests == 2 and run.usage.tool_calls == 1
        assert store.reads == 1  # the attempt's one read; the report takes its rows
        assert store.rows == 1  # engine.run's: the new run was stored without a read
        again = await durable.run("Add.", run_id="r1")  # recorded: no attempt
        assert again.output == run.output
        assert store.reads == 3  # a recorded run: the rebuild of its messages, its report
        assert again.tree_html == run.tree_html
        with pytest.raises(WorkflowMismatchError, match=r"Add.*Sub"):
            await durable.run("Sub.", run_id="r1")  # refused by the store, then compared
