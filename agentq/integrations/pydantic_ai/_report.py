"""A run's `RunResult` as the `AgentRun` a `DurableAgent` reports.

The recorded result is JSON (the agent's output and its usage); the report gives them as
pydantic-ai does: the output validated again as the output type (the run's ``output_type``
given to this call, else the agent's), the usage as a `RunUsage`. The validator of the output
type reported last is kept (building one is a pydantic schema build, ~16 µs for ``str``, at
every report otherwise) while the next report's type is the very same hashable object (a
class, a union: immutable); a list or an output marker, which could change in place, gets a
new one each time. The run's messages are not
stored with its result (see `_replay`): those of the attempt that completed the run in this
call when there was one (`AgentStep.take`), else rebuilt read-only from its log: the same
parts either way. The tree is HTML built when read (`AgentRun.tree_html`).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from agentq.integrations.pydantic_ai._options import RunOptions, output_adapter
from agentq.integrations.pydantic_ai._results import USAGE, AgentRun, pending_with_children
from agentq.integrations.pydantic_ai._step import AgentStep, Finished
from agentq.store import DurableStore
from agentq.workflows import RunResult, RunStatus

__all__ = ["Reporter"]

_log = logging.getLogger(__name__)


class Reporter:
    """Makes the `AgentRun` of a run of one agent.

    Args:
        agent: The pydantic-ai agent (its ``output_type`` when the call gives none).
        name: The agent's name in the log.
        step: The agent's step (its read-only replay rebuilds a run's messages).
        store: The engine's store.
    """

    def __init__(
        self, agent: Agent[Any, Any], name: str, step: AgentStep[Any], store: DurableStore
    ) -> None:
        self._agent = agent
        self._name = name
        self._step = step
        self._store = store
        # The output type reported last and its validator (see the module's docstring).
        self._adapter: tuple[Any, TypeAdapter[Any]] | None = None

    async def messages(
        self, run_id: str, run_input: dict[str, Any], options: RunOptions | None = None
    ) -> list[ModelMessage]:
        """A completed run's messages rebuilt from its log (`DurableAgent.messages`)."""
        return await self._step.replay(run_id, run_input, options)

    async def report(
        self,
        result: RunResult,
        options: RunOptions | None,
        finished: Finished | None = None,
    ) -> AgentRun:
        """Return the `AgentRun` of `result`.

        Args:
            result: The run's workflow result.
            options: The run options given to this call (its output type, its model object
                for the rebuild of the messages), or None.
            finished: What the attempt that completed the run in this call handed on
                (`AgentStep.take`): its messages, and its call rows when all had ended; or
                None: a completed run's messages are then rebuilt from its log, and the
                rows read from the store.

        Returns:
            The `AgentRun`: typed output and `RunUsage` when completed.
        """
        run_id = result.workflow_id
        out = result.output if isinstance(result.output, dict) else {}
        completed = result.status is RunStatus.COMPLETED
        messages = None if finished is None else finished.messages
        stored = out.get("messages")  # runs recorded before results left them out
        if stored is not None:
            messages = ModelMessagesTypeAdapter.validate_python(stored)
        elif not completed:
            messages = []
        elif messages is None:
            messages = []
            row = await self._store.get_workflow(run_id)
            try:
                assert row is not None  # a completed result is a stored run
                messages = await self.messages(run_id, dict(row.input), options)
            except Exception:  # the output stands; say why the messages are missing
                _log.warning("run %r: its messages cannot be rebuilt", run_id, exc_info=True)
        known = None if finished is None or not completed else finished.calls
        rows = list(known) if known is not None else await self._store.calls(run_id)
        pending = await pending_with_children(self._store, self._name, run_id, rows)
        return AgentRun(
            run_id,
            result.status,
            self._output(run_id, out.get("output"), options) if completed else None,
            messages,
            USAGE.validate_python(out.get("usage") or {}),
            pending,
            result.reason,
            result,
            tuple(rows),
        )

    def _output(self, run_id: str, recorded: Any, options: RunOptions | None) -> Any:
        """The recorded output validated as the output type; its JSON if it does not fit."""
        given = None if options is None else options.output_type
        spec = self._agent.output_type if given is None else given
        adapter = self._adapter_of(spec)
        if adapter is None:
            return recorded
        try:
            return adapter.validate_python(recorded)
        except Exception:
            _log.warning(
                "run %r: its recorded output does not validate as %r; reported as its JSON",
                run_id, spec, exc_info=True,
            )
            return recorded

    def _adapter_of(self, spec: Any) -> TypeAdapter[Any] | None:
        """The validator of the output type `spec` (`output_adapter`), the one kept when `spec`
        is the very hashable object reported last, else a new one (kept if `spec` is hashable
        and one was built)."""
        kept = self._adapter
        if kept is not None and kept[0] is spec:
            return kept[1]
        adapter = output_adapter(spec)
        try:
            hash(spec)
        except TypeError:  # a list, an output marker: may change in place, so not kept
            return adapter
        if adapter is not None:  # none built (a forward reference) may build later
            self._adapter = (spec, adapter)
        return adapter
