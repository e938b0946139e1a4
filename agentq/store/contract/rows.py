"""The rows a store hands back: workflow, step and call rows, their states, and event rows.

`WorkflowRow`, `StepRow` and `CallRow` are the projection as the read side sees it
(`DurableStore.workflows`, `DurableStore.step_rows`, `DurableStore.calls`); `StepState`,
`WorkflowState`, `CallKind` and `CallState` are stored as their values.
`event_row` turns an `Event` into the plain tuple of `DurableStore.event_rows`, in
`EVENT_COLUMNS` order (what the notebook layer loads into a DataFrame).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from agentq.codec import dumps
from agentq.events import Event, EventKind
from agentq.outcomes import ErrorInfo
from agentq.store.contract.frozen import quick_init

__all__ = [
    "EVENT_COLUMNS",
    "INPUT_KINDS",
    "KEY_KINDS",
    "LABEL_KINDS",
    "OUTPUT_KINDS",
    "REASON_KINDS",
    "CallKind",
    "CallShown",
    "CallRow",
    "CallState",
    "StepRow",
    "StepState",
    "WorkflowRow",
    "WorkflowState",
    "event_row",
    "shown_call",
]

_K = EventKind


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


@quick_init
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
        definition: The name of the `WorkflowDef` it was made from (any engine that
            registered that definition can run it), or None for a plain `Workflow` (tied to
            the process that registered it) and for workflows written before definitions
            existed (schema version 5 and older).
        deadline: Unix seconds after which the workflow fails with the reason
            ``WorkflowTimedOut`` if it has not ended (`DurableStore.time_out_workflow`;
            a claim after it fails it too), or None (no deadline; also every workflow
            written before deadlines existed, schema version 6 and older).
    """

    workflow_id: str
    state: WorkflowState
    step_names: tuple[str, ...]
    input: Any
    reason: str | None
    created_at: float
    updated_at: float
    last_seq: int
    definition: str | None = None
    deadline: float | None = None


@quick_init
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
        recoveries: Attempts lost to crashes (one per `WorkerRecovered` of a crash: a lease
            that ran out, or whose worker process is gone, without an outcome; a lease its
            worker handed back after a shutdown is not counted), counted like `attempt`;
            bounded by ``StepDef.max_recoveries`` when the step is claimed.
        wait_key: While the step waits on a keyed wait (``ctx.wait_for_input``), its key;
            else None (also for the step-level ``raise WaitForInput``).
        wait_details: The keyed wait's details (a JSON object), else None.
        wait_deadline: The keyed wait's deadline (Unix seconds), else None.
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
    wait_key: str | None = None
    wait_details: dict[str, Any] | None = None
    wait_deadline: float | None = None


class CallKind(StrEnum):
    """What a row of the ``calls`` projection records (values are stored)."""

    CALL = "call"
    """A durable call (``ctx.call``): states started, completed, failed."""
    WAIT = "wait"
    """A durable wait (``ctx.wait_for_input``): states waiting, answered, timed_out."""


class CallState(StrEnum):
    """A durable call's or wait's state in the projection (values are stored)."""

    STARTED = "started"
    """A call's `CallStarted` is recorded and no outcome yet: running, or in doubt after a
    crash (it may have reached the outside world)."""
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING = "waiting"
    ANSWERED = "answered"
    TIMED_OUT = "timed_out"


@quick_init
@dataclass(frozen=True, slots=True)
class CallRow:
    """One row of the ``calls`` projection: a durable call or wait of a workflow, by key.

    Keys are scoped to the workflow (two workflows may use one key) and a key is either a
    call or a wait, never both. Times are Unix seconds.

    Attributes:
        workflow_id: The workflow.
        key: The call's or wait's key, as given.
        kind: `CallKind.CALL` or `CallKind.WAIT`.
        step_index: The step of its latest start (a call) or wait.
        state: started, completed or failed (a call); waiting, answered or timed_out (a wait).
        fingerprint: The stored fingerprint of the call (None: not compared); None for waits.
        lane: The queue lane the call ran in, else None.
        attempt: The step attempt of its latest `CallStarted` / outcome (a call), or of the
            attempt that recorded the wait.
        label: The caller's JSON object stored with the call, else None.
        usage: The usage figures recorded on completion (a JSON object), else None.
        output: A completed call's output, or an answered wait's input (JSON); else None.
        reason: The wait's question, or a failed call's reason; else None.
        error: A failed call's error, else None.
        details: The wait's details (a JSON object), else None.
        deadline: The wait's deadline, else None.
        started_at: When the latest run of the call started, or the wait was recorded.
        finished_at: When the call completed or failed, or the wait was answered or timed
            out; None while started or waiting.
        duration: Seconds the latest run took (as the caller measured it), or the wait
            lasted; None while started or waiting.
        runs: How many `CallStarted` the call has (more than 1: it ran again after a
            failure or a crash); for a wait, how many times it was asked (1, unless a
            retried workflow asked again a wait its cancellation left unanswered).
        last_seq: Sequence number of its latest event.
        first_seq: Sequence number of its first event: `DurableStore.calls` lists rows in
            this order.
    """

    workflow_id: str
    key: str
    kind: CallKind
    step_index: int
    state: CallState
    fingerprint: str | None = None
    lane: str | None = None
    attempt: int = 0
    label: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    output: Any = None
    reason: str | None = None
    error: ErrorInfo | None = None
    details: dict[str, Any] | None = None
    deadline: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration: float | None = None
    runs: int = 0
    last_seq: int = 0
    first_seq: int = 0


