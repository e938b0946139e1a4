"""`DurableAgent`: a pydantic-ai `Agent` whose runs are agentq workflows.

One run is one workflow (id: the ``run_id``) of one step, ``agent``, which runs the agent
with `AgentqDurability` added to the run: model requests and tool calls are durable calls,
approvals durable waits. The workflow input is the prompt, the message history (JSON,
pydantic-ai's ``ModelMessagesTypeAdapter``) and the run options that are JSON (`_options`);
the step's output is the agent's output and its usage (JSON too), not the run's messages
(they grow with every tool return, and could go over the per-value limit).
`AgentRun.messages` are those of the attempt that completed the run in the call that
reports it (`AgentStep.expect` / `take`), else rebuilt read-only from the log (`_replay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Unpack

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT

from agentq.errors import UnknownWorkflowError
from agentq.integrations.pydantic_ai._capability import AgentqDurability
from agentq.integrations.pydantic_ai._decisions import Decisions
from agentq.integrations.pydantic_ai._fork import fork_run
from agentq.integrations.pydantic_ai._inputs import ArgsChecker, request_input_names
from agentq.integrations.pydantic_ai._live import LiveRuns
from agentq.integrations.pydantic_ai._many import run_group
from agentq.integrations.pydantic_ai._options import RunOptions, RunOptionsKwargs, check_models
from agentq.integrations.pydantic_ai._parent import PARENT, run_child
from agentq.integrations.pydantic_ai._replay import check_completed
from agentq.integrations.pydantic_ai._report import Reporter
from agentq.integrations.pydantic_ai._results import (
    AgentRun,
    PendingApproval,
)
from agentq.integrations.pydantic_ai._runs import AgentRuns
from agentq.integrations.pydantic_ai._step import AgentStep
from agentq.integrations.pydantic_ai._streams import Streams
from agentq.integrations.pydantic_ai._turns import Turns
from agentq.queue import Priority
from agentq.workflows import RunStatus, WorkflowEngine

__all__ = ["AgentRun", "DurableAgent", "PendingApproval"]


class DurableAgent(Streams[AgentDepsT], Decisions[AgentDepsT]):
    """Run a pydantic-ai `Agent` durably on an agentq `WorkflowEngine`.

    Each run is a workflow whose id is the ``run_id``: every model request is a durable call
    in the ``model_priority`` lane (``model:<n>``, recording its token usage), every tool call
    one in the ``tool_priority`` lane, keyed by its place in the run (``tool:<n>.<i>:<id>``:
    part ``i`` of model response ``n``, so a reused ``tool_call_id`` is another call); the
    tool calls of one response run concurrently. `run_stream`, `run_stream_events` and
    `iter` run it as `run` does and stream it to the caller live (`partial` gives the text
    of the requests streaming now). A run made inside a tool call of another durable run
    is a child run of it (its id derived from the call). After a crash, a restart or an approval the
    run continues: completed calls answer from the log; a replay making other calls (kind,
    place, tool, arguments) fails with `ReplayDivergenceError` (messages are not compared).

    Tools that need approval wait under ``approval:<n>.<i>:<id>`` with ``details={"tool",
    "args", "tool_call_id", "agent"}``: `pending_approvals` lists them from the store;
    `approve`, `deny`, ``engine.resume(run_id, "agent", {"approved": bool, "note": str,
    "override_args": dict | None}, key=...)`` or the `ApprovalPanel` answer.

    Building a `DurableAgent` registers a `WorkflowDef` named after the agent (one step,
    ``agent``): any process that builds the same `DurableAgent` on the same store runs,
    resumes, retries, recovers and serves its runs by id. Two `DurableAgent`s of one name on
    one engine share it (the one built last serves every run of that name). The agent itself
    is not changed: the durability capability is added to each run.

    What is live is never stored: ``deps`` and the run options that are not JSON (a `Model`
    object not registered in `models`, an ``output_type``, ``toolsets``, an
    ``event_stream_handler``). An attempt uses those given for its ``run_id`` in this process
    (to `run`, `start`, `approve`, `deny`), else ``deps_factory(run_id)`` for deps; they are
    released when the run's step ends completed or failed, kept while it waits. A run
    continued elsewhere (``recover``, ``serve``, the `ApprovalPanel`) is given them there.
    See docs/agents.md.

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
        models: Model objects by name: ``run(model="fast")`` stores the name and runs with
            ``models["fast"]``, in any process that registers it; ``run(model=obj)`` with a
            registered object stores its name. A name not registered is pydantic-ai's
            (``"openai:gpt-5.2"``).

    Raises:
        ValueError: Neither `name` nor ``agent.name`` is set, or `tool_timeout` is not a
            positive number.
        TypeError: `agent` is not a pydantic-ai `Agent`, `engine` not a `WorkflowEngine`,
            `deps_factory` not callable, or `models` not a dict of names to `Model`s.

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
        models: Mapping[str, Model] | None = None,
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
        self._models = check_models(models)
        capability = partial(
            AgentqDurability[AgentDepsT],
            name=agent_name,
            model_priority=Priority(model_priority),
            tool_priority=Priority(tool_priority),
            check_args=self._args.problem,
            input_events=request_input_names(agent),
            tool_timeout=None if tool_timeout is None else float(tool_timeout),
        )
        self._live = LiveRuns()
        self._step = AgentStep(
            agent, agent_name, capability, deps_factory, engine.store, self._models, self._live)
        self._reporter = Reporter(agent, agent_name, self._step, engine.store)
        self._runs = AgentRuns(engine, agent_name, self._step.run)
        self._turns = Turns(agent_name, self._models, self._runs, self._reporter, engine.store)

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
        prompt: str | Sequence[UserContent],
        *,
        run_id: str | None = None,
        message_history: Sequence[ModelMessage] | None = None,
        continue_from: str | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AgentRun:
        """Run the agent on `prompt` as the workflow `run_id`, or continue that run.

        A new `run_id` starts a run. A run that completed returns its recorded result
        without running anything; one that waits for an approval reports it (answer with
        `approve` / `deny`); one left by a crash continues, its completed calls answered
        from the log. A new user turn is a new `run_id`: ``continue_from=`` the previous
        run's id (its messages are rebuilt from the log), or its ``messages`` as
        `message_history`. The same call again (the same prompt, history rebuilt or not,
        options) is the same run.

        Args:
            prompt: The user's prompt: a str, or a sequence of user content (str,
                `ImageUrl`, `BinaryContent`, `DocumentUrl`, ...), stored with the run.
            run_id: The run's id, unique per run (a workflow id). Inside a tool call (or
                another durable operation) of another durable agent run, the run is a
                **child run** of it (docs/agents.md, "Sub-agents"): None derives its id
                from that call (``<parent id>/<call key>``, then ``...#1``, ``#2`` for
                the next runs the call makes); an id ``<parent id>/<key>`` is kept; another
                id makes a run of its own, not linked to the parent.
            message_history: Earlier messages of the conversation, stored with the run: a
                previous run's ``messages`` (pydantic-ai messages, or their JSON form).
                Their timestamps and pydantic-ai run ids are not part of the run's
                identity.
            continue_from: The id of a completed run of this agent whose messages (its
                history included) are this run's history, rebuilt read-only from its log
                (its stored options, this call's ``model``, ``toolsets``, ``output_type``).
            deps: The agent's dependencies for this run in this process (never stored;
                kept for the continuation of a run that failed, was cancelled or waits).
            **options: pydantic-ai's per-run options (``model``, ``model_settings``,
                ``usage_limits``, ``output_type``, ``instructions``, ``toolsets``,
                ``event_stream_handler``). Those that are JSON (a model name, or a model
                registered with ``models=``; a settings dict; usage limits; instructions as
                a str) are stored with the run, so a continuation anywhere uses them; the
                others are kept in this process like `deps` and given again elsewhere.

        Returns:
            An `AgentRun`: completed (with the typed output), waiting (with pending
            approvals), failed or cancelled (with the reason).

        Raises:
            TypeError: `prompt` is not a str or a sequence of user content, an option of the
                wrong type, or `message_history` not a sequence of messages (an element
                named by its index); no `run_id` outside another run; nothing is stored.
            ValueError: Both `continue_from` and `message_history`; `continue_from` is this
                run or not completed; an element of `message_history` is a dict that is not
                a message's JSON (its index named); nothing is stored.
            UnknownWorkflowError: `continue_from` is not a stored run of this agent.
            InvalidKeyError: `run_id` is not a valid id.
            PayloadError: The prompt and history are over the store's 1 MiB limit for one
                value (the sizes named; nothing is stored): pass images by URL.
            WorkflowMismatchError: `run_id` is a stored run of another prompt, history,
                options or agent (the first difference named; nothing is changed).
            StoreError: The store failed; the run can be continued later.
        """
        parent = PARENT.get()
        key = None if parent is None else parent.child_key(run_id)
        if parent is not None and key is not None:
            child_id, given = f"{parent.run_id}/{key}", RunOptions(**options)
            return await run_child(
                parent, key, self._runs.definition, self._engine,
                self._turns.input(prompt, child_id, message_history, continue_from, given),
                lambda: self._step.give(child_id, deps, given),
                lambda: self._complete(child_id),
            )
        if run_id is None:
            raise TypeError(
                "DurableAgent.run needs a run_id (only a run made inside a tool call of "
                "another durable run derives one from that call)"
            )
        await self.start(prompt, run_id=run_id, message_history=message_history,
                         continue_from=continue_from, deps=deps, **options)
        return await self._complete(run_id)

    async def run_many(
        self,
        prompts: Mapping[str, str | Sequence[UserContent]],
        *,
        group_id: str,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> dict[str, AgentRun]:
        """Run the agent on many prompts as one run group (docs/agents.md, "Many prompts").

        Prompt ``key`` is the run ``<group_id>/<key>`` (`engine.group(group_id)` sees them);
        all run at once, as many attempts together as the engine's lane allows. Called again
        with the same prompts (after a crash, in any process), only the runs that did not
        succeed run again; completed ones return their records.

        Args:
            prompts: Key (no ``/``) to prompt, as `run` takes it.
            group_id: The group's id (no ``/``).
            deps, options: For every run, as `run` takes them.

        Returns:
            Each key's `AgentRun`, in the order of `prompts`.

        Raises:
            KeyConflictError: The group is stored with another prompt or options for a key.
            ValueError: Empty `prompts`, a ``/`` in a key, or the group stored with another
                set of keys; nothing is stored.
            TypeError, PayloadError, StoreError: As `run`.
        """
        return await run_group(
            self._engine, self._runs.definition, prompts, group_id,
            lambda prompt, run_id: self.start(prompt, run_id=run_id, deps=deps, **options),
            lambda prompt, run_id: self.run(prompt, run_id=run_id, deps=deps, **options),
        )

    async def start(
        self,
        prompt: str | Sequence[UserContent],
        *,
        run_id: str,
        message_history: Sequence[ModelMessage] | None = None,
        continue_from: str | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> str:
        """Store the run `run_id` for serving workers, without running it.

        Its step stays pending: ``engine.serve()`` (``agentq serve``) in any process that
        built this `DurableAgent` runs it, ``engine.run(run_id)`` or `run` with the same
        arguments too. The stored options go with it; `deps` and the options that are not
        stored are kept for attempts in this process only. A `run_id` stored with the same
        identity is left as it is.

        Args and errors as `run`.

        Returns:
            `run_id`.
        """
        given = RunOptions(**options)
        run_input = await self._turns.input(prompt, run_id, message_history, continue_from, given)
        await self._runs.start(run_id, run_input)
        self._step.give(run_id, deps, given)
        return run_id

    async def fork(
        self,
        run_id: str,
        new_run_id: str,
        *,
        at: str,
        replace: Mapping[str, Any] | None = None,
        deps: AgentDepsT | None = None,
        **options: Unpack[RunOptionsKwargs],
    ) -> AgentRun:
        """Run `run_id`'s conversation up to the call `at`, then live (docs/agents.md, "Forks").

        The calls before `at` answer from `run_id`'s log, copied into the fork's own; `at` and
        what follows run again, with `options` (given in this process, like `approve`'s; the
        fork stores the parent's options).

        Args:
            run_id: A stored run of this agent (any state); never changed.
            new_run_id: The fork's run id (must not exist).
            at: A key the run's log records: a model request (``"model:3"``) or a tool call.
            replace: ``{key: value}`` for calls at or before `at`: a ``ModelResponse`` for a
                model request, what the tool returned for a tool call; replacing `at`
                itself continues after it with the edited value.
            deps, options: As for `run`.

        Raises:
            UnknownWorkflowError, WorkflowMismatchError (`new_run_id` exists), ValueError /
                TypeError (`at` or a `replace` key not a call of the run or after `at`, a
                model response before `at` with other tool calls, a value of the wrong
                type), PayloadError (a value that is not JSON): nothing is stored.
        """
        live = self._step.give(new_run_id, deps, RunOptions(**options))
        try:
            result = await fork_run(self._engine, self._name, run_id, new_run_id, at, replace)
        except BaseException:
            self._step.release(new_run_id)
            raise
        if result.status is RunStatus.COMPLETED:
            self._step.release(new_run_id)  # kept for a fork that waits or failed, as `run`
        return await self._reporter.report(result, live)

    async def messages(
        self, run_id: str, **options: Unpack[RunOptionsKwargs]
    ) -> list[ModelMessage]:
        """Return a completed run's messages (the history included), rebuilt from its log.

        The run's result does not store them (see docs/agents.md, "Sizes"): the agent runs
        once more, read-only, every model request, tool call and approval answered from its
        recorded row; nothing is sent or run. Deps: as for a continued run (`deps_factory`,
        else None); instructions and output validators run again.

        Args:
            run_id: A completed run of this agent.
            **options: The run options that are not stored, when the run needs them to be
                replayed (a `Model` object when the agent has none and none is registered,
                its ``toolsets``, its ``output_type``); the stored ones are used as stored.

        Returns:
            The messages, as pydantic-ai's ``result.all_messages()`` gave them (the
            requests' pydantic-ai run id is the run's id; their timestamps the rebuild's).

        Raises:
            UnknownWorkflowError: No run `run_id` of this agent in the store.
            MessagesUnavailableError: The run did not complete (its state named), or the log
                does not hold an outcome the rebuild needs.
            ReplayDivergenceError: The agent no longer makes the recorded calls.
        """
        row = await self._engine.store.get_workflow(run_id)
        if row is None or row.definition != self._name:
            raise UnknownWorkflowError(f"no run {run_id!r} of agent {self._name!r} in the store")
        check_completed(run_id, row.state)
        return await self._reporter.messages(run_id, dict(row.input), RunOptions(**options))
