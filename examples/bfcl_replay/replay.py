"""The replay proper: each BFCL task is an agentq `Workflow`, each user turn a step.

A turn's step (`run_turn`), in order:

1. parses the turn's calls (`ast` only) and checks each against the task's services
   (function offered, arguments fit the signature); a call that can never run fails the
   workflow at once (`NonRetryable`) before any call of the turn is applied;
2. if a call needs approval (it moves money or sends something), waits for it
   (`WaitForInput`, with a reason listing those calls) unless the step was resumed with an
   approval (``ctx.resume_input``); a rejection fails the workflow;
3. pushes each call, one after another, through the shared `Queue` as its own job:
   idempotency key ``bfcl/<task>/<turn>/<index>``, lane by kind (see `plan`), retry policy
   `plan.CALL_RETRY`. The job applies the call through the `ServiceHost`, which honours the
   same key durably, so a call is applied once even when its step runs again after a crash;
4. returns ``{"results": [...]}``, the calls' JSON results (the step's durable output).

Each call is a nested `push_and_wait` from inside the step's job: agentq admits a nested
call into another lane through that lane, so the LOW and HIGH permits bound the calls while
the step keeps its MEDIUM permit (only a nested call into the caller's own lane runs inline,
on the caller's permit). A call job never waits for a step, so no wait goes round in a circle.

Example:
    >>> env = ReplayEnv(queue, host)
    >>> workflows = build_workflows(tasks, env)
    >>> result = await drive(engine, workflows[0], ApprovalPolicy())
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from agentq import (
    Job,
    JobFailed,
    NonRetryable,
    NotWaitingError,
    Queue,
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    Workflow,
    WorkflowEngine,
)
from agentq import KeyConflictError as QueueKeyConflict

from .approval import ApprovalPolicy, read_decision
from .crash import CrashPlan
from .dataset import Call, Task
from .errors import (
    CallError,
    CallParseError,
    KeyConflictError,
    ToolCallError,
    TransientToolError,
)
from .jsontypes import JsonObject, JsonValue
from .plan import (
    CALL_RETRY,
    STEP_RETRY,
    approval_reason,
    call_key,
    describe_call,
    lane_of,
    needs_approval,
    step_name,
    workflow_id,
)
from .servicehost import ServiceHost
from .services import Kind, Services, kind_of


class CallRetriesExhausted(Exception):
    """A call still failed transiently after every attempt its job's policy allows.

    Not `NonRetryable`: the step's own policy (`plan.STEP_RETRY`) may try the turn again.
    """


@dataclass
class ReplayEnv:
    """What the step bodies share: the queue, the service host, and an optional crash plan.

    Args:
        queue: The queue every call job goes through (the engine's queue).
        host: The durable, idempotent services.
        crash: Kills the process around a state-changing call (``--crash-after``), or None.
    """

    queue: Queue
    host: ServiceHost
    crash: CrashPlan | None = None
    _checkers: dict[str, Services] = field(default_factory=dict, init=False, repr=False)

    def checker(self, task: Task) -> Services:
        """Fresh services of a task, used only to check calls before any runs (cached)."""
        services = self._checkers.get(task.id)
        if services is None:
            services = self._checkers[task.id] = Services.fresh(task)
        return services

    def call_job(self, task: Task, turn: int, index: int, call: Call) -> Job:
        """Return the job of one call: its key, its lane, its retry policy."""
        kind = kind_of(call.function)
        key = call_key(task.id, turn, index)
        return Job(
            key,
            functools.partial(_apply_call, self.host, self.crash, task.id, key, call, kind),
            lane_of(kind),
            retry=CALL_RETRY,
            fingerprint=call.text,
        )


def _apply_call(
    host: ServiceHost, crash: CrashPlan | None, task_id: str, key: str, call: Call, kind: Kind
) -> JsonValue:
    # Runs in a worker thread of the queue (a plain callable).
    if crash is not None:
        crash.before_apply(key, kind)
    applied = host.apply(task_id, key, call)
    if crash is not None:
        crash.after_apply(key, kind, applied.duplicate)
    return applied.result


async def run_turn(env: ReplayEnv, task: Task, turn: int, ctx: StepContext) -> JsonObject:
    """The body of a turn's step (see the module docstring).

    Returns:
        ``{"results": [...]}``, plus ``"approval"`` (the note) when the turn was approved.

    Raises:
        NonRetryable: A call is malformed, unknown, has arguments that do not fit, raises in
            its service, or was not approved.
        WaitForInput: A call needs approval and none was given yet.
        CallRetriesExhausted: A call kept failing transiently.
    """
    try:
        calls = task.turn_calls(turn)
    except CallParseError as error:
        raise NonRetryable(str(error)) from error
    checker = env.checker(task)
    for index, call in enumerate(calls):
        try:
            checker.check(call)
        except CallError as error:
            raise NonRetryable(f"turn {turn} call {index}: {error}") from error
    output: JsonObject = {}
    held = [call for call in calls if needs_approval(call)]
    if held:
        if ctx.resume_input is None:
            raise WaitForInput(approval_reason(task.id, turn, held, task.turns[turn]))
        decision = read_decision(ctx.resume_input)
        if not decision.approved:
            listed = "; ".join(describe_call(call, 80) for call in held)
            raise NonRetryable(
                f"turn {turn} not approved ({decision.note or 'rejected'}): {listed}"
            )
        output["approval"] = decision.note
    results: list[JsonValue] = []
    for index, call in enumerate(calls):
        try:
            results.append(await env.queue.push_and_wait(env.call_job(task, turn, index, call)))
        except JobFailed as failed:
            cause = failed.__cause__
            where = f"turn {turn} call {index}"
            if isinstance(cause, TransientToolError):
                raise CallRetriesExhausted(
                    f"{where}: {CALL_RETRY.max_attempts} attempts failed: {cause}"
                ) from failed
            if isinstance(cause, CallError | ToolCallError | KeyConflictError):
                raise NonRetryable(f"{where}: {cause}") from failed
            raise
        except QueueKeyConflict as error:
            raise NonRetryable(f"turn {turn} call {index}: {error}") from error
    output["results"] = results
    return output


def build_workflow(task: Task, env: ReplayEnv) -> Workflow:
    """Return the workflow of a task: one step per turn, in order.

    The id and step names depend on the task only (see `plan`), so a restarted process
    builds the same workflow and finds its stored progress. The input names the task, its
    classes and calls per turn, plus ``long_context`` and ``held_back`` (see `dataset`) for
    the categories that have them.
    """
    steps = [
        StepDef(step_name(turn), functools.partial(run_turn, env, task, turn), retry=STEP_RETRY)
        for turn in range(len(task.call_texts))
    ]
    calls = [len(texts) for texts in task.call_texts]
    task_input: JsonObject = {
        "task": task.id,
        "classes": list(task.involved_classes),
        "calls_per_turn": list(calls),
    }
    # What the category changes, only where it changes something (a base task's input is the
    # same as before categories existed, so stores written then still match).
    if task.long_context:
        task_input["long_context"] = True
    if task.held_back:
        task_input["held_back"] = {str(turn): list(names) for turn, names in task.held_back.items()}
    return Workflow(workflow_id(task.id), steps, input=task_input)


def build_workflows(tasks: Iterable[Task], env: ReplayEnv) -> list[Workflow]:
    """Return the workflow of every task, in order."""
    return [build_workflow(task, env) for task in tasks]


async def drive(
    engine: WorkflowEngine, workflow: Workflow, policy: ApprovalPolicy | None
) -> RunResult:
    """Run a workflow to its end, answering each wait with the policy through `engine.resume`.

    Args:
        engine: The engine (the workflow is registered on the way).
        workflow: The workflow.
        policy: The approver; None leaves a waiting workflow waiting (a person decides).

    Returns:
        The final `RunResult` (waiting only without a policy).
    """
    result = await engine.run(workflow)
    while result.status is RunStatus.WAITING and policy is not None and result.step:
        answer = policy.decide(result.workflow_id, result.step, result.reason or "")
        try:
            result = await engine.resume(result.workflow_id, result.step, answer)
        except NotWaitingError:  # resumed elsewhere meanwhile: follow the run
            result = await engine.run(workflow)
    return result


async def drive_all(
    engine: WorkflowEngine,
    workflows: Sequence[Workflow],
    policy: ApprovalPolicy | None,
    *,
    concurrency: int,
    on_result: Callable[[RunResult], None] | None = None,
    ungated: Collection[str] = (),
) -> dict[str, RunResult]:
    """Drive many workflows, at most `concurrency` at a time.

    Args:
        engine: The engine.
        workflows: The workflows, driven in this order.
        policy: The approver (see `drive`).
        concurrency: Workflows driven at once.
        on_result: Called with each final result as it comes.
        ungated: Ids of workflows driven at once, outside the limit: those whose step is
            still leased by a worker that may have died on another host
            (``RecoveryReport.held_elsewhere``). Their run mostly waits for the lease to
            expire, and must not hold up the others.

    Returns:
        The final `RunResult` of each workflow, by id, in the order given.

    Raises:
        ExceptionGroup: Driving a workflow raised (a store failure, a bug); the others were
            cancelled.
    """
    gate = asyncio.Semaphore(concurrency)
    results: dict[str, RunResult] = {}

    async def one(workflow: Workflow) -> None:
        if workflow.id in ungated:
            result = await drive(engine, workflow, policy)
        else:
            async with gate:
                result = await drive(engine, workflow, policy)
        results[workflow.id] = result
        if on_result is not None:
            on_result(result)

    async with asyncio.TaskGroup() as group:
        for workflow in workflows:
            group.create_task(one(workflow), name=f"bfcl.drive:{workflow.id}")
    return {workflow.id: results[workflow.id] for workflow in workflows}
