"""`DurableAgent`: a pydantic-ai `Agent` whose runs are agentq workflows.

One run is one workflow (id: the ``run_id``) of one step, ``agent``, which runs the agent
with `AgentqDurability` added to the run: model requests and tool calls are durable calls,
approvals durable waits. The workflow input is the prompt and the message history (JSON,
pydantic-ai's ``ModelMessagesTypeAdapter``); the step's output is the agent's output and its
token usage (JSON too), not the run's messages: they grow with every tool return and could
go over the store's per-value limit after the run's side effects; `DurableAgent.messages`
rebuilds them read-only from the log (`_replay`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import AgentDepsT

from agentq.errors import NotWaitingError, UnknownWorkflowError
from agentq.integrations.pydantic_ai._approval import approval_input
from agentq.integrations.pydantic_ai._capability import AgentqDurability
from agentq.integrations.pydantic_ai._fork import fork_run
from agentq.integrations.pydantic_ai._inputs import (
    ArgsChecker,
    history_json,
    request_input_names,
)
from agentq.integrations.pydantic_ai._results import (
    AgentRun,
    PendingApproval,
    pending_of,
    waiting_call,
)
from agentq.integrations.pydantic_ai._runs import STEP, AgentRuns
from agentq.integrations.pydantic_ai._step import AgentStep
from agentq.integrations.pydantic_ai.tree import run_tree_html
from agentq.queue import Priority
from agentq.workflows import RunResult, RunStatus, WorkflowEngine

__all__ = ["AgentRun", "DurableAgent", "PendingApproval"]

_log = logging.getLogger(__name__)


class DurableAgent(Generic[AgentDepsT]):
    """Run a pydantic-ai `Agent` durably on an agentq `WorkflowEngine`.

    Each run is a workflow whose id is the ``run_id``: every model request is a durable call
    in the ``model_priority`` lane (whose permits are the provider's concurrency budget), keyed
    by its position (``model:0``, ``model:1``, ...) and recording its token usage; every tool
    call one in the ``tool_priority`` lane, keyed by the model's ``tool_call_id``
    (``tool:<id>``) and labelled ``{"kind": "tool", "tool": name}``. A run stopped by a
    crash, a kernel restart or an approval continues where it stopped: completed requests
    and tool calls answer from the log. A replay that makes other calls than the log
    recorded fails the run with `ReplayDivergenceError`; the check compares the sequence
    (position, kind, tool name, tool_call_id), never the messages a request sends, so
    instructions that change on their own (today's date) do not make a run diverge.

    Tools that need approval (``requires_approval=True``, `ApprovalRequired` raised by a tool
    or a hook) wait in ``ctx.wait_for_input`` under ``approval:<tool_call_id>`` with
    ``details={"tool", "args", "tool_call_id", "agent"}``: `pending_approvals` lists them
    from the store, and `approve`, `deny`, ``engine.resume(run_id, "agent", {"approved":
    bool, "note": str, "override_args": dict | None}, key=...)`` or the `ApprovalPanel` answer.

    Building a `DurableAgent` registers a `WorkflowDef` named after the agent (one step,
    ``agent``) with the engine. So any process that builds the same `DurableAgent` on the same
    store can run, resume, retry or recover its runs by id (``engine.run(run_id)``,
    ``engine.resume``, ``recover(engine)``, ``engine.serve()``, the `ApprovalPanel`). Two
    `DurableAgent`s of one name on one engine share that definition: the one built last
    serves every run of that name (give agents with other tools or models other names).

    The agent itself is not changed: the durability capability is added to each run.

    ``deps`` are live objects (clients, connections) and are never stored. An attempt of a run
    uses, in this order: the deps given for that ``run_id`` in this process (to `run`,
    `approve` or `deny`); else ``deps_factory(run_id)``; else ``None``. So a run continued
    where no `run(deps=)` was called (after a kernel restart, by `engine.resume`, the
    `ApprovalPanel`, ``recover``, ``serve`` or ``engine.retry``) gets its deps from
    `deps_factory`. Deps given for a run are released when its step ends (completed or
    failed, whichever path ran it); `run(deps=)` on a run that failed, was cancelled or waits
    keeps them for the run's continuation (``engine.retry``, an approval).

    Args:
        agent: The pydantic-ai agent.
        engine: The engine whose queue runs the calls and whose store keeps the log.
        name: The agent's name in the log (approval details, the workflow input); defaults
            to ``agent.name``. Keep it stable: a run is continued by the agent of that name.
        model_priority: The lane of model requests.
        tool_priority: The lane of tool calls.
        deps_factory: ``run_id -> deps``, called for each attempt of a run that has no deps
            given in this process; None: such attempts get ``deps=None``.
        tool_timeout: Seconds (by the queue's clock) each tool call may run, or None for no
            limit: the `Job` timeout of every tool call. A call over it is cancelled and
            fails (reason ``timeout``); the tool's error reaches pydantic-ai, and the run
            fails unless the agent handles it. Bound stuck tools with it: a cancelled run's
            tool call runs on (see docs/agents.md).

    Raises:
        ValueError: Neither `name` nor ``agent.name`` is set, or `tool_timeout` is not a
            positive number.
        TypeError: `agent` is not a pydantic-ai `Agent`, `engine` not a `WorkflowEngine`, or
            `deps_factory` not callable.

    Example:
        >>> durable = DurableAgent(agent, engine)
        >>> run = await durable.run("What is 2 + 3?", run_id="ticket-42")
        >>> run.status, run.output
        (<RunStatus.COMPLETED: 'completed'>, 'The answer is 5.')
    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        engine: WorkflowEngine,
        *,
        name: str | None = None,
        model_priority: Priority = Priority.HIGH,
        tool_priority: Priority = Priority.MEDIUM,
        deps_factory: Callable[[str], AgentDepsT] | None = None,
        tool_timeout: float | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"DurableAgent needs a pydantic_ai.Agent, got {agent!r}")
        if not isinstance(engine, WorkflowEngine):
            raise TypeError(f"DurableAgent needs a WorkflowEngine, got {engine!r}")
        agent_name = name or agent.name
        if not agent_name:
            raise ValueError(
                "DurableAgent needs a name: give the Agent a name (Agent(..., name='support')) "
                "or pass name= to DurableAgent; it identifies the agent's runs in the log"
            )
        if deps_factory is not None and not callable(deps_factory):
            raise TypeError(f"deps_factory must be a callable run_id -> deps, got {deps_factory!r}")
        if tool_timeout is not None and (
            isinstance(tool_timeout, bool)
            or not isinstance(tool_timeout, int | float)
            or not 0 < tool_timeout < float("inf")
        ):
            raise ValueError(
                f"tool_timeout must be a positive number of seconds, got {tool_timeout!r}"
            )
        self._agent = agent
        self._engine = engine
        self._name = agent_name
        self._args = ArgsChecker(agent)
        capability: AgentqDurability[AgentDepsT] = AgentqDurability(
            name=agent_name,
            model_priority=Priority(model_priority),
            tool_priority=Priority(tool_priority),
            check_args=self._args.problem,
            input_events=request_input_names(agent),
            tool_timeout=None if tool_timeout is None else float(tool_timeout),
        )
        self._step = AgentStep(agent, agent_name, capability, deps_factory, engine.store)
        self._runs = AgentRuns(engine, agent_name, self._step.run)

    @property
    def name(self) -> str:
        """The agent's name in the log."""
        return self._name

    @property
    def agent(self) -> Agent[AgentDepsT, Any]:
        """The wrapped pydantic-ai agent."""
        return self._agent

    @property
    def engine(self) -> WorkflowEngine:
        """The engine the runs run on."""
        return self._engine

    async def run(
        self,
        prompt: str,
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
        deps: AgentDepsT | None = None,
    ) -> AgentRun:
        """Run the agent on `prompt` as the workflow `run_id`, or continue that run.

        A new `run_id` starts a run. A run that completed returns its recorded result
        without running anything; one that waits for an approval reports it (answer with
        `approve` / `deny`); one left by a crash continues, its completed calls answered
        from the log. A new user turn is a new `run_id` (pass the previous run's
        ``messages`` as `message_history`).

        Args:
            prompt: The user's prompt.
            run_id: The run's id, unique per run (a workflow id).
            message_history: Earlier messages of the conversation, stored with the run: a
                previous run's ``messages`` (pydantic-ai messages, or their JSON form).
            deps: The agent's dependencies for this run in this process (not stored; see the
                class docstring). Given for a run that failed, was cancelled or waits, they
                are kept for its continuation (``engine.retry``, an approval).

        Returns:
            An `AgentRun`: completed (with output), waiting (with pending approvals),
            failed or cancelled (with the reason).

        Raises:
            TypeError: `prompt` is not a str, or `message_history` not a sequence of messages
                (an element named by its index); nothing is stored.
            ValueError: An element of `message_history` is a dict that is not a message's
                JSON (its index named); nothing is stored.
            InvalidKeyError: `run_id` is not a valid id.
            PayloadError: The prompt and history are over the store's 1 MiB limit for one
                value (nothing is stored).
            WorkflowMismatchError: `run_id` is a stored run of another prompt, history or
                agent (nothing is changed).
            StoreError: The store failed; the run can be continued later.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {prompt!r}")
        history = history_json(message_history)
        run_input = {"agent": self._name, "prompt": prompt, "message_history": history}
        self._step.give(run_id, deps)
        result = await self._runs.run(run_id, run_input)
        if result.status is RunStatus.COMPLETED:
            self._step.release(run_id)  # nothing continues a completed run
        return await self._report(result)

    async def fork(
        self,
        run_id: str,
        new_run_id: str,
        *,
        at: str,
        replace: Mapping[str, Any] | None = None,
        deps: AgentDepsT | None = None,
    ) -> AgentRun:
        """Run the same conversation as `run_id` up to the call `at`, then live (docs/agents.md,
        "Forks"): the model requests and tool calls before `at` answer from `run_id`'s log,
        copied into the fork's own; `at` and what follows run again.

        Args:
            run_id: A stored run of this agent (any state); never changed.
            new_run_id: The fork's run id (must not exist).
            at: A key the run's log records: a model request (``"model:3"``) or a tool call.
            replace: ``{key: value}`` for calls at or before `at`: a ``ModelResponse`` for a
                model request, what the tool returned for a tool call; replacing `at`
                itself continues after it with the edited value.
            deps: As for `run`.

        Raises:
            UnknownWorkflowError, WorkflowMismatchError (`new_run_id` exists), ValueError /
                TypeError (`at` or a `replace` key not a call of the run or after `at`, a
                value of the wrong type): nothing is stored.
        """
        self._step.give(new_run_id, deps)
        try:
            result = await fork_run(self._engine, self._name, run_id, new_run_id, at, replace)
        except BaseException:
            self._step.release(new_run_id)
            raise
        if result.status is RunStatus.COMPLETED:
            self._step.release(new_run_id)  # kept for a fork that waits or failed, as `run`
        return await self._report(result)

    async def pending_approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """List the waits of this agent's runs, from the store: approvals and external events.

        Each says its ``kind``: ``"approval"`` (a tool call waiting for a decision) or
        ``"event"`` (a ``RequestInput`` / ``wait_for_external_event`` wait).

        Works in any process on the same store (a notebook restarted, a CLI).

        Args:
            run_id: Only this run's; None for every run of this agent.

        Returns:
            One `PendingApproval` per waiting tool call, in the order they were asked.

        Raises:
            StoreError: The store failed.
        """
        rows = await self._engine.store.calls(run_id)
        return [p for p in (pending_of(r, self._name) for r in rows) if p is not None]

    async def approve(
        self,
        run_id: str,
        tool_call_id: str | None = None,
        *,
        note: str = "",
        override_args: dict[str, Any] | None = None,
        deps: AgentDepsT | None = None,
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
        return await self._answer(run_id, tool_call_id, answer, deps)

    async def deny(
        self,
        run_id: str,
        tool_call_id: str | None = None,
        *,
        note: str = "",
        deps: AgentDepsT | None = None,
    ) -> AgentRun:
        """Deny a waiting tool call (the model reads `note`) and continue the run.

        Args and errors as `approve`.
        """
        return await self._answer(run_id, tool_call_id, approval_input(False, note), deps)

    async def _answer(
        self,
        run_id: str,
        tool_call_id: str | None,
        answer: dict[str, Any],
        deps: AgentDepsT | None,
    ) -> AgentRun:
        chosen = await waiting_call(self._engine.store, self._name, run_id, tool_call_id)
        if answer["override_args"] is not None:
            self._args.check(run_id, chosen.tool, answer["override_args"])
        self._step.give(run_id, deps)
        try:
            result = await self._engine.resume(run_id, STEP, answer, key=chosen.key)
        except NotWaitingError:
            if deps is not None:
                self._step.release(run_id)
            raise
        assert isinstance(result, RunResult)  # this engine holds the agent's definition
        return await self._report(result)

    async def messages(self, run_id: str) -> list[ModelMessage]:
        """Return a completed run's messages (the history included), rebuilt from its log.

        The run's result does not store them (see docs/agents.md, "Sizes"): the agent runs
        once more, read-only, every model request, tool call and approval answered from its
        recorded row; nothing is sent or run. Deps: as for a continued run (`deps_factory`,
        else None); instructions and output validators run again.

        Args:
            run_id: A completed run of this agent.

        Returns:
            The messages, as pydantic-ai's ``result.all_messages()`` gave them.

        Raises:
            UnknownWorkflowError: No run `run_id` of this agent in the store.
            NotInLog: The log does not hold an outcome the replay needs (a run that did not
                complete).
            ReplayDivergenceError: The agent no longer makes the recorded calls.
        """
        row = await self._engine.store.get_workflow(run_id)
        if row is None or row.definition != self._name:
            raise UnknownWorkflowError(f"no run {run_id!r} of agent {self._name!r} in the store")
        return await self._step.replay(run_id, dict(row.input))

    async def _report(self, result: RunResult) -> AgentRun:
        out = result.output if isinstance(result.output, dict) else {}
        stored = out.get("messages")  # runs recorded before results left them out
        messages: list[ModelMessage] = []
        if stored is not None:
            messages = ModelMessagesTypeAdapter.validate_python(stored)
        elif result.status is RunStatus.COMPLETED:
            try:
                messages = await self.messages(result.workflow_id)
            except Exception:  # the output stands; say why the messages are missing
                _log.warning("run %r: its messages cannot be rebuilt", result.workflow_id,
                             exc_info=True)
        rows = await self._engine.store.calls(result.workflow_id)
        pending = [p for p in (pending_of(r, self._name) for r in rows) if p is not None]
        return AgentRun(
            result.workflow_id,
            result.status,
            out.get("output"),
            messages,
            dict(out.get("usage") or {}),
            pending,
            result.reason,
            result,
            run_tree_html(result.workflow_id, rows),
        )
