"""The rows a store hands back: workflow and step rows, their states, and event rows.

`WorkflowRow` and `StepRow` are the projection as the read side sees it (`DurableStore.workflows`,
`DurableStore.step_rows`); `StepState` and `WorkflowState` are stored as their values.
`event_row` turns an `Event` into the plain tuple of `DurableStore.event_rows`, in
`EVENT_COLUMNS` order (what the notebook layer loads into a DataFrame).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agentq.events import Event, EventKind
from agentq.outcomes import ErrorInfo

__all__ = [
    "EVENT_COLUMNS",
    "INPUT_KINDS",
    "REASON_KINDS",
    "StepRow",
    "StepState",
    "WorkflowRow",
    "WorkflowState",
    "event_row",
]

_K = EventKind
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class StepState(StrEnum):
    """A step's state in the projection (values are stored)."""

    PENDING = "pending"
    LEASED = "leased"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"


class WorkflowState(StrEnum):
    """A workflow's state in the projection (values are stored)."""

    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def closed(self) -> bool:
        """True for completed, failed and cancelled: nothing more will happen."""
        return self in (WorkflowState.COMPLETED, WorkflowState.FAILED, WorkflowState.CANCELLED)


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """A workflow as the projection holds it.

    Attributes:
        workflow_id: Stable id.
        state: running, waiting, completed, failed or cancelled.
        step_names: The step names, in order.
        input: The workflow input (JSON).
        reason: Failure or cancellation reason, else None.
        created_at: Unix seconds of `WorkflowStarted`.
        updated_at: Unix seconds of its latest event.
        last_seq: Sequence number of its latest event.
    """

    workflow_id: str
    state: WorkflowState
    step_names: tuple[str, ...]
    input: Any
    reason: str | None
    created_at: float
    updated_at: float
    last_seq: int


@dataclass(frozen=True, slots=True)
class StepRow:
    """One row of the ``steps`` projection.

    Attributes:
        workflow_id: The workflow.
        step_index: 0-based position.
        step_name: The step's name.
        state: pending, leased, waiting, completed or failed.
        attempt: Number of the latest attempt that counts toward ``RetryPolicy.max_attempts``,
            counted since the step started, was last resumed or its workflow retried (0 = none
            yet). An attempt lost to a crash is not counted: once `WorkerRecovered` re-admits
            it, the count goes back one and the re-admitted attempt runs under the same number.
        worker_id: Lease holder (or last holder), else None.
        lease_token: Fencing token of the latest claim (0 = never claimed).
        lease_expires_at: Unix seconds when the lease expires, while leased; else None.
        output: The output once completed (JSON), else None.
        reason: Why it waits or failed, else None.
        error: The last failed attempt's error, else None.
        resume_input: The input delivered by the latest resume (JSON), else None.
        resumed: Whether the step was resumed (so `resume_input` is meaningful).
        retry_at: Unix seconds before which the next attempt should not start, else None.
        started_at: Unix seconds of the first `StepStarted`, else None.
        finished_at: Unix seconds of completion or final failure, else None.
        recoveries: Attempts lost to crashes (one per `WorkerRecovered`: a lease that ran out,
            or whose worker process is gone, without an outcome), counted like `attempt`;
            bounded by ``StepDef.max_recoveries`` when the step is claimed.
    """

    workflow_id: str
    step_index: int
    step_name: str
    state: StepState
    attempt: int = 0
    worker_id: str | None = None
    lease_token: int = 0
    lease_expires_at: float | None = None
    output: Any = None
    reason: str | None = None
    error: ErrorInfo | None = None
    resume_input: Any = None
    resumed: bool = False
    retry_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    recoveries: int = 0


EVENT_COLUMNS: tuple[str, ...] = (
    "seq",
    "at",
    "workflow_id",
    "step_index",
    "step_name",
    "kind",
    "attempt",
    "worker_id",
    "reason",
    "output",
    "input",
)
"""Column order of `DurableStore.event_rows`: ``at`` is Unix seconds; ``output`` and ``input``
are JSON text (or None)."""


REASON_KINDS = frozenset(
    {
        _K.STEP_FAILED,
        _K.STEP_WAITING,
        _K.WORKFLOW_FAILED,
        _K.WORKFLOW_CANCELLED,
        _K.WORKER_RECOVERED,
    }
)
"""Kinds whose ``data`` has a ``reason`` (the ``reason`` column of `DurableStore.event_rows`)."""
INPUT_KINDS = frozenset({_K.WORKFLOW_STARTED, _K.STEP_RESUMED})
"""Kinds whose ``data`` has an ``input`` (the ``input`` column of `DurableStore.event_rows`)."""


def event_row(event: Event) -> tuple[Any, ...]:
    """Return `event` as a tuple in `EVENT_COLUMNS` order (JSON text for output and input)."""
    kind, data = event.kind, event.data
    return (
        event.seq,
        event.timestamp,
        event.workflow_id,
        event.step_index,
        event.step_name,
        str(kind),
        event.attempt,
        event.worker_id,
        data.get("reason") if kind in REASON_KINDS else None,
        _JSON.encode(data.get("output")) if kind is _K.STEP_COMPLETED else None,
        _JSON.encode(data.get("input")) if kind in INPUT_KINDS else None,
    )
