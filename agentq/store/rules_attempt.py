"""Transition rules that end an attempt, under fencing: complete, fail, wait.

The worker presents the `Execution` its claim returned; the write is refused with
`LeaseLostError` once another claim took the step over or the lease was released, and with
`WorkflowClosedError` once the workflow was cancelled meanwhile, so a stale worker's late result
is never recorded. Each function is the rule of the `DurableStore` verb of the same name, run
by a store inside one transaction (see `agentq.store.tx` for the order every rule works in).
"""

from __future__ import annotations

from typing import Any

from agentq.errors import LeaseLostError, WorkflowClosedError
from agentq.events import EventKind
from agentq.outcomes import ErrorInfo
from agentq.store.checks import (
    check_error,
    check_execution,
    check_now,
    check_number,
    check_payload,
    check_text,
)
from agentq.store.claims import Execution
from agentq.store.projection import Rows
from agentq.store.rows import StepRow, StepState, WorkflowRow
from agentq.store.tx import Draft, Tx, apply, describe_closed, describe_step, load_step

__all__ = ["complete_step", "fail_step", "wait_step"]

_K = EventKind


def _fenced(
    tx: Tx, execution: object, verb: str
) -> tuple[Execution, WorkflowRow, dict[int, StepRow]]:
    """Load the execution's rows and check that it still holds its lease (fencing)."""
    ex = check_execution(execution)
    wf, steps = load_step(tx, ex.workflow_id, ex.step_index)
    step = steps[ex.step_index]
    if step.lease_token != ex.lease_token or step.worker_id != ex.worker_id:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"was taken over by lease #{step.lease_token} of worker {step.worker_id!r} "
            f"(the step is {step.state})"
        )
    if wf.state.closed:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise WorkflowClosedError(f"{verb} refused for {where}: {describe_closed(wf)}")
    if step.state is not StepState.LEASED:
        where = describe_step(ex.workflow_id, ex.step_index, step.step_name)
        raise LeaseLostError(
            f"{verb} refused for {where}: lease #{ex.lease_token} of worker {ex.worker_id!r} "
            f"no longer holds it (the step is {step.state})"
        )
    return ex, wf, steps


def complete_step(tx: Tx, execution: Execution, output: Any, now: float) -> WorkflowRow:
    """Rule of `DurableStore.complete_step`: `StepCompleted`, and `WorkflowCompleted` (with
    every step's output) after the last step."""
    now, at = check_now(now)
    value, text = check_payload(output, "output")
    ex, wf, steps = _fenced(tx, execution, "complete_step")
    step = steps[ex.step_index]
    drafts = [
        Draft.build(
            _K.STEP_COMPLETED,
            ex.workflow_id,
            at,
            {"output": value},
            step=step,
            attempt=ex.attempt,
            worker_id=ex.worker_id,
            raw={"output": text},
        )
    ]
    last = len(wf.step_names) - 1
    if ex.step_index == last:
        _, steps = tx.load(ex.workflow_id, 0, last)
        outputs = [steps[i].output for i in range(last)] + [value]
        drafts.append(
            Draft.build(_K.WORKFLOW_COMPLETED, ex.workflow_id, at, {"outputs": outputs})
        )
    return apply(tx, Rows(wf, steps), drafts)


def fail_step(
    tx: Tx,
    execution: Execution,
    reason: str,
    error: ErrorInfo | None,
    now: float,
    retry_at: float | None,
) -> WorkflowRow:
    """Rule of `DurableStore.fail_step`: `StepFailed`, then `RetryScheduled` (the step is
    pending again) or `WorkflowFailed`."""
    now, at = check_now(now)
    reason = check_text(reason, "reason")
    info = check_error(error)
    retry = None if retry_at is None else check_number(retry_at, "retry_at")
    ex, wf, steps = _fenced(tx, execution, "fail_step")
    step = steps[ex.step_index]
    failed = Draft.build(
        _K.STEP_FAILED,
        ex.workflow_id,
        at,
        {"reason": reason, "error": info},
        step=step,
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    if retry is None:
        follow = Draft.build(
            _K.WORKFLOW_FAILED, ex.workflow_id, at, {"reason": reason}, step=step
        )
    else:
        follow = Draft.build(
            _K.RETRY_SCHEDULED,
            ex.workflow_id,
            at,
            {"retry_at": retry, "delay": max(retry - now, 0.0)},
            step=step,
            attempt=ex.attempt,
            worker_id=ex.worker_id,
        )
    return apply(tx, Rows(wf, steps), [failed, follow])


def wait_step(tx: Tx, execution: Execution, reason: str, now: float) -> WorkflowRow:
    """Rule of `DurableStore.wait_step`: `StepWaiting`; the lease is released."""
    now, at = check_now(now)
    reason = check_text(reason, "reason")
    ex, wf, steps = _fenced(tx, execution, "wait_step")
    draft = Draft.build(
        _K.STEP_WAITING,
        ex.workflow_id,
        at,
        {"reason": reason},
        step=steps[ex.step_index],
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    return apply(tx, Rows(wf, steps), [draft])
