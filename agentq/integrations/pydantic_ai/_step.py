"""`AgentStep`: the body of a run's one step, ``agent``, and the deps each run gets.

An attempt of the step runs the pydantic-ai agent on the run's stored input (the prompt, the
message history and the stored run options) with `AgentqDurability` added, the run's
`RunJournal` current (so each model request and tool call is a durable call, checked against
the log) and what was given for the run in this process: its deps (else
``deps_factory(run_id)``, else None) and the run options that are not stored (a `Model`
object, an output type, toolsets, an event-stream handler; see `_options`). What is given is
live, never stored; it is released when the step ends completed or failed, and kept while the
run waits (an approval continues it). A completed run's messages are those of the attempt
that completed it in this process when a caller asked for them beforehand (`expect` /
`take`: held from the attempt's end until taken, never longer), else rebuilt by running the
agent once more, read-only, over its log (`LogReader`); with them, the run's call rows as that
attempt knew them (`Finished.calls`), so that its report need not read them again.

`current_run_id` is the run's id inside an attempt: the same on every attempt, in every
process, for a tool's own idempotency keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.tools import AgentDepsT
from pydantic_core import to_jsonable_python

from agentq.errors import WaitForInput
from agentq.integrations.pydantic_ai._capability import AgentqDurability
from agentq.integrations.pydantic_ai._inputs import prompt_of
from agentq.integrations.pydantic_ai._journal import CURRENT, RunJournal
from agentq.integrations.pydantic_ai._live import SINK, LiveRuns
from agentq.integrations.pydantic_ai._options import RunOptions, agent_kwargs
from agentq.integrations.pydantic_ai._replay import LogReader
from agentq.integrations.pydantic_ai._results import USAGE
from agentq.store import CallKind, CallRow, CallState, DurableStore
from agentq.workflows import StepContext

__all__ = ["AgentStep", "Finished", "current_run_id"]


def current_run_id() -> str | None:
    """Return the id of the durable agent run this code runs in, or None outside one.

    Inside a `DurableAgent` run (a tool, an instruction function, an output validator) it
    is the run's ``run_id``: the same on every attempt (a resume after an approval, a
    recovery after a crash, a retry) and in every process, where pydantic-ai's
    ``ctx.run_id`` changes with each attempt. Use it in a tool's own idempotency key
    (``f"{current_run_id()}/{ctx.tool_call_id}"``) for a service the tool calls.

    Returns:
        The run id, or None when no durable agent run is running in this task.
    """
    journal = CURRENT.get()
    return None if journal is None else journal.ctx.workflow_id


@dataclass(frozen=True, slots=True)
class Finished:
    """What the attempt that completed a run in this process hands to its report.

    Attributes:
        messages: The run's messages (its history included).
        calls: The run's call rows as `DurableStore.calls` lists them (by ``first_seq``), as
            the attempt knew them at its end, when every row is a call that has ended (then
            nothing changes them any more); else None (the report reads them).
    """

    messages: list[ModelMessage]
    calls: tuple[CallRow, ...] | None


_ENDED = frozenset({CallState.COMPLETED, CallState.FAILED})


def ended_calls(rows: list[CallRow]) -> tuple[CallRow, ...] | None:
    """`rows` in the store's order when each is a call that has ended, else None (a wait or
    a call still running may change after the attempt: read it from the store)."""
    if all(row.kind is CallKind.CALL and row.state in _ENDED for row in rows):
        return tuple(sorted(rows, key=lambda row: row.first_seq))
    return None


@dataclass(slots=True)
class _Given(Generic[AgentDepsT]):
    """What was given for one run in this process: its deps and its live run options."""

    deps: AgentDepsT | None = None
    options: RunOptions | None = None


class AgentStep(Generic[AgentDepsT]):
    """The ``agent`` step of a `DurableAgent`'s runs, and the deps given per run.

    Args:
        agent: The pydantic-ai agent.
        name: The agent's name in the log.
        capability: Makes the durability capability added to each run of the agent, given
            the `Model` objects a run may use by name (``capability(models=...)``).
        deps_factory: ``run_id -> deps`` for an attempt whose run has no deps given in this
            process; None: such attempts get ``deps=None``.
        store: The engine's store (its calls are read at each attempt).
        models: The models registered by name (a stored model name finds its object here).
        live: The listeners of the agent's runs in this process: an attempt of a run that
            is listened to, or has an ``event_stream_handler``, streams (`_live`).

    All methods run on the engine's event loop.
    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        name: str,
        capability: Callable[..., AgentqDurability[AgentDepsT]],
        deps_factory: Callable[[str], AgentDepsT] | None,
        store: DurableStore,
        models: Mapping[str, Model] | None = None,
        live: LiveRuns | None = None,
    ) -> None:
        self._agent = agent
        self._live = live or LiveRuns()
        self._name = name
        self._make_capability = capability
        self._deps_factory = deps_factory
        self._store = store
        self._models: Mapping[str, Model] = dict(models or {})
        self._capability = capability(models=self._models)
        self._given: dict[str, _Given[AgentDepsT]] = {}
        # run id -> what the attempt that completed it hands on (None: not yet), for the
        # callers that `expect` it; an entry lives from `expect` to `take`
        self._finished: dict[str, Finished | None] = {}

    def give(
        self, run_id: str, deps: AgentDepsT | None, options: RunOptions | None = None
    ) -> RunOptions | None:
        """Keep `deps` and `options` for the attempts of `run_id` in this process.

        None keeps nothing new (what was given earlier stays); an option given here replaces
        the one given earlier.

        Returns:
            The run options now given for the run (these over earlier ones), or None.
        """
        given = self._given.get(run_id) or _Given()
        if deps is not None:
            given.deps = deps
        if options is not None and options != RunOptions():
            given.options = options.over(given.options)
        if given.deps is not None or given.options is not None:
            self._given[run_id] = given
        return given.options

    def release(self, run_id: str) -> None:
        """Forget what was given for `run_id` (nothing continues it, or it is given again)."""
        self._given.pop(run_id, None)

    def expect(self, run_id: str) -> None:
        """Keep the messages (and ended calls) of the attempt of `run_id` that completes next
        in this process, for `take` (which the caller must call, whatever happens, to free
        them)."""
        self._finished.setdefault(run_id, None)

    def take(self, run_id: str) -> Finished | None:
        """What was kept for `run_id` since `expect`, and forget it; None when no attempt
        completed it in this process since (a recorded result, another process)."""
        return self._finished.pop(run_id, None)

    def sizes(self) -> dict[str, int]:
        """How many runs have deps or options given, and messages expected (for tests)."""
        return {"given": len(self._given), "finished": len(self._finished)}

    async def run(self, ctx: StepContext) -> dict[str, Any]:
        """One attempt of the run `ctx.workflow_id`: the agent's output and token usage.

        Returns:
            ``{"output": JSON, "usage": RunUsage as JSON}`` (``requests``, ``tool_calls``,
            ``input_tokens``, ``output_tokens``, ... as pydantic-ai counts them).

        Raises:
            WaitForInput: The run waits (an approval, an external event); its deps are kept.
            Exception: What the agent raised; the run's deps are released.
        """
        rows = await ctx.recorded()  # the attempt's one read of the log, shared with its calls
        try:
            result = await self._run_agent(RunJournal.of(ctx, self._name, rows), ctx.input)
        except WaitForInput:
            raise  # the run waits: its deps are needed again
        except Exception:
            self.release(ctx.workflow_id)  # the run failed (a retry may give them again)
            raise
        self.release(ctx.workflow_id)  # the run completed
        if ctx.workflow_id in self._finished:  # a caller reports this run: no rebuild, no read
            self._finished[ctx.workflow_id] = Finished(
                list(result.all_messages()), ended_calls(await ctx.recorded())
            )
        # Not the messages: they grow with each tool return and could go over the store's
        # limit after every side effect is done (see _replay); `DurableAgent` rebuilds them.
        return {
            "output": to_jsonable_python(result.output),
            "usage": USAGE.dump_python(result.usage, mode="json"),
        }

    async def replay(
        self, run_id: str, run_input: dict[str, Any], options: RunOptions | None = None
    ) -> list[ModelMessage]:
        """The messages of the completed run `run_id` (input `run_input`), rebuilt read-only
        from its log (see `DurableAgent.messages`, which documents the errors); `options`
        are the live options of the run (its model object, output type, toolsets), else
        the ones given in this process."""
        rows = await self._store.calls(run_id)
        options = (options or RunOptions()).for_rebuild(run_id, rows, self._agent.output_type)
        journal = RunJournal.of(LogReader(run_id, rows), self._name, rows)
        result = await self._run_agent(journal, run_input, options, read_only=True)
        return list(result.all_messages())

    def given_options(self, run_id: str) -> RunOptions | None:
        """The run options given for `run_id` in this process, or None."""
        given = self._given.get(run_id)
        return None if given is None else given.options

    def _capability_for(self, model: object) -> AgentqDurability[AgentDepsT]:
        """The capability of a run with `model`: one that holds it when it is a `Model`
        object given in this process and not registered (pydantic-ai refuses a `Model`
        object its durability capability was not given)."""
        if not isinstance(model, Model) or any(m is model for m in self._models.values()):
            return self._capability
        return self._make_capability(models={**self._models, "given": model})

    def _deps_of(self, run_id: str) -> AgentDepsT | None:
        """The deps of an attempt of `run_id`: given in this process, else the factory's."""
        given = self._given.get(run_id)
        if given is not None and given.deps is not None:
            return given.deps
        return None if self._deps_factory is None else self._deps_factory(run_id)

    async def _run_agent(
        self,
        journal: RunJournal,
        run_input: dict[str, Any],
        options: RunOptions | None = None,
        *,
        read_only: bool = False,
    ) -> Any:
        """Run the agent on the run's input with `journal` current; its `AgentRunResult`.

        A `read_only` run (the rebuild of the messages) gives no event-stream handler and
        streams to no listener: the run's events were handed out by its attempts. Another
        attempt streams when the run is listened to or has a handler (`LiveRuns.sink`).
        """
        run_id = journal.ctx.workflow_id
        given = self.given_options(run_id)
        options = given if options is None else options.over(given)
        if read_only and options is not None:
            options = replace(options, event_stream_handler=None)
        kwargs = agent_kwargs(run_input.get("options"), options, self._models)
        sink = None if read_only else self._live.sink(run_id, kwargs.get("event_stream_handler"))
        if sink is not None:
            kwargs["event_stream_handler"] = sink.handler
        token = CURRENT.set(journal)
        sink_token = SINK.set(sink)
        try:
            stored = run_input["message_history"]
            history = None if stored is None else ModelMessagesTypeAdapter.validate_python(stored)
            return await self._agent.run(
                prompt_of(run_input["prompt"]),
                message_history=history,
                deps=self._deps_of(run_id),  # type: ignore[arg-type]
                run_id=run_id,  # ctx.run_id and messages' run id: the same on every attempt
                capabilities=[self._capability_for(kwargs.get("model"))],
                **kwargs,
            )
        finally:
            SINK.reset(sink_token)
            CURRENT.reset(token)
