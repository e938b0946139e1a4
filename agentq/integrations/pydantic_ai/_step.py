"""`AgentStep`: the body of a run's one step, ``agent``, and the deps each run gets.

An attempt of the step runs the pydantic-ai agent on the run's stored input (the prompt and
the message history) with `AgentqDurability` added, the run's `RunJournal` current (so each
model request and tool call is a durable call, checked against the log) and the run's deps:
those given for the run in this process, else ``deps_factory(run_id)``, else None. Deps are
live objects, never stored; they are released when the step ends completed or failed, and
kept while the run waits (an approval continues it). A completed run's messages are rebuilt
by running the agent once more, read-only, over its log (`LogReader`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import AgentDepsT
from pydantic_core import to_jsonable_python

from agentq.errors import WaitForInput
from agentq.integrations.pydantic_ai._capability import AgentqDurability
from agentq.integrations.pydantic_ai._journal import CURRENT, RunJournal
from agentq.integrations.pydantic_ai._replay import LogReader
from agentq.store import DurableStore
from agentq.workflows import StepContext

__all__ = ["AgentStep"]


class AgentStep(Generic[AgentDepsT]):
    """The ``agent`` step of a `DurableAgent`'s runs, and the deps given per run.

    Args:
        agent: The pydantic-ai agent.
        name: The agent's name in the log.
        capability: The durability capability added to each run of the agent.
        deps_factory: ``run_id -> deps`` for an attempt whose run has no deps given in this
            process; None: such attempts get ``deps=None``.
        store: The engine's store (its calls are read at each attempt).

    All methods run on the engine's event loop.
    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        name: str,
        capability: AgentqDurability[AgentDepsT],
        deps_factory: Callable[[str], AgentDepsT] | None,
        store: DurableStore,
    ) -> None:
        self._agent = agent
        self._name = name
        self._capability = capability
        self._deps_factory = deps_factory
        self._store = store
        self._deps: dict[str, AgentDepsT] = {}

    def give(self, run_id: str, deps: AgentDepsT | None) -> None:
        """Keep `deps` for the attempts of `run_id` in this process (None: nothing kept)."""
        if deps is not None:
            self._deps[run_id] = deps

    def release(self, run_id: str) -> None:
        """Forget the deps given for `run_id` (nothing continues it, or it is given again)."""
        self._deps.pop(run_id, None)

    async def run(self, ctx: StepContext) -> dict[str, Any]:
        """One attempt of the run `ctx.workflow_id`: the agent's output and token usage.

        Returns:
            ``{"output": JSON, "usage": {"input_tokens", "output_tokens", "requests"}}``.

        Raises:
            WaitForInput: The run waits (an approval, an external event); its deps are kept.
            Exception: What the agent raised; the run's deps are released.
        """
        rows = await self._store.calls(ctx.workflow_id)
        try:
            result = await self._run_agent(RunJournal.of(ctx, self._name, rows), ctx.input)
        except WaitForInput:
            raise  # the run waits: its deps are needed again
        except Exception:
            self.release(ctx.workflow_id)  # the run failed (a retry may give them again)
            raise
        self.release(ctx.workflow_id)  # the run completed
        usage = result.usage
        # Not the messages: they grow with each tool return and could go over the store's
        # limit after every side effect is done (see _replay); `DurableAgent` rebuilds them.
        return {
            "output": to_jsonable_python(result.output),
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "requests": usage.requests,
            },
        }

    async def replay(self, run_id: str, run_input: dict[str, Any]) -> list[ModelMessage]:
        """The messages of the completed run `run_id` (input `run_input`), rebuilt read-only
        from its log (see `DurableAgent.messages`, which documents the errors)."""
        rows = await self._store.calls(run_id)
        journal = RunJournal.of(LogReader(run_id, rows), self._name, rows)
        result = await self._run_agent(journal, run_input)
        return list(result.all_messages())

    def _deps_of(self, run_id: str) -> AgentDepsT | None:
        """The deps of an attempt of `run_id`: given in this process, else the factory's."""
        if run_id in self._deps:
            return self._deps[run_id]
        return None if self._deps_factory is None else self._deps_factory(run_id)

    async def _run_agent(self, journal: RunJournal, run_input: dict[str, Any]) -> Any:
        """Run the agent on the run's input with `journal` current; its `AgentRunResult`."""
        token = CURRENT.set(journal)
        try:
            stored = run_input["message_history"]
            history = None if stored is None else ModelMessagesTypeAdapter.validate_python(stored)
            return await self._agent.run(
                run_input["prompt"],
                message_history=history,
                deps=self._deps_of(journal.ctx.workflow_id),  # type: ignore[arg-type]
                capabilities=[self._capability],
            )
        finally:
            CURRENT.reset(token)
