"""`AgentqDurability`: pydantic-ai's durability capability, with agentq as the engine.

pydantic-ai hands every durable operation of a run to an operation backend
(``CallableOperationBackend.execute``). Ours makes each one an agentq durable call of the
agent step (``ctx.call``), keyed by its place in the run (see `_journal`):

- a model request: ``model:<n>``, in the ``model_priority`` lane, labelled ``{"kind":
  "model", "model", "request"}`` (its usage recorded);
- a tool call: ``tool:<n>.<i>:<tool_call_id>``, in the ``tool_priority`` lane, labelled
  ``{"kind": "tool", "tool", "tool_call_id", "args"}``;
- anything else: ``op:<name>:<n>``, in the ``tool_priority`` lane, ``{"kind": "op"}``.

``n`` is the number of the model response the call came from, ``i`` the call's position
among its parts. Argument validation and the event-stream handler run inline (no outside
effect); a streamed request hands its live events to the run's listeners and handler
(`_live`). Values are stored as JSON (pydantic-ai's JSON codec), so the log stays JSON; a
tool return the codec cannot make JSON fails its call with a `PayloadError` naming the tool
and the type, and the run at once. A tool call that ran in this attempt hands pydantic-ai the
value its body returned where its JSON would rebuild the same (`_units.LiveCodec`). The tool calls
of one model response run concurrently (``parallel_ordered_events``: results and events in the
model's order), each its own call.

In a run that streams (`_live`), a model request streams inside its durable call: its live
events go to the run's listeners through `_model_stream_event_handler` (pydantic-ai's hook
for the handler of a model request's live stream). Each tool call and other operation runs
its body with its `ParentCall` current (`_parent`): a `DurableAgent` run made there is a
child run of this one.

Approvals are answered inside the run (`handle_deferred_tool_calls`, `_approval.ask`): each
tool call that needs approval waits in ``ctx.wait_for_input`` under
``approval:<n>.<i>:<tool_call_id>``, and an external-event wait (``RequestInput``,
``wait_for_external_event``) waits the same way under ``event:<name>:<n>`` (`_waits`).
Before each model request the tool returns it carries are put in the order of their calls
(`_approval.in_call_order`), as the model receives them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    EventStreamHandlerId,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
    external_event_scope,
)
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT, RunContext, ToolDefinition
from pydantic_core import PydanticSerializationError

from agentq.errors import JobFailed, PayloadError
from agentq.integrations.pydantic_ai._approval import ArgsProblem, ask, in_call_order
from agentq.integrations.pydantic_ai._journal import (
    CURRENT,
    Operation,
    RunJournal,
    label_of,
    model_usage,
)
from agentq.integrations.pydantic_ai._live import SINK, UNIT, Handler
from agentq.integrations.pydantic_ai._parent import in_call
from agentq.integrations.pydantic_ai._units import Live, LiveCodec, call_args, guarded, place_of
from agentq.integrations.pydantic_ai._waits import EventWaiter
from agentq.queue import Job, Priority

__all__ = ["AgentqDurability"]


_CALL: ContextVar[ToolCallPart | None] = ContextVar("agentq_pydantic_ai_call", default=None)
"""The tool call part whose execution runs in this task (set by `wrap_tool_execute`)."""


class _Backend(CallableOperationBackend[None]):
    """Runs each operation of a run as a durable call of the current agent step."""

    def __init__(
        self,
        name: str,
        model_priority: Priority,
        tool_priority: Priority,
        tool_timeout: float | None = None,
    ) -> None:
        super().__init__(
            namer=JournalOperationNamer(name),
            config=RoleBasedOperationConfig(model=None, event=None, capability=None, tool=None),
        )
        self._model_priority = model_priority
        self._tool_priority = tool_priority
        self._tool_timeout = tool_timeout

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: None,
    ) -> object:
        journal = CURRENT.get()
        if journal is None or isinstance(
            operation_id, ToolsetValidateToolArgumentsId | EventStreamHandlerId
        ):
            return await body()
        if isinstance(operation_id, ModelRequestId):
            op = journal.next_model()
            label = label_of(op, model=operation_id.model_name)
            sink = SINK.get()
            if operation_id.streaming and sink is not None:
                body = sink.wrap(op.key, body)  # its live events reach the run's listeners
            return await _call(journal, op, label, body, self._model_priority, model_usage)
        if isinstance(operation_id, ToolsetCallToolId):
            tool_name, args, run_context = cache_key[0], cache_key[1], cache_key[2]
            assert isinstance(tool_name, str) and isinstance(run_context, RunContext)
            call_id = str(run_context.tool_call_id)
            place = place_of(run_context.messages, _CALL.get(), call_id)
            approved = run_context.tool_call_approved
            op = journal.tool(tool_name, call_id, place, call_args(args), approved=approved)
            label = label_of(op, tool_call_id=call_id)
            body = in_call(journal.ctx, op.key, body)  # a sub-agent run there is a child
            return await _call(
                journal, op, label, body, self._tool_priority, None, self._tool_timeout
            )
        op = journal.other(name)
        body = in_call(journal.ctx, op.key, body)
        return await _call(journal, op, label_of(op), body, self._tool_priority, None)


async def _call(
    journal: RunJournal,
    op: Operation,
    label: dict[str, Any],
    body: Callable[[], Awaitable[object]],
    priority: Priority,
    usage: Callable[[Any], Mapping[str, Any] | None] | None,
    timeout: float | None = None,  # noqa: ASYNC109 (a Job's timeout, by the queue's clock)
) -> object:
    # The fingerprint names the operation, not pydantic-ai's closure: the key already says
    # which call of the run it is, and the journal checks kind and tool against the log.
    ran: list[Live] = []  # the body's result, if it ran in this attempt
    job = Job(
        op.key, partial(_stored, op, body, ran), priority,
        fingerprint=("pydantic-ai", op.kind, op.tool), timeout=timeout,
    )
    try:
        stored = await journal.ctx.call(job, label=label, usage=usage)
    except JobFailed as exc:
        # pydantic-ai's own errors (a provider's HTTP error, an unexpected model behaviour)
        # must reach it as themselves: its fallbacks and retries match on their types.
        if isinstance(exc.__cause__, Exception):
            raise exc.__cause__ from None
        raise
    return ran[-1] if ran else stored  # the value itself, else its JSON from the log


async def _stored(op: Operation, body: Callable[[], Awaitable[object]], ran: list[Live]) -> object:
    """Run `body` (it ends with the codec making its value JSON, or a `Live` of both) and give
    the queue the JSON, noting a `Live` in `ran`: a value the codec cannot make JSON fails with
    a final `PayloadError` naming the operation and the type, since running it again could
    only fail the same way."""
    try:
        result = await body()
    except PydanticSerializationError as exc:
        error = PayloadError(
            f"{op.describe()} returned a value that cannot be stored as JSON: {exc}",
            field="output",
        )
        setattr(error, "retryable", False)  # noqa: B010 (final: see agentq.retry.classify)
        raise error from exc
    if type(result) is Live:
        ran.append(result)
        return result.json
    return result


@dataclass(init=False)
class AgentqDurability(BaseDurabilityCapability[AgentDepsT]):
    """The durability capability a `DurableAgent` adds to each run of its agent.

    Inside an agent step (a `RunJournal` is current) every model request and tool call is a
    durable call; outside one, the agent runs as it would without it.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="agentq",
        durable_unit_noun="call",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        sequential_tools_in_durable_context=False,
    )

    def __init__(
        self,
        *,
        name: str,
        model_priority: Priority,
        tool_priority: Priority,
        check_args: ArgsProblem | None = None,
        tool_timeout: float | None = None,
        input_events: frozenset[str] = frozenset(),
        models: Mapping[str, Model] | None = None,
    ) -> None:
        """Create the capability for the agent named `name`, with its calls' lanes.

        `check_args(tool, args)` says what is wrong with an approval's ``override_args``
        (None: nothing); such an answer is asked again like any invalid answer.
        `tool_timeout` is the seconds each tool call may run (a `Job` timeout), or None.
        The payloads of the external events named in `input_events` (``RequestInput``'s)
        must be ``DeferredToolResults``; another payload is asked again.
        `models` are the `Model` objects a run may use besides the agent's own, by name
        (pydantic-ai refuses an object it was not given here).
        """
        super().__init__(name=name, models=models)
        self._model_priority = model_priority
        self._tool_priority = tool_priority
        self._check_args = check_args
        self._tool_timeout = tool_timeout
        self._input_events = input_events
        # One backend for every run (pydantic-ai asks for it at each binding and request):
        # it holds only the name and the lanes, never a run's state.
        self._backend = _Backend(name, model_priority, tool_priority, tool_timeout)
        # The copy bound to the agent last (`for_agent`) and what it was bound from.
        self._bound: tuple[tuple[object, ...], AbstractCapability[AgentDepsT]] | None = None
        # A bound copy's model operations by (model id, model name): None on a copy that is
        # not bound (`for_agent` gives each bound copy its own).
        self._model_operations: dict[tuple[str | None, str], Any] | None = None

    def for_agent(self, agent: AbstractAgent[AgentDepsT, Any]) -> AbstractCapability[AgentDepsT]:
        """The capability bound to `agent`, bound once and kept while the agent's model,
        toolsets and capabilities stay the same objects.

        pydantic-ai binds a capability given to a run at each run (a copy holding the agent's
        wrapped toolsets, models and capability operations); bound at the agent's construction
        it serves every run, as this one does: it keeps no run's state (the run's is in its
        `RunJournal`, its context variables and the toolsets' per-run copies).
        """
        made_from = (agent, agent.model, *agent.toolsets, agent.root_capability)
        bound = self._bound
        if bound is not None and len(bound[0]) == len(made_from) and all(
            a is b for a, b in zip(bound[0], made_from, strict=True)
        ):
            return bound[1]
        self._bound = None  # not copied into the new bound copy (no chain of old ones)
        capability = super().for_agent(agent)
        if isinstance(capability, AgentqDurability):
            capability._model_operations = {}
        self._bound = (made_from, capability)
        return capability

    def _bind_model_operations(
        self, backend: DurableOperationBackend[Any], *, model_id: str | None, model_name: str
    ) -> Any:
        """The model operations of requests to `model_id`, bound once per bound copy.

        pydantic-ai binds them again at each model request of a callable engine (their names
        may depend on the request's model); they hold nothing of a request (its messages and
        run context are their parameters), so ours are kept by model id and name.
        """
        memo = self._model_operations
        if memo is None or backend is not self._backend:
            return super()._bind_model_operations(backend, model_id=model_id, model_name=model_name)
        operations = memo.get((model_id, model_name))
        if operations is None:
            operations = super()._bind_model_operations(
                backend, model_id=model_id, model_name=model_name
            )
            memo[(model_id, model_name)] = operations
        return operations

    @property
    def in_durable_context(self) -> bool:
        """Whether an agent step attempt runs in this task."""
        return CURRENT.get() is not None

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """A run without history: its conversation id derived from its run id (the same on
        every attempt and in a rebuild of its messages), as pydantic-ai's engines derive it."""
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    def get_durable_operation_backend(self) -> _Backend:
        """Return the backend that makes each operation a durable call (one per capability:
        it holds no run's state; the current run is the task's `RunJournal`)."""
        return self._backend

    def _typed_result_codec(self, result_type: object) -> Any:
        """pydantic-ai's JSON codec of `result_type`, handing back a result that ran in this
        attempt as it is where its JSON would rebuild the same (`_units.LiveCodec`)."""
        codec = super()._typed_result_codec(result_type)
        return LiveCodec(codec.dump, codec.load)

    def _durable_run_context(self, ctx: RunContext[AgentDepsT]) -> RunContext[AgentDepsT]:
        """The run context user code gets inside a durable call: pydantic-ai's guarded copy
        (``enqueue``/``cancel`` raise), made without `dataclasses.replace` (`_units.guarded`)."""
        copy = guarded(ctx, self.durable_unit_noun, self.durable_container_noun)
        return super()._durable_run_context(ctx) if copy is None else copy

    def _model_stream_event_handler(self) -> Handler | None:
        """Inside a streamed model request of a streaming run, the handler that hands its
        live events to the run's listeners and handler (`_live`); else pydantic-ai's."""
        unit = UNIT.get()
        return super()._model_stream_event_handler() if unit is None else unit[0].unit

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Install the durable external-event waiter around the run, and run the tool calls
        of each model response concurrently with results and events in the model's order."""
        journal = CURRENT.get()
        if journal is None:
            return await super().wrap_run(ctx, handler=handler)
        waiter = EventWaiter(journal, self._tool_priority, self._input_events)
        with external_event_scope(waiter), ToolManager.parallel_execution_mode(
            "parallel_ordered_events"
        ):
            return await super().wrap_run(ctx, handler=handler)

    async def before_model_request(
        self, ctx: RunContext[AgentDepsT], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Keep the request's tool returns in the order the model receives them (`in_call_order`:
        the run's messages, live or rebuilt, are what the model was sent)."""
        if CURRENT.get() is not None:
            in_call_order(ctx.messages)
        return await super().before_model_request(ctx, request_context)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Any:
        """Note which part of the model response this execution is (its place in the run)."""
        token = _CALL.set(call)
        try:
            return await handler(args)
        finally:
            _CALL.reset(token)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[AgentDepsT], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Answer each tool call that needs approval through a durable wait."""
        journal = CURRENT.get()
        if journal is None or not requests.approvals:
            return None
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:
            place = place_of(ctx.messages, call, call.tool_call_id)
            approvals[call.tool_call_id] = await ask(journal, call, place, self._check_args)
        return requests.build_results(approvals=approvals)

    @classmethod
    def get_serialization_name(cls) -> Literal[None]:
        """Not loadable from an agent spec: a `DurableAgent` adds it to each run."""
        return None
