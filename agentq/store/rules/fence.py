"""What a durable call's verb reads: `CallFence`, the workflow's and step's lease in a few values.

`start_call`, `complete_call` and `fail_call` (`agentq.store.rules.calls`) run once for each
call a step makes, so they read only what they check: the workflow's state, reason and step
names, the step's lease (`StepLease`: worker, fencing token, expiry, state) and the call's
row, through `Tx.load_fence`. A SQL store reads them in one statement without decoding the
workflow's input or the step's output; a store that reads whole rows builds the fence from
them (`fence_of`). `check_known` names an unknown workflow or step, for these verbs and for
`agentq.store.rules.tx.load_step` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from agentq.errors import UnknownStepError, UnknownWorkflowError
from agentq.store.contract.rows import CallRow, StepRow, StepState, WorkflowRow, WorkflowState

__all__ = ["CallFence", "StepLease", "check_known", "fence_of"]


class StepLease(NamedTuple):
    """The lease of a step row, as `agentq.store.rules.attempt.check_fence` checks it (the
    same names as in `StepRow`)."""

    step_index: int
    step_name: str
    state: StepState
    worker_id: str | None
    lease_token: int
    lease_expires_at: float | None


class CallFence(NamedTuple):
    """What a call verb reads of its workflow (the same names as in `WorkflowRow`).

    Attributes:
        workflow_id, state, reason, step_names: As in `WorkflowRow`.
        step: The lease of the verb's step, or None if the workflow has no such step row.
        call: The call's row, or None if the key was never recorded.
    """

    workflow_id: str
    state: WorkflowState
    reason: str | None
    step_names: tuple[str, ...]
    step: StepLease | None
    call: CallRow | None


def fence_of(
    wf: WorkflowRow | None, steps: Mapping[int, StepRow], index: int, call: CallRow | None
) -> CallFence | None:
    """The fence of step `index` from whole rows (`Tx.load` and `Tx.load_call`), or None if
    the workflow is not stored."""
    if wf is None:
        return None
    step = steps.get(index)
    lease = None if step is None else StepLease(
        step.step_index,
        step.step_name,
        step.state,
        step.worker_id,
        step.lease_token,
        step.lease_expires_at,
    )
    return CallFence(wf.workflow_id, wf.state, wf.reason, wf.step_names, lease, call)


def check_known(
    workflow_id: str, index: int, step_names: tuple[str, ...] | None, found: bool
) -> None:
    """Raise if the workflow is not stored (`step_names` None) or has no step `index`.

    Raises:
        UnknownWorkflowError: The workflow is not stored.
        UnknownStepError: `index` is outside its steps, or (a corrupt projection) its step
            has no row (`found` false).
    """
    if step_names is not None and 0 <= index < len(step_names) and found:
        return
    where = f"step #{index} of workflow {workflow_id!r}"
    if step_names is None:
        raise UnknownWorkflowError(f"workflow {workflow_id!r} is not in the store")
    if not 0 <= index < len(step_names):
        raise UnknownStepError(
            f"workflow {workflow_id!r} has no {where}: it has {len(step_names)} steps "
            f"{list(step_names)!r}"
        )
    if not found:  # pragma: no cover - a corrupt projection
        raise UnknownStepError(f"{where} has no row in the projection")
