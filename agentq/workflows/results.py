"""What the store's rows say about a run: a step row's `StepStatus`, a workflow row's `RunResult`.

Used by `WorkflowEngine.status` and by the driver when the workflow it runs has already ended
(a run of a finished workflow returns its stored result and appends nothing), and by `run` and
`resume` of an ended workflow whose registration was dropped: they answer from the store; and
by the end-of-run hooks, which report each end as of that end (`end_result`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from agentq.errors import UnknownWorkflowError
from agentq.store import (
    DurableStore,
    HookRow,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
    replay,
)
from agentq.workflows.model import RunResult, RunStatus, StepStatus
from agentq.workflows.registry import step_index

__all__ = [
    "closed_result",
    "end_result",
    "ended_result",
    "refuse_resume",
    "result_of",
    "status_of",
    "stored_result",
]

RUN_STATUS = {
    WorkflowState.COMPLETED: RunStatus.COMPLETED,
    WorkflowState.FAILED: RunStatus.FAILED,
    WorkflowState.CANCELLED: RunStatus.CANCELLED,
    WorkflowState.WAITING: RunStatus.WAITING,
}
"""The run status each stored workflow state reports (a running workflow reports waiting)."""


def status_of(row: StepRow) -> StepStatus:
    """The `StepStatus` a stored step row stands for."""
    match row.state:
        case StepState.PENDING:
            return StepStatus.Pending()
        case StepState.LEASED:
            return StepStatus.Leased(row.worker_id or "", row.lease_expires_at or 0.0)
        case StepState.COMPLETED:
            return StepStatus.Completed(row.output)
        case StepState.WAITING:
            return StepStatus.Waiting(
                row.reason or "", row.wait_key, row.wait_deadline, row.wait_details
            )
        case _:
            return StepStatus.Failed(row.reason or "", row.attempt)


async def stored_result(store: DurableStore, row: WorkflowRow) -> RunResult:
    """The `RunResult` a stored workflow row (and its steps) stands for."""
    return result_of(row, await store.step_rows(row.workflow_id))


async def end_result(store: DurableStore, end: HookRow) -> RunResult:
    """The `RunResult` of the end an outbox row stands for, as of that end.

    The row's ``seq`` is the event that ended the workflow. While that event is still the
    workflow's last, the stored rows are that end's; after a later change (a ``retry``,
    whatever its outcome), the rows as of that end are replayed from the workflow's log up
    to it. A workflow swept from the store since gives the row's status alone.
    """
    wf = await store.get_workflow(end.workflow_id)
    if wf is None:
        return RunResult(end.workflow_id, RunStatus(end.state))
    if wf.last_seq == end.seq:
        return await stored_result(store, wf)
    events = [e for e in await store.load_events(end.workflow_id) if e.seq <= end.seq]
    replayed = replay(events)
    then = replayed[0][1] if replayed else None
    if then is None or then.workflow is None or then.workflow.state.value != end.state:
        return RunResult(end.workflow_id, RunStatus(end.state))
    return result_of(then.workflow, [then.steps[i] for i in sorted(then.steps)])


def result_of(row: WorkflowRow, steps: Sequence[StepRow]) -> RunResult:
    """The `RunResult` a workflow row and its step rows (by step index) stand for."""
    outputs = tuple(s.output for s in steps if s.state is StepState.COMPLETED)
    status = RUN_STATUS.get(row.state, RunStatus.WAITING)
    focus = next(
        (s for s in steps if s.state in (StepState.FAILED, StepState.WAITING)), None
    )
    if status is RunStatus.COMPLETED:
        return RunResult(row.workflow_id, status, outputs=outputs)
    return RunResult(
        row.workflow_id,
        status,
        focus.step_name if focus else None,
        row.reason if row.reason is not None else (focus.reason if focus else None),
        outputs,
    )


async def ended_result(store: DurableStore, workflow_id: str) -> RunResult | None:
    """The stored `RunResult` of a workflow that has ended (completed, failed, cancelled),
    or None if it is not stored or has not ended."""
    row = await store.get_workflow(workflow_id)
    if row is None or not row.state.closed:
        return None
    return await stored_result(store, row)


async def refuse_resume(
    store: DurableStore,
    now: float,
    workflow_id: str,
    step: str | int,
    input: Any,
    key: str | None = None,
) -> NoReturn:
    """Refuse a `resume` of a stored workflow that has ended, as the store words it.

    An ended workflow has no waiting step, so ``resume_step`` refuses and records nothing.

    Raises:
        UnknownStepError: No such step.
        NotWaitingError / WorkflowClosedError / PayloadError: What the store says.
        UnknownWorkflowError: The workflow was reopened meanwhile by another engine, and the
            input recorded: not this engine's to run, since it is not registered here.
    """
    names = [row.step_name for row in await store.step_rows(workflow_id)]
    index = step_index(workflow_id, names, step)
    await store.resume_step(workflow_id, index, input, now, key=key)
    raise UnknownWorkflowError(
        f"workflow {workflow_id!r} is not registered with this engine; the input was "
        "recorded and an engine that registers it continues it"
    )


async def closed_result(store: DurableStore, workflow_id: str) -> RunResult:
    """The stored result of a workflow found closed (a run that learns it must stop).

    Raises:
        UnknownWorkflowError: The workflow is not in the store.
    """
    row = await store.get_workflow(workflow_id)
    if row is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    return await stored_result(store, row)
