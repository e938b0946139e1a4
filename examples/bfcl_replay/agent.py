"""``--agent pydantic-ai``: each BFCL task one run of a pydantic-ai agent on agentq.

The same replay through a real agent framework. Each task is a `DurableAgent` run (run id
``bfcl/<task id>``, the same workflow id as the plain replay's) of a pydantic-ai `Agent`:

- the model is a `FunctionModel` that plays the ground truth: each turn's calls as tool calls
  (``tool_call_id`` ``<turn>/<index>``), in responses that end at each call needing approval
  (`segments`: pydantic-ai runs approved calls after the others of their response), and,
  once every turn is played, a text;
- the BFCL services are the tools: one tool per function the task calls (a JSON schema that
  takes any arguments), which applies the call through the `ServiceHost` under the plain
  replay's idempotency key ``bfcl/<task>/<turn>/<index>``; functions that move money or send
  something are tools with ``requires_approval=True``, answered by the headless
  `ApprovalPolicy` through ``engine.resume`` (``{"approved": ..., "note": ...}``, the input an
  `ApprovalPanel` click sends);
- every model request and tool call is a durable call of the run (agentq's pydantic-ai
  integration): after a crash, ``durable.run`` of the same run id answers the completed ones
  from agentq's log and runs the one in doubt again, which the service host refuses if it
  had applied it.

The run's messages give each turn's results back (the tool returns, by tool call id), so the
check against the ground truth is the plain replay's. The calls of one response are parallel
tool calls, each its own durable call: the reads run side by side, and a tool that changes
state is ``sequential`` (it runs alone, after the calls before it), so the calls apply in
the ground truth's order.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import RunResult, RunStatus, WorkflowEngine
from agentq.integrations.pydantic_ai import AgentRun, DurableAgent
from agentq.store import CallKind, CallRow, CallState, StepState

from .approval import ApprovalPolicy
from .crash import CrashPlan
from .dataset import Call, Task
from .errors import TransientToolError
from .jsontypes import JsonObject, JsonValue
from .plan import CALL_RETRY, call_key, needs_approval, workflow_id
from .report import Summary
from .selection import SelectionReading
from .servicehost import ServiceHost
from .services import Kind, kind_of

AGENT_NAME = "bfcl"
"""The pydantic-ai agents' name."""


def agent_name(task: Task) -> str:
    """The `DurableAgent`'s name of a task, its workflow definition's: ``bfcl-agent/<task>``."""
    return f"bfcl-agent/{task.id}"

_ANY_ARGS = {"type": "object", "additionalProperties": True}
_POSITIONAL = "_args"


def call_id(turn: int, index: int) -> str:
    """Return the tool call id of a turn's call: ``<turn>/<index>``."""
    return f"{turn}/{index}"


def _turn_index(tool_call_id: str) -> tuple[int, int]:
    turn, index = tool_call_id.split("/")
    return int(turn), int(index)


def tool_args(call: Call) -> dict[str, Any]:
    """Return a call's arguments as a tool call's: its keywords, plus ``_args`` if positional."""
    args = dict(call.kwargs)
    if call.args:
        args[_POSITIONAL] = list(call.args)
    return args


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _call_of(task: Task, tool_call_id: str, name: str, args: dict[str, Any]) -> Call:
    """The call a tool call stands for: the ground truth's, or the one with edited arguments."""
    turn, index = _turn_index(tool_call_id)
    original = task.turn_calls(turn)[index]
    if original.function == name and _same(args, tool_args(original)):
        return original
    kwargs = {k: v for k, v in args.items() if k != _POSITIONAL}
    positional = tuple(args.get(_POSITIONAL, ()))
    text = ", ".join([*map(repr, positional), *(f"{k}={v!r}" for k, v in kwargs.items())])
    return Call(f"{name}({text})", name, positional, kwargs)