class CallShown(NamedTuple):
    """How a call or wait row is shown (`shown_call`).

    Attributes:
        state: The state shown: the row's `CallState` value, or the workflow's
            `WorkflowState` value (e.g. ``cancelled``) for a wait its closed workflow left
            waiting.
        finished_at: Unix seconds it ended: the row's ``finished_at``, or the workflow's
            ``updated_at`` (when it closed) for such a wait; None while still open.
    """

    state: str
    finished_at: float | None


def shown_call(workflow: WorkflowRow, row: CallRow) -> CallShown:
    """Return the state and end time `row` (a call or wait of `workflow`) is shown with.

    The one rule of every view (``agentq show``, its ``--json``, the HTML export and the
    tree): a wait still ``waiting`` in a workflow that closed (cancelled, failed) has ended,
    so it is shown with the workflow's state and the workflow's close time, never as waiting
    with a growing duration. The stored row is unchanged, since a retry re-opens the same
    wait. Any other row is shown as stored.

    Args:
        workflow: The workflow's row.
        row: One of its call or wait rows.

    Returns:
        `CallShown` ``(state, finished_at)``.
    """
    if row.state is CallState.WAITING and workflow.state.closed:
        return CallShown(workflow.state.value, workflow.updated_at)
    return CallShown(row.state.value, row.finished_at)


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
    "key",
    "label",
    "forked_from",
)
"""Column order of `DurableStore.event_rows`: ``at`` is Unix seconds; ``output``, ``input`` and
``label`` are JSON text (or None); ``key`` is the durable call's or wait's key (or None);
``forked_from`` the parent's id on a fork's `WorkflowForked` and on the copies of its
parent's history (or None)."""


REASON_KINDS = frozenset(
    {
        _K.STEP_FAILED,
        _K.STEP_WAITING,
        _K.WORKFLOW_FAILED,
        _K.WORKFLOW_CANCELLED,
        _K.WORKER_RECOVERED,
        _K.LEASE_RELEASED,
        _K.CALL_FAILED,
    }
)
"""Kinds whose ``data`` has a ``reason`` (the ``reason`` column of `DurableStore.event_rows`)."""
OUTPUT_KINDS = frozenset({_K.STEP_COMPLETED, _K.CALL_COMPLETED})
"""Kinds whose ``data`` has an ``output`` (the ``output`` column of `DurableStore.event_rows`)."""
INPUT_KINDS = frozenset({_K.WORKFLOW_STARTED, _K.STEP_RESUMED, _K.CHILD_ENDED})
"""Kinds whose ``data`` has an ``input`` (the ``input`` column of `DurableStore.event_rows`)."""
LABEL_KINDS = frozenset({_K.CALL_STARTED, _K.CALL_COMPLETED, _K.CALL_FAILED})
"""Kinds whose ``data`` has a call's ``label`` (the ``label`` column of `DurableStore.event_rows`;
None there when the call has no label)."""
KEY_KINDS = LABEL_KINDS | {
    _K.WAIT_TIMED_OUT, _K.STEP_WAITING, _K.STEP_RESUMED, _K.CHILD_STARTED, _K.CHILD_ENDED
}
"""Kinds whose ``data`` may have a durable call's or wait's ``key`` (the ``key`` column of
`DurableStore.event_rows`; a step-level wait's `StepWaiting` and `StepResumed` have none)."""


def event_row(event: Event) -> tuple[Any, ...]:
    """Return `event` as a tuple in `EVENT_COLUMNS` order (JSON text for output, input, label)."""
    kind, data = event.kind, event.data
    label = data.get("label") if kind in LABEL_KINDS else None
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
        dumps(data.get("output")) if kind in OUTPUT_KINDS else None,
        dumps(data.get("input")) if kind in INPUT_KINDS else None,
        data.get("key") if kind in KEY_KINDS else None,
        None if label is None else dumps(label),
        data.get("forked_from", data.get("parent") if kind is _K.WORKFLOW_FORKED else None),
    )
