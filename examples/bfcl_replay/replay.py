"""The replay proper: each BFCL task is an agentq `Workflow`, each user turn a step, each
ground-truth tool call a durable call.

A turn's step (`run_turn`), in order:

1. parses the turn's calls (`ast` only) and checks each against the task's services
   (function offered, arguments fit the signature); a call that can never run fails the
   workflow at once (`NonRetryable`) before any call of the turn is applied;
2. asks for the approval of each call that needs one (it moves money or sends something),
   one durable wait per call, before any call of the turn runs:
   ``ctx.wait_for_input(<call key>/approval, reason, details={"tool": ..., "args": ...})``.
   The first time, the step parks (``Waiting``); ``engine.resume(..., key=)`` records the
   answer and the step runs again, where the same wait returns it. A rejection fails the
   workflow with nothing of the turn applied;
3. makes each call, one after another, a durable call:
   ``await ctx.call(Job(key, fn, lane, retry=plan.CALL_RETRY), label={"kind": "tool",
   "tool": ..., "service": ...})`` with the key ``bfcl/<task>/<turn>/<index>``, its job in
   the lane of its kind (see `plan`). The job applies the call through the `ServiceHost`
   (the external services), which honours the same key on its side;
4. returns ``{"results": [...]}`` (plus ``"approval"``: the approvers' note), the calls'
   JSON results: the step's durable output.

Exactly once, in two places. agentq's log records each call (``CallStarted`` before its job
runs, ``CallCompleted`` with its result), so when a step runs again (after a crash, a
retry or a resume) every call it completed is answered from the log and never sent to the
service host again. A call that started and never finished (the process died while it ran)
is in doubt: it runs again (``CallStarted`` with ``rerun: true``) and reaches the service
host again, which refuses a key it already applied and returns the stored result. So the
host refuses only calls in doubt.

Why approvals come first, one wait per call: a person approves a tool call and its arguments
(the wait's details), and a rejection leaves the whole turn unapplied, as the turn-level
approval did before durable calls; and no call of the turn has run before a resume, so the
re-run after each resume answers only the earlier approvals from the log.

The calls' jobs run through the engine's queue from inside the step's job: agentq admits a
nested call into another lane through that lane, so the LOW and HIGH permits bound the calls
while the step keeps its MEDIUM permit. A call job never waits for a step, so no wait goes
round in a circle.

Example:
    >>> env = ReplayEnv(host)
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
    RunResult,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowEngine,
)
from agentq import KeyConflictError as AgentqKeyConflict
from agentq.store import StepState

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
    approval_details,
    approval_key,
    approval_reason,
    call_key,
    call_label,
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
    """What the step bodies share: the service host, and an optional crash plan.

    The calls run through the queue of the engine that runs the steps (``ctx.call``).

    Args:
        host: The durable, idempotent services (the outside world).
        crash: Kills the process around a state-changing call (``--crash-after``), or None.

    Attributes:
        approvals_read: Approval waits that returned an answer in this process. A wait
            returns only once answered, from agentq's log, so ``engine.answered_from_log -
            approvals_read`` is the number of calls answered from the log.
    """

    host: ServiceHost
    crash: CrashPlan | None = None
    approvals_read: int = 0
    _checkers: dict[str, Services] = field(default_factory=dict, init=False, repr=False)
    _checked: set[tuple[str, str]] = field(default_factory=set, init=False, repr=False)

    def checker(self, task: Task) -> Services:
        """A task's services, used only to check calls before any runs (`Services.unloaded`:
        no scenario loaded; cached)."""
        services = self._checkers.get(task.id)
        if services is None:
            services = self._checkers[task.id] = Services.unloaded(task)
        return services

    def check(self, task: Task, call: Call) -> None:
        """Check that a call of a task can be made (see `Services.check`), once per call text.

        The verdict cannot change (the checker's services never run a call), and a turn's
        step runs again after each approval: a call that passed is not bound again.

        Raises:
            CallError: The function is unknown or the arguments do not fit.
        """
        seen = (task.id, call.text)
        if seen not in self._checked:
            self.checker(task).check(call)
            self._checked.add(seen)

    def call_job(self, task: Task, turn: int, index: int, call: Call) -> Job:
        """Return the job of one call: its key, its lane, its retry policy.

        Its fingerprint is the call's text: the same key for another call text is refused
        (``KeyConflictError``) by agentq's log and by the service host.
        """
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
        ``{"results": [...]}``, plus ``"approval"`` (the approvers' note, distinct notes
        joined by ``"; "``) when the turn held calls needing approval.

    Raises:
        NonRetryable: A call is malformed, unknown, has arguments that do not fit, raises in
            its service, or was not approved.
        WaitForInput: (from ``ctx.wait_for_input``) a call needs approval and none was
            given yet: the step parks.
        CallRetriesExhausted: A call kept failing transiently.
    """
    try:
        calls = task.turn_calls(turn)
    except CallParseError as error:
        raise NonRetryable(str(error)) from error
    for index, call in enumerate(calls):
        try:
            env.check(task, call)
        except CallError as error:
            raise NonRetryable(f"turn {turn} call {index}: {error}") from error
    output: JsonObject = {}
    note = await _approvals(env, task, turn, calls, ctx)
    if note is not None:
        output["approval"] = note
    results: list[JsonValue] = []
    for index, call in enumerate(calls):
        results.append(await _durable_call(env, task, turn, index, call, ctx))
    output["results"] = results
    return output


async def _approvals(
    env: ReplayEnv, task: Task, turn: int, calls: Sequence[Call], ctx: StepContext
) -> str | None:
    """Ask for each call needing approval, in order; return the notes (None: none needed)."""
    notes: list[str] = []
    for index, call in enumerate(calls):
        if not needs_approval(call):
            continue
        answer = await ctx.wait_for_input(
            approval_key(task.id, turn, index),
            approval_reason(task.id, turn, [call], task.turns[turn]),
            details=approval_details(call),
        )
        env.approvals_read += 1
        decision = read_decision(answer)
        if not decision.approved:
            raise NonRetryable(
                f"turn {turn} call {index} not approved ({decision.note or 'rejected'}): "
                f"{describe_call(call, 80)}"
            )
        notes.append(decision.note)
    return "; ".join(dict.fromkeys(notes)) if notes else None


async def _durable_call(
    env: ReplayEnv, task: Task, turn: int, index: int, call: Call, ctx: StepContext
) -> JsonValue:
    where = f"turn {turn} call {index}"
    try:
        result: JsonValue = await ctx.call(
            env.call_job(task, turn, index, call), label=call_label(call)
        )
    except JobFailed as failed:
        cause = failed.__cause__
        if isinstance(cause, TransientToolError):
            raise CallRetriesExhausted(
                f"{where}: {CALL_RETRY.max_attempts} attempts failed: {cause}"
            ) from failed
        if isinstance(cause, CallError | ToolCallError | KeyConflictError):
            raise NonRetryable(f"{where}: {cause}") from failed
        raise
    except AgentqKeyConflict as error:
        raise NonRetryable(f"{where}: {error}") from error
    return result


def build_workflow(task: Task, env: ReplayEnv) -> Workflow:
    """Return the workflow of a task (`task_steps`, `task_input`), id ``bfcl/<task id>``.

    The id and step names depend on the task only (see `plan`), so a restarted process
    builds the same workflow and finds its stored progress.
    """
    return Workflow(workflow_id(task.id), task_steps(task, env), input=task_input(task))


def task_steps(task: Task, env: ReplayEnv) -> list[StepDef]:
    """Return the steps of a task: one per turn (`run_turn`), in order."""
    return [
        StepDef(step_name(turn), functools.partial(run_turn, env, task, turn), retry=STEP_RETRY)
        for turn in range(len(task.call_texts))
    ]


def task_input(task: Task) -> JsonObject:
    """Return a task's workflow input: the task, its classes and calls per turn, plus
    ``long_context`` and ``held_back`` (see `dataset`) for the categories that have them."""
    calls = [len(texts) for texts in task.call_texts]
    value: JsonObject = {
        "task": task.id,
        "classes": list(task.involved_classes),
        "calls_per_turn": list(calls),
    }
    # What the category changes, only where it changes something (a base task's input is the
    # same as before categories existed, so stores written then still match).
    if task.long_context:
        value["long_context"] = True
    if task.held_back:
        value["held_back"] = {str(turn): list(names) for turn, names in task.held_back.items()}
    return value


def build_workflows(tasks: Iterable[Task], env: ReplayEnv) -> list[Workflow]:
    """Return the workflow of every task, in order."""
    return [build_workflow(task, env) for task in tasks]


async def drive(
    engine: WorkflowEngine, workflow: Workflow | str, policy: ApprovalPolicy | None
) -> RunResult:
    """Run a workflow to its end, answering each wait with the policy through `engine.resume`.

    Args:
        engine: The engine (the workflow is registered on the way).
        workflow: The workflow, or the id of a stored instance of a definition registered
            with the engine (a run group's member; its background run is joined).
        policy: The approver; None leaves a waiting workflow waiting (a person decides).

    Returns:
        The final `RunResult` (waiting only without a policy).
    """
    result = await engine.run(workflow)
    while result.status is RunStatus.WAITING and policy is not None and result.step:
        key, details = await waiting_on(engine, workflow, result.step)
        answer = policy.decide(
            result.workflow_id, result.step, result.reason or "", key=key, details=details
        )
        try:
            resumed = await engine.resume(result.workflow_id, result.step, answer, key=key)
        except NotWaitingError:  # resumed elsewhere meanwhile: follow the run
            resumed = await engine.run(workflow)
        # Registered here, so it ran here (a Recorded is for a definition held elsewhere).
        result = resumed if isinstance(resumed, RunResult) else await engine.run(workflow)
    return result


async def waiting_on(
    engine: WorkflowEngine, workflow: Workflow | str, step: str
) -> tuple[str | None, JsonObject | None]:
    """Return the key and details of the wait a step is on (one read of its workflow's steps).

    Args:
        engine: The engine.
        workflow: The workflow, or its id.
        step: The waiting step's name (``RunResult.step``).

    Returns:
        ``(key, details)`` of the step's ``ctx.wait_for_input``; ``(None, None)`` when the
        step no longer waits (resumed elsewhere) or waits without a key.

    Raises:
        KeyError: The workflow has no such step.
    """
    wid = workflow if isinstance(workflow, str) else workflow.id
    row = next((r for r in await engine.store.step_rows(wid) if r.step_name == step), None)
    if row is None:
        raise KeyError(step)
    if row.state is StepState.WAITING:
        return row.wait_key, row.wait_details
    return None, None


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
