"""Claiming a step: the `Execution` a claim hands out, and what `claim_step` returns.

An `Execution` is a held lease: the worker, its fencing token (``lease_token``) and the lease's
expiry. `ClaimResult` is the closed set of answers to a claim (`Claimed`, `AlreadyCompleted`,
`HeldByOther`, `AlreadyWaiting`, `WorkflowClosed`, `NotBefore`). `execution_of` and `is_expired`
read a lease off a leased `StepRow`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from agentq.store.contract.rows import StepRow, StepState, WorkflowState

__all__ = [
    "AlreadyCompleted",
    "AlreadyWaiting",
    "ClaimResult",
    "Claimed",
    "Execution",
    "HeldByOther",
    "NotBefore",
    "WorkflowClosed",
    "execution_of",
    "is_expired",
    "lease_of",
]


@dataclass(frozen=True, slots=True)
class Execution:
    """A claimed step attempt: who holds it, with which fencing token, until when.

    Attributes:
        workflow_id: The workflow.
        step_index: 0-based position.
        step_name: The step's name.
        worker_id: The lease holder.
        lease_token: The fencing token to present with every write for this attempt.
        attempt: 1-based attempt number.
        expires_at: Unix seconds when the lease expires unless renewed.
        revoked: Set by `DurableStore.renew_lease` when a cancel revoked the lease: what
            the renewal extended is the fence that keeps other workers off the step while
            the attempt's body still runs (`expires_at` is the fence's new expiry).
    """

    workflow_id: str
    step_index: int
    step_name: str
    worker_id: str
    lease_token: int
    attempt: int
    expires_at: float
    revoked: bool = False


class ClaimResult:
    """What `DurableStore.claim_step` returns.

    One of `ClaimResult.Claimed(execution, resume_input, resumed, recoveries)`,
    `ClaimResult.AlreadyCompleted(output)`, `ClaimResult.HeldByOther(worker_id, expires_at)`,
    `ClaimResult.AlreadyWaiting(reason)`, `ClaimResult.WorkflowClosed(state, reason)` or
    `ClaimResult.NotBefore(retry_at)`.
    """

    Claimed: ClassVar[type[Claimed]]
    AlreadyCompleted: ClassVar[type[AlreadyCompleted]]
    HeldByOther: ClassVar[type[HeldByOther]]
    AlreadyWaiting: ClassVar[type[AlreadyWaiting]]
    WorkflowClosed: ClassVar[type[WorkflowClosed]]
    NotBefore: ClassVar[type[NotBefore]]


@dataclass(frozen=True, slots=True)
class Claimed(ClaimResult):
    """The caller now holds the step's lease; run the attempt.

    Attributes:
        execution: The lease: present it with every write for this attempt.
        resume_input: The input of the latest resume, if the step was resumed.
        resumed: Whether the step was resumed (so `resume_input` is meaningful).
        recoveries: Earlier runs of the step lost to crashes (see `StepRow.recoveries`);
            more than 0 means this attempt may be a re-run of one that was cut short.
    """

    execution: Execution
    resume_input: Any = None
    resumed: bool = False
    recoveries: int = 0


@dataclass(frozen=True, slots=True)
class AlreadyCompleted(ClaimResult):
    """The step completed earlier; never run it again."""

    output: Any


@dataclass(frozen=True, slots=True)
class HeldByOther(ClaimResult):
    """Another worker holds a live lease on the step."""

    worker_id: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class AlreadyWaiting(ClaimResult):
    """The step waits for input; only `resume_step` moves it on."""

    reason: str


@dataclass(frozen=True, slots=True)
class WorkflowClosed(ClaimResult):
    """The workflow is completed, failed or cancelled (or the step already failed for good)."""

    state: WorkflowState
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NotBefore(ClaimResult):
    """The step's next attempt is scheduled at `retry_at` (Unix seconds), still to come.

    Nothing was recorded: claim again at or after `retry_at`.
    """

    retry_at: float


ClaimResult.Claimed = Claimed
ClaimResult.AlreadyCompleted = AlreadyCompleted
ClaimResult.HeldByOther = HeldByOther
ClaimResult.AlreadyWaiting = AlreadyWaiting
ClaimResult.WorkflowClosed = WorkflowClosed
ClaimResult.NotBefore = NotBefore


def execution_of(row: StepRow) -> Execution:
    """Return the `Execution` a leased step row describes."""
    return Execution(
        row.workflow_id,
        row.step_index,
        row.step_name,
        row.worker_id or "",
        row.lease_token,
        row.attempt,
        row.lease_expires_at if row.lease_expires_at is not None else math.inf,
    )


def lease_of(row: StepRow) -> Execution:
    """Return the lease a step row is under (`DurableStore.live_leases`): `execution_of` a
    leased row; for a pending or failed row fenced by a lease a cancel revoked, that lease
    with ``revoked=True`` (and an attempt of at least 1: a retry resets the row's)."""
    execution = execution_of(row)
    if row.state is StepState.LEASED:
        return execution
    return replace(execution, attempt=max(execution.attempt, 1), revoked=True)


def is_expired(row: StepRow, now: float) -> bool:
    """Whether `row` is a lease that expired before `now` (``now > expires_at``)."""
    return (
        row.state is StepState.LEASED
        and row.lease_expires_at is not None
        and now > row.lease_expires_at
    )
