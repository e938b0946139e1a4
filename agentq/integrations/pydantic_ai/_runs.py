"""How a `DurableAgent`'s runs become workflows of the engine: the one place that knows.

Each run is a workflow of one step, ``agent``, whose id is the run id and whose input holds
the agent's name, the prompt and the message history. Until named definitions exist, each run
is a plain `Workflow` registered in this process; `ensure` registers a stored run again (from
its stored input) so that a new process can resume or continue it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentq.errors import UnknownWorkflowError, WorkflowMismatchError
from agentq.workflows import RunResult, StepContext, StepDef, Workflow, WorkflowEngine

__all__ = ["STEP", "AgentRuns"]

STEP = "agent"
"""The name of the one step of an agent run."""


class AgentRuns:
    """The workflows of one agent's runs on one engine."""

    def __init__(
        self,
        engine: WorkflowEngine,
        agent_name: str,
        step: Callable[[StepContext], Awaitable[dict[str, Any]]],
    ) -> None:
        self._engine = engine
        self._agent_name = agent_name
        self._step = step

    def _workflow(self, run_id: str, run_input: dict[str, Any]) -> Workflow:
        return Workflow(run_id, [StepDef(STEP, self._step)], input=run_input)

    async def run(self, run_id: str, run_input: dict[str, Any]) -> RunResult:
        """Start or continue the run `run_id` with `run_input`; return its `RunResult`.

        Raises:
            WorkflowMismatchError: `run_id` is stored with another input (another prompt,
                history or agent).
        """
        stored = await self._engine.store.get_workflow(run_id)
        if stored is not None and stored.input != run_input:
            raise WorkflowMismatchError(
                f"run_id {run_id!r} is a stored run of another prompt, history or agent "
                f"(stored input {stored.input!r}); use a new run_id for a new turn"
            )
        return await self._engine.run(self._workflow(run_id, run_input))

    async def ensure(self, run_id: str) -> None:
        """Register the stored run `run_id` with this agent's step (to resume it here).

        Registering again replaces the step body (a `DurableAgent` built anew, in a notebook
        cell run twice or after a restart, takes its runs over).

        Raises:
            UnknownWorkflowError: No run `run_id` of this agent is stored.
        """
        stored = await self._engine.store.get_workflow(run_id)
        if (
            stored is None
            or not isinstance(stored.input, dict)
            or (stored.input.get("agent") != self._agent_name)
        ):
            raise UnknownWorkflowError(f"no run {run_id!r} of agent {self._agent_name!r} is stored")
        self._engine.register_workflow(self._workflow(run_id, stored.input))
