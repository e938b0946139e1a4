"""The stored input of a turn: the prompt, its history and the run options, checked first.

A run's input is ``{"agent", "prompt", "message_history"}``, plus ``"options"`` (the run
options that are JSON, `_options`) and ``"continue_from"`` (the run the history was taken
from) only when given, so the input of a run stored before they existed is unchanged. A turn
that continues a conversation from the log (``continue_from=previous``) takes the previous
run's messages, rebuilt read-only from its log, as its history; a run already stored from
that previous run keeps its stored history (nothing is rebuilt again). Everything is checked
(types, sizes) before anything is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model

from agentq.errors import UnknownWorkflowError
from agentq.integrations.pydantic_ai._inputs import check_size, history_json, prompt_json
from agentq.integrations.pydantic_ai._options import RunOptions
from agentq.integrations.pydantic_ai._report import Reporter
from agentq.integrations.pydantic_ai._runs import AgentRuns
from agentq.store import DurableStore, WorkflowState

__all__ = ["Turns"]


class Turns:
    """Builds the stored input of an agent's runs (see the module docstring).

    Args:
        name: The agent's name in the log.
        models: The models registered by name.
        runs: The agent's runs on the engine.
        reporter: Rebuilds a previous run's messages.
        store: The engine's store.
    """

    def __init__(
        self,
        name: str,
        models: Mapping[str, Model],
        runs: AgentRuns,
        reporter: Reporter,
        store: DurableStore,
    ) -> None:
        self._name = name
        self._models = models
        self._runs = runs
        self._reporter = reporter
        self._store = store

    async def input(
        self,
        prompt: object,
        run_id: str,
        message_history: Sequence[ModelMessage] | None,
        continue_from: str | None,
        options: RunOptions,
    ) -> dict[str, Any]:
        """The stored input of the run `run_id`, checked (`DurableAgent.run` names the
        errors: TypeError, ValueError, UnknownWorkflowError, PayloadError)."""
        stored_prompt = prompt_json(prompt)
        if continue_from is None:
            history = history_json(message_history)
        elif message_history is not None:
            raise ValueError(
                f"give continue_from ({continue_from!r}) or message_history, not both: "
                "continue_from takes the history from the log"
            )
        else:
            history = await self._history_of(continue_from, run_id, options)
        run_input: dict[str, Any] = {
            "agent": self._name, "prompt": stored_prompt, "message_history": history}
        stored_options = options.stored(self._models)
        if stored_options:  # only then: the input of runs stored without options is kept
            run_input["options"] = stored_options
        if continue_from is not None:
            run_input["continue_from"] = continue_from
        check_size(run_input)
        return run_input

    async def _history_of(
        self, previous: str, run_id: str, options: RunOptions
    ) -> list[Any] | None:
        """The history of a run continuing `previous`: the stored one if the run is stored
        from it, else `previous`'s messages rebuilt from its log."""
        if not isinstance(previous, str):
            raise TypeError(f"continue_from must be a run id (str), got {previous!r:.80}")
        if previous == run_id:
            raise ValueError(f"run {run_id!r} cannot continue from itself")
        this = await self._runs.stored(run_id)
        if this is not None and isinstance(this.input, dict) and (
            this.input.get("continue_from") == previous
        ):
            return this.input.get("message_history")
        row = await self._store.get_workflow(previous)
        if row is None or row.definition != self._name:
            raise UnknownWorkflowError(
                f"continue_from: no run {previous!r} of agent {self._name!r} in the store")
        if row.state is not WorkflowState.COMPLETED:
            raise ValueError(
                f"continue_from: run {previous!r} is {row.state.value}, not completed; a "
                "conversation continues from a completed run")
        replayed = RunOptions(model=options.model, toolsets=options.toolsets)
        return history_json(await self._reporter.messages(previous, dict(row.input), replayed))
