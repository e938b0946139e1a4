"""How a `DurableAgent`'s runs become workflows of the engine: the one place that knows.

The agent registers a `WorkflowDef` named after it, with one step, ``agent``; each run is an
instance of it whose id is the run id and whose input holds the agent's name, the prompt and
the message history. The store records the definition's name with each run, so any process
that builds the same `DurableAgent` (and so registers the same definition) can run, resume,
retry or recover a run by its id: ``engine.run(run_id)``, ``engine.resume(run_id, "agent",
...)``, ``recover(engine)``, ``engine.serve()``.

A run id names one run: giving it again with the same input continues that run, with another
input is refused (`WorkflowMismatchError`, naming the first difference in a line). "The same"
is the identity of the input, not its exact JSON: the volatile fields of the messages of the
history (timestamps, pydantic-ai run ids and conversation ids; `identity`) are left out,
so a history rebuilt by ``durable.messages`` (new timestamps, new run ids) is the history the
run was started with; and ``continue_from`` (where the history came from) is left out too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agentq.difference import first_difference
from agentq.errors import WorkflowMismatchError
from agentq.store import WorkflowRow
from agentq.workflows import RunResult, StepContext, StepDef, WorkflowDef, WorkflowEngine

__all__ = ["STEP", "AgentRuns", "identity"]

_VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "history_digest"})
_NOT_IDENTITY = frozenset({"continue_from"})

STEP = "agent"
"""The name of the one step of an agent run."""


def identity(run_input: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a run's input: the input without what does not make another run.

    The volatile fields of the history's messages (``timestamp``, ``run_id``,
    ``conversation_id``, ``history_digest`` of a message, ``timestamp`` of a part: what a
    rebuild or another run sets anew) and the input's ``continue_from`` are left out. Nothing
    inside a part's content or a tool call's arguments is left out.
    """
    history = run_input.get("message_history")
    out = {k: v for k, v in run_input.items() if k not in _NOT_IDENTITY}
    if isinstance(history, list):
        out["message_history"] = [_message(m) for m in history]
    return out


def _message(message: object) -> object:
    if not isinstance(message, Mapping):
        return message
    out = {k: v for k, v in message.items() if k not in _VOLATILE}
    parts = out.get("parts")
    if isinstance(parts, list):
        out["parts"] = [
            {k: v for k, v in p.items() if k != "timestamp"} if isinstance(p, Mapping) else p
            for p in parts
        ]
    return out


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

    async def stored(self, run_id: str) -> WorkflowRow | None:
        """The stored run `run_id` of this agent, or None when it is not stored.

        Raises:
            WorkflowMismatchError: `run_id` is stored from another definition.
        """
        row = await self._engine.store.get_workflow(run_id)
        if row is not None and row.definition != self.definition.name:
            raise WorkflowMismatchError(
                f"run_id {run_id!r} is a stored run of {row.definition!r}, not of agent "
                f"{self.definition.name!r}; use a new run_id"
            )
        return row

    async def start(self, run_id: str, run_input: dict[str, Any]) -> bool:
        """Store the run `run_id` with `run_input` unless it is stored with the same identity.

        Returns:
            True if this call stored it; False if it was stored already (its stored input,
            the same run, is kept).

        Raises:
            WorkflowMismatchError: `run_id` is stored with another input (the first
                difference named: ``input['prompt']: 'Hello' vs 'Hi'``) or from another
                definition; nothing is changed.
        """
        # The engine stores a new run, or leaves one stored with this very input, in one
        # store operation; only a run stored with another input (or definition) is read back,
        # to compare identities (a history rebuilt with new timestamps is the same run).
        try:
            return await self._engine.start(self.definition, run_id, run_input)
        except WorkflowMismatchError:
            row = await self.stored(run_id)
            if row is None:
                raise
        self._check_same(run_id, row.input, run_input)
        return False

    async def run(self, run_id: str, run_input: dict[str, Any]) -> RunResult:
        """Start the run `run_id` with `run_input` (if new) and run it; return its `RunResult`.

        A stored run continues (a crash), reports its wait, or returns its recorded result.

        Raises:
            WorkflowMismatchError: As `start`.
        """
        await self.start(run_id, run_input)
        return await self._engine.run(run_id)

    @staticmethod
    def _check_same(run_id: str, stored: Any, given: dict[str, Any]) -> None:
        if not isinstance(stored, Mapping):
            stored = {"input": stored}
        before, now = identity(stored), identity(given)
        if before != now:
            raise WorkflowMismatchError(
                f"run_id {run_id!r} is a stored run of another input (stored vs given: "
                f"{first_difference(before, now, 'input')}); use a new run_id for a new turn"
            )
