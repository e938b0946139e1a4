"""Step rows as each event leaves them: the step part of `agentq.store.rules.projection`.

`step_after` is the transition of one step row by one step event (`STEP_KINDS`); `fresh` and
`closed` are what a workflow's retry and end do to its steps; `is_fenced` says whether a step
is fenced by a lease a cancel revoked. See the projection module's docstring for the table
of events and what a fence is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from agentq.events import Event, EventKind
from agentq.store.contract.rows import StepRow, StepState
from agentq.store.rules.fence import StepLease
from agentq.store.rules.projection_calls import error_info

__all__ = ["STEP_KINDS", "closed", "fresh", "is_fenced", "step_after"]

_K = EventKind


def step_after(event: Event, step: StepRow, at: float) -> StepRow:
    """Return `step` as `event` (a step event) leaves it."""
    data = event.data
    match event.kind:
        # The two transitions of every step are built field by field (in `StepRow` order):
        # `dataclasses.replace` costs three times as much, and they run once per verb.
        case _K.STEP_STARTED:
            return StepRow(
                step.workflow_id,
                step.step_index,
                step.step_name,
                StepState.LEASED,
                event.attempt or 0,  # attempt
                event.worker_id,
                int(data["lease_token"]),
                float(data["expires_at"]),  # lease_expires_at
                step.output,
                None,  # reason
                step.error,
                step.resume_input,
                step.resumed,
                None,  # retry_at
                at if step.started_at is None else step.started_at,
                None,  # finished_at
                step.recoveries,
                step.wait_key,
                step.wait_details,
                step.wait_deadline,
            )
        case _K.STEP_COMPLETED:
            return StepRow(
                step.workflow_id,
                step.step_index,
                step.step_name,
                StepState.COMPLETED,
                step.attempt,
                step.worker_id,
                step.lease_token,
                None,  # lease_expires_at
                data.get("output"),
                None,  # reason
                step.error,
                step.resume_input,
                step.resumed,
                None,  # retry_at
                step.started_at,
                at,  # finished_at
                step.recoveries,
                step.wait_key,
                step.wait_details,
                step.wait_deadline,
            )
        case _K.STEP_FAILED:
            return replace(
                step,
                state=StepState.FAILED,
                reason=data.get("reason"),
                error=error_info(data.get("error")),
                lease_expires_at=None,
                finished_at=at,
            )
        case _K.RETRY_SCHEDULED:
            return replace(
                step, state=StepState.PENDING, retry_at=float(data["retry_at"]), finished_at=None
            )
        case _K.STEP_WAITING:
            deadline = data.get("deadline")
            return replace(
                step,
                state=StepState.WAITING,
                reason=data.get("reason"),
                lease_expires_at=None,
                wait_key=data.get("key"),
                wait_details=data.get("details"),
                wait_deadline=None if deadline is None else float(deadline),
            )
        case _K.STEP_RESUMED:
            return replace(
                step,
                state=StepState.PENDING,
                attempt=0,
                resume_input=data.get("input"),
                resumed=True,
                reason=None,
                retry_at=None,
                recoveries=0,
                wait_key=None,
                wait_details=None,
                wait_deadline=None,
            )
        case _K.WAIT_TIMED_OUT:
            return replace(
                step,
                state=StepState.PENDING,
                attempt=0,
                reason=None,
                retry_at=None,
                recoveries=0,
                wait_key=None,
                wait_details=None,
                wait_deadline=None,
            )
        case _K.WORKER_RECOVERED:
            return replace(
                step,
                state=StepState.PENDING,
                lease_expires_at=None,
                attempt=max(step.attempt - 1, 0),
                recoveries=step.recoveries + (1 if data.get("crash", True) else 0),
            )
        case _K.LEASE_RELEASED:
            return replace(step, lease_expires_at=None)
    raise ValueError(f"event #{event.seq} of kind {event.kind} is not a step event")


STEP_KINDS = frozenset(
    {
        _K.STEP_STARTED,
        _K.STEP_COMPLETED,
        _K.STEP_FAILED,
        _K.RETRY_SCHEDULED,
        _K.STEP_WAITING,
        _K.STEP_RESUMED,
        _K.WAIT_TIMED_OUT,
        _K.WORKER_RECOVERED,
        _K.LEASE_RELEASED,
    }
)


def is_fenced(step: StepRow | StepLease) -> bool:
    """Whether `step` is fenced by a lease a cancel revoked (see the module docstring): it is
    failed or pending with a ``lease_expires_at``, which only a cancel of its lease leaves."""
    return step.lease_expires_at is not None and step.state in (
        StepState.FAILED,
        StepState.PENDING,
    )


def fresh(step: StepRow) -> StepRow:
    """Return `step` as a retry from it (or from an earlier step) leaves it: never run, but
    still fenced by a lease a cancel revoked, if any (its body may still run)."""
    fenced = is_fenced(step)
    return StepRow(
        step.workflow_id,
        step.step_index,
        step.step_name,
        StepState.PENDING,
        worker_id=step.worker_id if fenced else None,
        lease_token=step.lease_token,  # fencing tokens never go back
        lease_expires_at=step.lease_expires_at if fenced else None,
    )


def closed(
    steps: Mapping[int, StepRow], reason: str, at: float, fence: float | None = None
) -> dict[int, StepRow]:
    """`steps` as a workflow's end leaves them: leased and waiting steps failed (`reason`);
    a leased one keeps `fence` as its lease expiry (a cancel's revoked lease), if given."""
    return {
        i: (
            replace(
                s, state=StepState.FAILED, reason=reason, finished_at=at,
                lease_expires_at=fence if s.state is StepState.LEASED else None,
                wait_key=None, wait_details=None, wait_deadline=None,
            )
            if s.state in (StepState.LEASED, StepState.WAITING)
            else s
        )
        for i, s in steps.items()
    }
