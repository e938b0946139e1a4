"""How a `DurableAgent`'s runs become workflows of the engine: the one place that knows.

The agent registers a `WorkflowDef` named after it, with one step, ``agent``; each run is an
instance of it whose id is the run id and whose input holds the agent's name, the prompt and
the message history. The store records the definition's name with each run, so any process
that builds the same `DurableAgent` (and so registers the same definition) can run, resume,
retry or recover a run by its id: ``engine.run(run_id)``, ``engine.resume(run_id, "agent",
...)``, ``recover(engine)``, ``engine.serve()``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentq.errors import WorkflowMismatchError
from agentq.workflows import RunResult, StepContext, StepDef, WorkflowDef, WorkflowEngine

__all__ = ["STEP", "AgentRuns"]

STEP = "agent"
"""The name of the one step of an agent run."""


class AgentRuns:
    """The definition of one agent's runs, registered on one engine.

    Args:
        engine: The engine; the definition is registered with it at once (replacing one of
            the same name: a `DurableAgent` built again, in a notebook cell run twice or
            after a restart, takes the agent's runs over).
        agent_name: The definition's name.
        step: The body of the ``agent`` step.
    """

    def __init__(
        self,
        engine: WorkflowEngine,
        agent_name: str,
        step: Callable[[StepContext], Awaitable[dict[str, Any]]],
    ) -> None:
        self._engine = engine
        self.definition = WorkflowDef(agent_name, [StepDef(STEP, step)])
        engine.register(self.definition)

    async def run(self, run_id: str, run_input: dict[str, Any]) -> RunResult:
        """Start the run `run_id` with `run_input` (if new) and run it; return its `RunResult`.

        A stored run continues (a crash), reports its wait, or returns its recorded result.

        Raises:
            WorkflowMismatchError: `run_id` is stored with another input (another prompt,
                history or agent) or from another definition; nothing is changed.
        """
        stored = await self._engine.store.get_workflow(run_id)
        if stored is not None and (
            stored.input != run_input or stored.definition != self.definition.name
        ):
            raise WorkflowMismatchError(
                f"run_id {run_id!r} is a stored run of another prompt, history or agent "
                f"(definition {stored.definition!r}, input {stored.input!r}); use a new "
                "run_id for a new turn"
            )
        await self._engine.start(self.definition, run_id, run_input)
        return await self._engine.run(run_id)
