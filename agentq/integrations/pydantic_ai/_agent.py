"""`DurableAgent`: a pydantic-ai `Agent` whose runs are agentq workflows.

One run is one workflow (id: the ``run_id``) of one step, ``agent``, which runs the agent
with `AgentqDurability` added to the run: model requests and tool calls are durable calls,
approvals durable waits. The workflow input is the prompt and the message history (JSON,
pydantic-ai's ``ModelMessagesTypeAdapter``); the step's output is the agent's output, the
run's messages and its token usage (JSON too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import AgentDepsT
from pydantic_core import to_jsonable_python

from agentq.integrations.pydantic_ai._approval import approval_input
from agentq.integrations.pydantic_ai._capability import AgentqDurability
from agentq.integrations.pydantic_ai._journal import CURRENT, RunJournal
from agentq.integrations.pydantic_ai._runs import STEP, AgentRuns
from agentq.integrations.pydantic_ai.tree import run_tree_html
from agentq.queue import Priority
from agentq.store import CallKind, CallRow, CallState
from agentq.workflows import RunResult, RunStatus, StepContext, WorkflowEngine

__all__ = ["AgentRun", "DurableAgent", "PendingApproval"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A tool call of an agent run waiting for a decision.

    Attributes:
        run_id: The run (its workflow id).
        tool: The tool's name.
        args: The arguments the model gave (a JSON object).
        tool_call_id: The model's id of the call.
        key: The wait's key (``approval:<tool_call_id>``); give it to `engine.resume`.
        reason: The question shown (``approve tool call <tool>?``; after an invalid
            answer, what was wrong with it first).
        step: The step to resume: ``"agent"``.
    """

    run_id: str
    tool: str
    args: dict[str, Any]
    tool_call_id: str
    key: str
    reason: str
    step: str = STEP


@dataclass(frozen=True, slots=True)
class AgentRun:
    """What `DurableAgent.run` (and `approve` / `deny`) return.

    Attributes:
        run_id: The run (its workflow id).
        status: completed, waiting (for an approval or an event), failed or cancelled.
        output: The agent's output as JSON (a str, or a model's fields as a dict) when
            completed, else None. The same live and read back from the log.
        messages: The run's messages (all of them, the history included) when completed.
        usage: Token figures of the run's model requests (``input_tokens``,
            ``output_tokens``, ``requests``) when completed, else empty.
        pending: The tool calls waiting for a decision (status waiting).
        reason: Why it waits, failed or was cancelled, else None.
        result: The workflow's `RunResult`.
        tree_html: The run as a tree (workflow → model requests → tool calls, with tokens),
            HTML (`agentq.integrations.pydantic_ai.tree.run_tree_html`); what a notebook
            shows for an `AgentRun` at the end of a cell.
    """

    run_id: str
    status: RunStatus
    output: Any
    messages: list[ModelMessage]
    usage: dict[str, int]
    pending: list[PendingApproval]
    reason: str | None
    result: RunResult = field(repr=False)
    tree_html: str = field(default="", repr=False)

    def _repr_html_(self) -> str:
        """The run's result card (status, reason, output) above its tree."""
        return f"{self.result._repr_html_()}{self.tree_html}"


