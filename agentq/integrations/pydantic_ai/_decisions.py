"""`Decisions`: the approval verbs of `DurableAgent` (its base class): list the waiting tool
calls of its runs, approve (optionally with edited arguments) or deny one and continue the run.

Private to `agentq.integrations.pydantic_ai._agent`: `DurableAgent` provides the attributes
declared here (its engine, name, argument checker, step and reporter).
"""

from __future__ import annotations

from typing import Any, Generic, Unpack

from pydantic_ai.tools import AgentDepsT

from agentq.errors import NotWaitingError, WorkflowClosedError
from agentq.integrations.pydantic_ai._approval import approval_input
from agentq.integrations.pydantic_ai._inputs import ArgsChecker
from agentq.integrations.pydantic_ai._options import RunOptions, RunOptionsKwargs
from agentq.integrations.pydantic_ai._report import Reporter
from agentq.integrations.pydantic_ai._results import (
    AgentRun,
    PendingApproval,
    pending_with_children,
    waiting_call,
)
from agentq.integrations.pydantic_ai._runs import STEP
from agentq.integrations.pydantic_ai._step import AgentStep
from agentq.workflows import RunResult, WorkflowEngine

__all__ = ["Decisions"]


class Decisions(Generic[AgentDepsT]):
    """The approval verbs of a `DurableAgent` (see `DurableAgent`)."""

    _engine: WorkflowEngine
    _name: str
    _args: ArgsChecker
    _step: AgentStep[AgentDepsT]
    _reporter: Reporter

    async def pending_approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """List the waits of this agent's runs, from the store: approvals and external events.

        Each says its ``kind``: ``"approval"`` (a tool call waiting for a decision) or
        ``"event"`` (a ``RequestInput`` / ``wait_for_external_event`` wait).

        Works in any process on the same store (a notebook restarted, a CLI). The waits of
        the runs' child runs (sub-agents run in their tool calls, of any agent) follow,
        with the child's run id: answer them with the child agent's `approve` / `deny`, or
        ``engine.resume(pending.run_id, "agent", ..., key=pending.key)``.

        Args:
            run_id: Only this run's (and its child runs'); None for every run of this agent.

        Returns:
            One `PendingApproval` per waiting tool call, in the order they were asked; then
            those of child runs.

        Raises:
            StoreError: The store failed.
        """
        return await pending_with_children(self._engine.store, self._name, run_id)

    async def approve(
        self,
        run_id: str,
        tool_call_id: str | None = None,
        *,
        note: str = "",
        override_args: dict[str, Any] | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AgentRun:
        """Approve a waiting tool call (optionally with edited arguments) and continue the run.

        Args:
            run_id: The run.
            tool_call_id: The call to approve; None when the run waits for exactly one.
            note: A note recorded with the decision.
            override_args: The *complete* arguments to run the tool with instead of the
                model's (pydantic-ai's meaning: they replace the model's arguments, they do
                not patch them). Checked against the tool's argument schema before anything
                is recorded.
            deps: The agent's dependencies for the continued run (not stored); None: the
                deps given earlier in this process, else ``deps_factory(run_id)``.
            **options: The run options for the continued run in this process, as `run`
                takes them: give again those that are not stored (a `Model` object, an
                ``output_type``, ``toolsets``, an ``event_stream_handler``) when the run
                continues in another process than the one that started it.

        Returns:
            The continued run's `AgentRun`.

        Raises:
            UnknownWorkflowError: No run `run_id` in the store (or one of another agent).
            NotWaitingError: The run is not waiting for an approval (completed, failed,
                cancelled, waiting for an event, or another caller answered first); its
                state is named. Nothing is recorded.
            LookupError: The run waits for other tool calls than `tool_call_id` (or for
                several, and no `tool_call_id` was given).
            TypeError: A value of the wrong type.
            ValueError: `override_args` do not fit the tool's schema (a field missing, of
                the wrong type, or unknown; named). Nothing is recorded.
        """
        answer = approval_input(True, note, override_args)
        return await self._answer(run_id, tool_call_id, answer, deps, RunOptions(**options))

    async def deny(
        self,
        run_id: str,
        tool_call_id: str | None = None,
        *,
        note: str = "",
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AgentRun:
        """Deny a waiting tool call (the model reads `note`) and continue the run.

        Args and errors as `approve`.
        """
        answer = approval_input(False, note)
        return await self._answer(run_id, tool_call_id, answer, deps, RunOptions(**options))

    async def _answer(
        self,
        run_id: str,
        tool_call_id: str | None,
        answer: dict[str, Any],
        deps: AgentDepsT | None,
        options: RunOptions,
    ) -> AgentRun:
        chosen = await waiting_call(self._engine.store, self._name, run_id, tool_call_id)
        if answer["override_args"] is not None:
            self._args.check(run_id, chosen.tool, answer["override_args"])
        given = options != RunOptions()
        live = self._step.give(run_id, deps, options if given else None)
        self._step.expect(run_id)
        try:
            result = await self._engine.resume(run_id, STEP, answer, key=chosen.key)
        except (NotWaitingError, WorkflowClosedError) as exc:
            if deps is not None or given:
                self._step.release(run_id)
            if isinstance(exc, WorkflowClosedError):  # it closed since `waiting_call` read it
                raise NotWaitingError(f"run {run_id!r}: {exc}") from exc
            raise
        finally:
            finished = self._step.take(run_id)
        assert isinstance(result, RunResult)  # this engine holds the agent's definition
        return await self._reporter.report(result, live, finished)