def segments(task: Task) -> list[tuple[int, list[int]]]:
    """Split each turn's calls into the model responses that play them, in order.

    pydantic-ai runs the calls of one response that need no approval first and the approved
    ones after, so a response ends at each call that needs approval: the calls then apply in
    the ground truth's order.

    Returns:
        ``(turn, [call indexes])`` per response, in order (turns without calls have none).
    """
    out: list[tuple[int, list[int]]] = []
    for turn, texts in enumerate(task.call_texts):
        if not texts:
            continue
        current: list[int] = []
        for index, call in enumerate(task.turn_calls(turn)):
            current.append(index)
            if needs_approval(call):
                out.append((turn, current))
                current = []
        if current:
            out.append((turn, current))
    return out


def _script(task: Task) -> FunctionModel:
    plan = segments(task)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n >= len(plan):
            return ModelResponse(parts=[TextPart(f"{task.id}: {len(plan)} responses played")])
        turn, indexes = plan[n]
        calls = task.turn_calls(turn)
        return ModelResponse(
            parts=[
                ToolCallPart(calls[i].function, tool_args(calls[i]), call_id(turn, i))
                for i in indexes
            ]
        )

    return FunctionModel(respond)


def _tool(
    task: Task,
    host: ServiceHost,
    crash: CrashPlan | None,
    name: str,
    retries: Counter[str] | None = None,
) -> Tool[None]:
    def apply(ctx: RunContext[None], **args: Any) -> JsonValue:
        # A sync tool: pydantic-ai runs it in a worker thread, as the plain replay's jobs.
        tool_call_id = str(ctx.tool_call_id)
        call = _call_of(task, tool_call_id, name, args)
        key = call_key(task.id, *_turn_index(tool_call_id))
        kind = kind_of(name)
        for attempt in range(1, CALL_RETRY.max_attempts + 1):
            if crash is not None:
                crash.before_apply(key, kind)
            try:
                applied = host.apply(task.id, key, call)
            except TransientToolError:
                if attempt == CALL_RETRY.max_attempts:
                    raise
                if retries is not None:  # the summary's "retries" line counts these
                    retries["TransientToolError"] += 1
                continue
            if crash is not None:
                crash.after_apply(key, kind, applied.duplicate)
            return applied.result
        raise AssertionError("unreachable")

    tool: Tool[None] = Tool.from_schema(
        apply, name=name, description=f"BFCL {name}", json_schema=_ANY_ARGS, takes_ctx=True
    )
    tool.requires_approval = needs_approval(Call(name, name))
    # Reads run side by side (the calls of one response run concurrently); a call that
    # changes state runs alone, after the calls before it and before those after it, so the
    # calls apply in the ground truth's order.
    tool.sequential = kind_of(name) is not Kind.READ
    return tool


def build_agent(
    task: Task,
    host: ServiceHost,
    crash: CrashPlan | None,
    engine: WorkflowEngine,
    retries: Counter[str] | None = None,
) -> DurableAgent[None]:
    """Return the durable agent of one task: its scripted model, its services as tools.

    A transient service error is retried inside the tool (the call is one durable call of the
    run, so there is no job retry policy to do it); each retry is counted in `retries`.
    """
    names = dict.fromkeys(call.function for turn in task.calls for call in turn)
    tools = [_tool(task, host, crash, name, retries) for name in names]
    agent: Agent[None, str] = Agent(_script(task), name=AGENT_NAME, tools=tools)
    # One definition per task: its step body is this task's agent (its script, its tools),
    # and a resume after an approval must run that one.
    return DurableAgent(agent, engine, name=agent_name(task))


def prompt_of(task: Task) -> str:
    """The run's prompt: the task's user turns, in order."""
    return "\n\n".join(task.turns)


def turn_results(task: Task, messages: Sequence[ModelMessage]) -> tuple[dict[str, Any], ...]:
    """Each turn's ``{"results": [...]}`` from the run's tool returns (the plain step output)."""
    returns: dict[str, Any] = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    returns[part.tool_call_id] = part.content
    return tuple(
        {"results": [returns.get(call_id(turn, i)) for i in range(len(texts))]}
        for turn, texts in enumerate(task.call_texts)
    )


