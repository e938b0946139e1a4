"""`AgentqDurability`: pydantic-ai's durability capability, with agentq as the engine.

pydantic-ai hands every durable operation of a run to an operation backend
(``CallableOperationBackend.execute``). Ours makes each one an agentq durable call of the
agent step (``ctx.call``), keyed by its place in the run (see `_journal`):

==================  =====================  ==========================  ====================
operation           key                    lane                        label
==================  =====================  ==========================  ====================
model request       ``model:<n>``          ``model_priority``          ``{"kind": "model"}``
tool call           ``tool:<tool_call_id>``  ``tool_priority``          ``{"kind": "tool",
                                                                        "tool": name}``
anything else       ``op:<name>:<n>``      ``tool_priority``           ``{"kind": "op"}``
==================  =====================  ==========================  ====================

Argument validation and the event-stream handler run inline: they have no outside effect and
are the same on every replay. Values cross as JSON (pydantic-ai's JSON codec, its own message
adapters), so the log stays JSON. Tool calls of one model response run one after another, in
the model's order, so that a replay makes its operations in the recorded order.

Approvals are answered inside the run (`handle_deferred_tool_calls`): each tool call that
needs approval (``requires_approval=True``, `ApprovalRequired` from a tool or a hook) waits in
``ctx.wait_for_input`` with ``details={"tool", "args", "tool_call_id", "agent"}``, and an
external-event wait (``RequestInput``, ``wait_for_external_event``) waits the same way under
``event:<name>:<n>``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from pydantic import JsonValue, TypeAdapter, ValidationError
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.capabilities import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    CallableOperationBackend,
    DurabilityEngineSpec,
    DurableOperationId,
    EventStreamHandlerId,
    ExternalEventError,
    ExternalEventWaiter,
    JournalOperationNamer,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
    external_event_scope,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext

from agentq.errors import InputTimeout, JobFailed
from agentq.integrations.pydantic_ai._approval import decide
from agentq.integrations.pydantic_ai._journal import (
    CURRENT,
    Operation,
    RunJournal,
    label_of,
    request_digest,
)
from agentq.queue import Job, Priority

__all__ = ["AgentqDurability"]


def model_usage(output: Any) -> dict[str, Any] | None:
    """Return the token usage of a recorded model response (JSON), or None."""
    if not isinstance(output, Mapping):
        return None
    usage = output.get("usage")
    if not isinstance(usage, Mapping):
        return None
    figures = {k: usage.get(k) for k in ("input_tokens", "output_tokens")}
    numbers = {k: v for k, v in figures.items() if isinstance(v, int)}
    numbers["total_tokens"] = sum(numbers.values())
    model = output.get("model_name")
    return {**numbers, "model": model} if isinstance(model, str) else numbers


ArgsProblem = Callable[[str, Mapping[str, Any]], str | None]
"""``check_args(tool, args)``: what is wrong with `args` for `tool`, or None."""


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
            messages = ModelMessagesTypeAdapter.dump_python(cache_key[1], mode="json")  # type: ignore[arg-type]
            op = journal.next_model(request_digest(messages))
            return await _call(journal, op, body, self._model_priority, model_usage)
        if isinstance(operation_id, ToolsetCallToolId):
            tool_name, run_context = cache_key[0], cache_key[2]
            assert isinstance(tool_name, str) and isinstance(run_context, RunContext)
            op = journal.tool(
                tool_name, str(run_context.tool_call_id), approved=run_context.tool_call_approved
            )
            return await _call(journal, op, body, self._tool_priority, None, self._tool_timeout)
        return await _call(journal, journal.other(name), body, self._tool_priority, None)


async def _call(
    journal: RunJournal,
    op: Operation,
    body: Callable[[], Awaitable[object]],
    priority: Priority,
    usage: Callable[[Any], Mapping[str, Any] | None] | None,
    timeout: float | None = None,  # noqa: ASYNC109 (a Job's timeout, by the queue's clock)
) -> object:
    # The fingerprint names the operation, not pydantic-ai's closure: the key already says
    # which call of the run it is, and the journal checks kind and tool against the log.
    job = Job(
        op.key, body, priority, fingerprint=("pydantic-ai", op.kind, op.tool), timeout=timeout
    )
    try:
        return await journal.ctx.call(job, label=label_of(op), usage=usage)
    except JobFailed as exc:
        # pydantic-ai's own errors (a provider's HTTP error, an unexpected model behaviour)
        # must reach it as themselves: its fallbacks and retries match on their types.
        if isinstance(exc.__cause__, Exception):
            raise exc.__cause__ from None
        raise


class _Waiter(ExternalEventWaiter):
    """`wait_for_external_event` inside an agent run, as an agentq durable wait.

    The payload of a ``RequestInput`` wait (a name in `checked`) must be the JSON form of
    ``DeferredToolResults``; another payload is recorded and asked again under
    ``event:<name>:<n>#<asked>``, its reason saying what was wrong (as a mistyped approval).
    """

    def __init__(
        self, journal: RunJournal, priority: Priority, checked: frozenset[str] = frozenset()
    ) -> None:
        self._journal = journal
        self._priority = priority
        self._checked = checked

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,  # noqa: ASYNC109 (pydantic-ai's signature)
    ) -> JsonValue:
        journal = self._journal
        op = journal.event(name)
        token = f"{journal.ctx.workflow_id}/{op.key}"
        ask_job = Job(
            f"{op.key}:ask", partial(ask, token), self._priority, fingerprint=("ask", name)
        )
        answer = await journal.ctx.call(ask_job, label={"kind": "ask", "event": name})
        if answer is not None:
            return answer  # type: ignore[no-any-return]
        details = {"event": name, "token": token, "agent": journal.agent_name}
        seconds = None if timeout is None else timeout.total_seconds()
        key, problem, asked = op.key, "", 1
        try:
            while True:
                reason = (
                    f"{problem}{'; ' if problem else ''}external event {name}: answer with "
                    f"engine.resume(run_id, 'agent', payload, key={key!r})"
                )
                answer = await journal.ctx.wait_for_input(
                    key, reason, details=details, timeout=seconds
                )
                problem = _payload_problem(answer) if name in self._checked else ""
                if not problem:
                    return answer  # type: ignore[no-any-return]
                key = journal.event_again(op, asked).key
                asked += 1
        except InputTimeout as exc:
            raise ExternalEventError(f"no input arrived for {key} within {timeout}") from exc


_RESULTS: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)


def _payload_problem(payload: object) -> str:
    """What is wrong with a ``RequestInput`` payload (not a ``DeferredToolResults``), or ""."""
    try:
        _RESULTS.validate_python(payload)
    except ValidationError as exc:
        n = exc.error_count()
        return f"the payload {payload!r:.80} is not a DeferredToolResults ({n} errors)"
    return ""


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
        sequential_tools_in_durable_context=True,
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

    @property
    def in_durable_context(self) -> bool:
        """Whether an agent step attempt runs in this task."""
        return CURRENT.get() is not None

    def get_durable_operation_backend(self) -> _Backend:
        """Return the backend that makes each operation a durable call."""
        return _Backend(
            self.name, self._model_priority, self._tool_priority, self._tool_timeout
        )

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Install the durable external-event waiter around the run."""
        journal = CURRENT.get()
        if journal is None:
            return await super().wrap_run(ctx, handler=handler)
        with external_event_scope(_Waiter(journal, self._tool_priority, self._input_events)):
            return await super().wrap_run(ctx, handler=handler)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[AgentDepsT], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """Answer each tool call that needs approval through a durable wait."""
        journal = CURRENT.get()
        if journal is None or not requests.approvals:
            return None
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:
            approvals[call.tool_call_id] = await _approval(
                journal, call.tool_name, call.tool_call_id, call.args_as_dict(), self._check_args
            )
        return requests.build_results(approvals=approvals)

    @classmethod
    def get_serialization_name(cls) -> Literal[None]:
        """Not loadable from an agent spec: a `DurableAgent` adds it to each run."""
        return None


