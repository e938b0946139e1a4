"""The command line's writes: approve or reject a wait, cancel, retry; each only RECORDS.

The command line has no step bodies, so it never runs a step: each verb appends its event
through the store's own verb (`resume_step`, `cancel_workflow`, `retry_workflow`), in one
transaction, and the engine that serves the workflow (``engine.serve()``, or a later
``engine.run`` / `agentq.recover` where it is registered) continues it. These are the verbs
`WorkflowEngine.resume` and ``retry`` use in a process without the workflow's definition
(they return `Recorded` there); unlike them, the command line also records for a plain
workflow, which the program that registered it continues. Every
refusal of the store (not waiting, closed, not retryable) becomes `Refused` with the store's
message; nothing is written then.
"""

from __future__ import annotations

from typing import Any

from agentq.cli.target import Refused
from agentq.clock import Clock
from agentq.errors import EngineError
from agentq.store import DurableStore, StepRow, StepState, WorkflowRow

__all__ = ["approval_input", "cancel", "find_workflow", "resume", "retry", "step_index"]


async def find_workflow(store: DurableStore, workflow_id: str) -> WorkflowRow:
    """Return the workflow's row.

    Raises:
        Refused: No workflow has that id.
    """
    row = await store.get_workflow(workflow_id)
    if row is None:
        raise Refused(f"no workflow {workflow_id!r} in this store")
    return row


def step_index(wf: WorkflowRow, step: str) -> int:
    """The 0-based index of `step` given as a name or as a number.

    Raises:
        Refused: The workflow has no such step (the message lists its steps).
    """
    if step in wf.step_names:
        return wf.step_names.index(step)
    if step.isdigit() and int(step) < len(wf.step_names):
        return int(step)
    raise Refused(
        f"workflow {wf.workflow_id!r} has no step {step!r}; its steps are "
        f"{list(wf.step_names)}"
    )


def approval_input(approved: bool, note: str) -> dict[str, Any]:
    """The default resume input, the same the notebook's `ApprovalPanel` sends."""
    return {"approved": approved, "note": note}


async def _waiting_step(store: DurableStore, wf: WorkflowRow, step: str | None) -> StepRow:
    rows = await store.step_rows(wf.workflow_id)
    if step is not None:
        row = rows[step_index(wf, step)]
        if row.state is not StepState.WAITING:
            raise Refused(
                f"step {row.step_name!r} of workflow {wf.workflow_id!r} is {row.state.value}, "
                "not waiting for input"
            )
        return row
    waiting = [row for row in rows if row.state is StepState.WAITING]
    if not waiting:
        raise Refused(f"workflow {wf.workflow_id!r} is {wf.state.value}: no step waits for input")
    if len(waiting) > 1:
        names = [row.step_name for row in waiting]
        raise Refused(f"workflow {wf.workflow_id!r} has several waiting steps {names}: "
                      "choose one with --step")
    return waiting[0]


async def resume(
    store: DurableStore, clock: Clock, workflow_id: str, step: str | None, value: Any
) -> StepRow:
    """Record `value` as the input of the workflow's waiting step (`StepResumed`).

    Args:
        store: The open store.
        clock: Where "now" comes from.
        workflow_id: The workflow.
        step: The step's name or index, or None for the one step that waits.
        value: The resume input (JSON).

    Returns:
        The step's row as it was waiting (its key, question and details).

    Raises:
        Refused: No such workflow or step; the step does not wait; several steps wait and
            `step` is None; or the store refused (closed workflow, a concurrent resume won).
    """
    wf = await find_workflow(store, workflow_id)
    row = await _waiting_step(store, wf, step)
    try:
        await store.resume_step(
            wf.workflow_id, row.step_index, value, clock.time(), key=row.wait_key
        )
    except (EngineError, ValueError) as exc:
        raise Refused(str(exc)) from exc
    return row


async def cancel(store: DurableStore, clock: Clock, workflow_id: str, reason: str) -> None:
    """Record `WorkflowCancelled`; a serving engine interrupts the running attempt.

    Raises:
        Refused: No such workflow, or it had already ended (the message names its state).
    """
    wf = await find_workflow(store, workflow_id)
    if not await store.cancel_workflow(wf.workflow_id, reason, clock.time()):
        raise Refused(f"workflow {workflow_id!r} is already {wf.state.value}; nothing to cancel")


async def retry(
    store: DurableStore, clock: Clock, workflow_id: str, from_step: str | None
) -> WorkflowRow:
    """Record `WorkflowRetried`: a failed or cancelled workflow runs again where it is served.

    Returns:
        The workflow's row after the retry (running).

    Raises:
        Refused: No such workflow or step, or the store refused (the workflow is running,
            waiting or completed; a step before `from_step` has not completed).
    """
    wf = await find_workflow(store, workflow_id)
    index = None if from_step is None else step_index(wf, from_step)
    try:
        return await store.retry_workflow(wf.workflow_id, index, clock.time())
    except EngineError as exc:
        raise Refused(str(exc)) from exc