class DurableAgent(Generic[AgentDepsT]):
    """Run a pydantic-ai `Agent` durably on an agentq `WorkflowEngine`.

    Each run is a workflow whose id is the ``run_id``: every model request is a durable call
    in the ``model_priority`` lane (whose permits are the provider's concurrency budget), keyed
    by its position (``model:0``, ``model:1``, ...) and recording its token usage; every tool
    call one in the ``tool_priority`` lane, keyed by the model's ``tool_call_id``
    (``tool:<id>``) and labelled ``{"kind": "tool", "tool": name}``. A run stopped by a
    crash, a kernel restart or an approval continues where it stopped: completed requests
    and tool calls answer from the log. A replay that makes other calls than the log
    recorded fails the run with `ReplayDivergenceError`.

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
    ``deps`` are live objects (clients, connections) and are never stored: the run uses the
    deps given to the `run` call of this process for that ``run_id``, else ``None``.

    Args:
        agent: The pydantic-ai agent.
        engine: The engine whose queue runs the calls and whose store keeps the log.
        name: The agent's name in the log (approval details, the workflow input); defaults
            to ``agent.name``. Keep it stable: a run is continued by the agent of that name.
        model_priority: The lane of model requests.
        tool_priority: The lane of tool calls.

    Raises:
        ValueError: Neither `name` nor ``agent.name`` is set.
        TypeError: `agent` is not a pydantic-ai `Agent`, or `engine` not a `WorkflowEngine`.

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
        self._agent = agent
        self._engine = engine
        self._name = agent_name
        self._capability: AgentqDurability[AgentDepsT] = AgentqDurability(
            name=agent_name,
            model_priority=Priority(model_priority),
            tool_priority=Priority(tool_priority),
        )
        self._deps: dict[str, AgentDepsT] = {}
        self._runs = AgentRuns(engine, agent_name, self._step)

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
            message_history: Earlier messages of the conversation, stored with the run.
            deps: The agent's dependencies for this run in this process (not stored).

        Returns:
            An `AgentRun`: completed (with output), waiting (with pending approvals),
            failed or cancelled (with the reason).

        Raises:
            TypeError: `prompt` is not a str.
            InvalidKeyError: `run_id` is not a valid id.
            WorkflowMismatchError: `run_id` is a stored run of another prompt, history or
                agent (nothing is changed).
            StoreError: The store failed; the run can be continued later.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {prompt!r}")
        history = (
            None
            if message_history is None
            else ModelMessagesTypeAdapter.dump_python(list(message_history), mode="json")
        )
        run_input = {"agent": self._name, "prompt": prompt, "message_history": history}
        if deps is not None:
            self._deps[run_id] = deps
        result = await self._runs.run(run_id, run_input)
        if result.status is not RunStatus.WAITING:
            self._deps.pop(run_id, None)  # the run ended: its deps are not needed again
        return await self._report(result)

    async def pending_approvals(self, run_id: str | None = None) -> list[PendingApproval]:
        """List the tool calls of this agent's runs that wait for a decision, from the store.

        Works in any process on the same store (a notebook restarted, a CLI).

        Args:
            run_id: Only this run's; None for every run of this agent.

        Returns:
            One `PendingApproval` per waiting tool call, in the order they were asked.

        Raises:
            StoreError: The store failed.
        """
        rows = await self._engine.store.calls(run_id)
        return [p for p in map(self._pending, rows) if p is not None]

    async def approve(
        self,
        run_id: str,
        tool_call_id: str | None = None,
        *,
        note: str = "",
        override_args: dict[str, Any] | None = None,
    ) -> AgentRun:
        """Approve a waiting tool call (optionally with edited arguments) and continue the run.

        Args:
            run_id: The run.
            tool_call_id: The call to approve; None when the run waits for exactly one.
            note: A note recorded with the decision.
            override_args: Arguments to run the tool with instead of the model's.

        Returns:
            The continued run's `AgentRun`.

        Raises:
            LookupError: No such waiting call (or several, and no `tool_call_id`).
            TypeError: A value of the wrong type.
            NotWaitingError: The run moved on meanwhile.
        """
        answer = approval_input(True, note, override_args)
        return await self._answer(run_id, tool_call_id, answer)

    async def deny(
        self, run_id: str, tool_call_id: str | None = None, *, note: str = ""
    ) -> AgentRun:
        """Deny a waiting tool call (the model reads `note`) and continue the run.

        Args and errors as `approve`.
        """
        return await self._answer(run_id, tool_call_id, approval_input(False, note))

    async def _answer(
        self, run_id: str, tool_call_id: str | None, answer: dict[str, Any]
    ) -> AgentRun:
        pending = await self.pending_approvals(run_id)
        chosen = [p for p in pending if tool_call_id in (None, p.tool_call_id)]
        if len(chosen) != 1:
            ids = [p.tool_call_id for p in pending]
            raise LookupError(
                f"run {run_id!r} has no single waiting tool call {tool_call_id!r}; waiting: {ids}"
            )
        result = await self._engine.resume(run_id, STEP, answer, key=chosen[0].key)
        assert isinstance(result, RunResult)  # this engine holds the agent's definition
        return await self._report(result)

    def _pending(self, row: CallRow) -> PendingApproval | None:
        details = row.details or {}
        if (
            row.kind is not CallKind.WAIT
            or row.state is not CallState.WAITING
            or not row.key.startswith("approval:")
            or details.get("agent") != self._name
        ):
            return None
        args = details.get("args")
        return PendingApproval(
            row.workflow_id,
            str(details.get("tool")),
            args if isinstance(args, dict) else {},
            str(details.get("tool_call_id")),
            row.key,
            row.reason or "",
        )

    async def _step(self, ctx: StepContext) -> dict[str, Any]:
        journal = RunJournal.of(ctx, self._name, await self._engine.store.calls(ctx.workflow_id))
        token = CURRENT.set(journal)
        try:
            stored = ctx.input["message_history"]
            history = None if stored is None else ModelMessagesTypeAdapter.validate_python(stored)
            result = await self._agent.run(
                ctx.input["prompt"],
                message_history=history,
                deps=self._deps.get(ctx.workflow_id),  # type: ignore[arg-type]
                capabilities=[self._capability],
            )
        finally:
            CURRENT.reset(token)
        usage = result.usage
        return {
            "output": to_jsonable_python(result.output),
            "messages": ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"),
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "requests": usage.requests,
            },
        }

    async def _report(self, result: RunResult) -> AgentRun:
        out = result.output if isinstance(result.output, dict) else {}
        stored = out.get("messages")
        messages = [] if stored is None else ModelMessagesTypeAdapter.validate_python(stored)
        rows = await self._engine.store.calls(result.workflow_id)
        pending = [p for p in map(self._pending, rows) if p is not None]
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