async def _approval(
    journal: RunJournal,
    tool: str,
    tool_call_id: str,
    args: dict[str, Any],
    check_args: ArgsProblem | None,
) -> ToolApproved | ToolDenied:
    """Wait for the decision on one tool call; ask again (a new key) after an invalid answer.

    An approval whose ``override_args`` do not fit the tool's schema is invalid too (they are
    the complete arguments, pydantic-ai's meaning): asked again, the fields at fault named.
    """

    def checked(answer: object) -> tuple[ToolApproved | ToolDenied | None, str]:
        decision, problem = decide(answer)
        override = decision.override_args if isinstance(decision, ToolApproved) else None
        if override is not None and check_args is not None:
            wrong = check_args(tool, override)
            if wrong is not None:
                return None, f"the override_args {override!r:.120} do not fit `{tool}` ({wrong})"
        return decision, problem

    details = {
        "tool": tool,
        "args": args,
        "tool_call_id": tool_call_id,
        "agent": journal.agent_name,
    }
    reason = f"approve tool call {tool}?"
    op = journal.approval(tool, tool_call_id, 0)
    answer = await journal.ctx.wait_for_input(op.key, reason, details=details)
    decision, problem = checked(answer)
    asked = 1
    while decision is None:
        op = journal.approval(tool, tool_call_id, asked)
        asked += 1
        answer = await journal.ctx.wait_for_input(op.key, f"{problem}; {reason}", details=details)
        decision, problem = checked(answer)
    return decision
