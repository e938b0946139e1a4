"""What the store's rows say about a run: a step row's `StepStatus`, a workflow row's `RunResult`.

Used by `WorkflowEngine.status` and by the driver when the workflow it runs has already ended
(a run of a finished workflow returns its stored result and appends nothing).
"""

from __future__ import annotations

from agentq.store import DurableStore, StepRow, StepState, WorkflowRow, WorkflowState
from agentq.workflows.model import RunResult, RunStatus, StepStatus

__all__ = ["status_of", "stored_result"]

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
    steps = await store.step_rows(row.workflow_id)
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