def as_run_result(task: Task, run: AgentRun) -> RunResult:
    """The `RunResult` the plain replay's check reads: one output per turn when completed."""
    if run.status is not RunStatus.COMPLETED:
        return run.result
    return RunResult(run.run_id, RunStatus.COMPLETED, outputs=turn_results(task, run.messages))


async def drive_task(
    durable: DurableAgent[None], task: Task, policy: ApprovalPolicy | None
) -> RunResult:
    """Run a task's agent to its end, answering each approval with the policy."""
    run_id, prompt = workflow_id(task.id), prompt_of(task)
    run = await durable.run(prompt, run_id=run_id)
    while run.status is RunStatus.WAITING and policy is not None and run.pending:
        pending = run.pending[0]
        details: JsonObject = {"tool": pending.tool, "args": pending.args}
        # Answered elsewhere meanwhile (None): follow the run all the same.
        await policy.answer(
            durable.engine, run_id, pending.step, pending.reason, key=pending.key,
            details=details,
        )
        run = await durable.run(prompt, run_id=run_id)
    return as_run_result(task, run)


async def drive_agents(
    engine: WorkflowEngine,
    tasks: Sequence[Task],
    host: ServiceHost,
    crash: CrashPlan | None,
    policy: ApprovalPolicy | None,
    *,
    concurrency: int,
    on_result: Callable[[RunResult], None] | None = None,
    retries: Counter[str] | None = None,
) -> dict[str, RunResult]:
    """Drive every task's agent run, at most `concurrency` at a time.

    `retries` counts the tools' retries of transient service errors, by cause.

    Returns:
        The final `RunResult` of each task (in the plain replay's shape), by workflow id, in
        the order given.
    """
    gate = asyncio.Semaphore(concurrency)
    results: dict[str, RunResult] = {}

    async def one(task: Task) -> None:
        async with gate:
            durable = build_agent(task, host, crash, engine, retries)
            result = await drive_task(durable, task, policy)
        results[result.workflow_id] = result
        if on_result is not None:
            on_result(result)

    async with asyncio.TaskGroup() as group:
        for task in tasks:
            group.create_task(one(task), name=f"bfcl.agent:{task.id}")
    return {workflow_id(task.id): results[workflow_id(task.id)] for task in tasks}


def count_agent_runs(summary: Summary, tasks: Sequence[Task], reading: SelectionReading) -> None:
    """Set the summary's counts of agent runs from their log (the plain replay's are per turn).

    Sets ``agent``; ``steps`` / ``steps_completed``: the runs (one step each); ``lanes``: tool
    calls and model requests by the lane they ran in (``{"tool calls": {"medium": 62},
    "model requests": {"high": 23}}``); ``turns``: the tasks' user turns; ``approved_turns``:
    the turns with an approved call (its wait, whose tool call id is ``<turn>/<index>``,
    answered ``approved: true``).
    """
    summary.agent = "pydantic-ai"
    summary.steps = len(reading.steps)
    summary.steps_completed = sum(row.state is StepState.COMPLETED for row in reading.steps)
    counts = _log_counts(reading.calls)
    summary.lanes = counts["lanes"]
    summary.approved_turns = counts["approved_turns"]
    summary.turns = sum(len(task.call_texts) for task in tasks)


def _log_counts(calls: Sequence[CallRow]) -> dict[str, Any]:
    lanes: dict[str, Counter[str]] = {"tool calls": Counter(), "model requests": Counter()}
    approved: set[tuple[str, str]] = set()
    for row in calls:
        kind = (row.label or {}).get("kind")
        if row.kind is CallKind.CALL and kind in ("tool", "model"):
            group = "tool calls" if kind == "tool" else "model requests"
            lanes[group][str(row.lane)] += 1
        elif (
            row.kind is CallKind.WAIT
            and row.state is CallState.ANSWERED
            and row.key.startswith("approval:")
            and isinstance(row.output, dict)
            and row.output.get("approved") is True
        ):
            turn = str((row.details or {}).get("tool_call_id", "")).split("/")[0]
            approved.add((row.workflow_id, turn))
    return {
        "lanes": {group: dict(sorted(n.items())) for group, n in lanes.items()},
        "approved_turns": len(approved),
    }
