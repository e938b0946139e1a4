"""What a detail view shows: one workflow's rows and events, read once, and its attempts.

`load_detail` reads a workflow's projection row, step rows, durable calls and events (four
reads, only when a person selects the workflow; never per refresh). `refresh_detail` brings a
snapshot up to date incrementally: the row and the step rows again, and only the events after
the snapshot's last one, folded into its call rows with the store's own pure projection
(`agentq.store.project_call`): a 10,000-call agent run is not read again while it runs.
`attempts_of` folds a step's events into its `Attempt` s with their timings, worker, lease
and error. Pure otherwise: the renderers in `agentq.widgets.html.detail` take a
`DetailSnapshot` and "now".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentq.events import Event, EventKind
from agentq.store import (
    CallRow,
    DurableStore,
    StepRow,
    WorkflowRow,
    project_call,
    touches_calls,
)

__all__ = [
    "Attempt", "DetailSnapshot", "attempts_of", "load_detail", "refresh_detail", "shown_step",
]

_K = EventKind
_WORKFLOW_ENDS = frozenset({_K.WORKFLOW_CANCELLED, _K.WORKFLOW_FAILED, _K.WORKFLOW_COMPLETED})


@dataclass(slots=True)
class Attempt:
    """One attempt of a step, from its `StepStarted` to its outcome.

    Attributes:
        number: The attempt number (1-based; a re-admitted attempt after a crash repeats it).
        started: Unix seconds of its `StepStarted`.
        ended: Unix seconds of its outcome, or None while it runs.
        outcome: running, completed, failed, timeout, cancelled, waited or lost.
        worker_id: The worker that ran it.
        lease_token: The fencing token of its claim.
        reason: The failure, wait or recovery reason, else None.
        error: The error (``{"type", "message", "traceback"}``) of a failed attempt, else None.
    """

    number: int | None
    started: float
    ended: float | None = None
    outcome: str = "running"
    worker_id: str | None = None
    lease_token: int | None = None
    reason: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class DetailSnapshot:
    """A workflow as its detail view shows it.

    Attributes:
        workflow: Its projection row.
        steps: Its step rows, in step order.
        calls: Its durable calls and waits (`CallRow`), in first-recorded order.
        events: Its events, by ``seq``.
    """

    workflow: WorkflowRow
    steps: tuple[StepRow, ...] = ()
    calls: tuple[CallRow, ...] = ()
    events: tuple[Event, ...] = field(default=())

    def step(self, index: int) -> StepRow | None:
        """Return the step row at `index`, or None."""
        return next((s for s in self.steps if s.step_index == index), None)

    def call(self, key: str) -> CallRow | None:
        """Return the call or wait row with `key`, or None."""
        return next((c for c in self.calls if c.key == key), None)


async def load_detail(store: DurableStore, workflow_id: str) -> DetailSnapshot | None:
    """Read one workflow for its detail view; None when it is not stored.

    Raises:
        StoreError: The store failed.
    """
    row = await store.get_workflow(workflow_id)
    if row is None:
        return None
    steps = await store.step_rows(workflow_id)
    calls = await store.calls(workflow_id)
    events = await store.load_events(workflow_id)
    return DetailSnapshot(row, tuple(steps), tuple(calls), tuple(events))


async def refresh_detail(store: DurableStore, snap: DetailSnapshot) -> DetailSnapshot | None:
    """Return `snap` brought up to date; None when the workflow is no longer stored.

    Reads the workflow's row, its step rows (one per step) and its events after the last one
    `snap` holds; the call rows are the old ones with those events applied
    (`agentq.store.project_call`), so the cost follows what changed, not the run's size. Falls
    back to `load_detail` if the new events do not fit the rows (a rebuilt log).

    Raises:
        StoreError: The store failed.
    """
    workflow_id = snap.workflow.workflow_id
    row = await store.get_workflow(workflow_id)
    if row is None:
        return None
    after = snap.events[-1].seq if snap.events else 0
    new = await store.load_events(workflow_id, after_seq=after)
    if not new and row == snap.workflow:
        return snap
    steps = await store.step_rows(workflow_id)
    calls = {c.key: c for c in snap.calls}
    try:
        for event in new:
            if touches_calls(event):
                key = str(event.data["key"])
                one = {key: calls[key]} if key in calls else {}
                calls[key] = project_call(event, one)[key]  # O(1): one row, not all
    except (KeyError, ValueError):
        return await load_detail(store, workflow_id)
    return DetailSnapshot(row, tuple(steps), tuple(calls.values()), snap.events + tuple(new))


def shown_step(step: StepRow, workflow: WorkflowRow | str | None) -> str:
    """Return the status every view shows `step` with (a `StepState` value, or "cancelled").

    A workflow's cancellation ends its current step, which the projection stores as
    ``failed`` (reason "cancelled"), so a retry can run it again; shown as failed, a run a
    person cancelled read like a fault (issue 22 fault 6). So a failed step of a
    ``cancelled`` workflow is shown "cancelled" (a step that fails for itself fails its
    workflow, which can no longer be cancelled); any other step as stored.

    Args:
        step: The step's row.
        workflow: Its workflow's row, or that row's state value; None when unknown (the
            step is then shown as stored).
    """
    state = step.state.value
    wf_state = workflow.state.value if isinstance(workflow, WorkflowRow) else workflow
    return "cancelled" if state == "failed" and wf_state == "cancelled" else state


def attempts_of(events: tuple[Event, ...] | list[Event], step_index: int) -> list[Attempt]:
    """Fold a step's events into its attempts, oldest first.

    An attempt still open when a later `StepStarted` arrives was taken over (lost); one open
    when the workflow closes ends with the workflow's outcome.
    """
    out: list[Attempt] = []

    def close(at: float, outcome: str, reason: str | None = None) -> None:
        if out and out[-1].ended is None:
            out[-1].ended, out[-1].outcome = at, outcome
            if reason is not None:
                out[-1].reason = reason

    for ev in events:
        at = ev.at.timestamp()
        if ev.step_index is None or ev.kind in _WORKFLOW_ENDS:  # WorkflowFailed names its step
            if ev.kind in (_K.WORKFLOW_CANCELLED, _K.WORKFLOW_FAILED, _K.WORKFLOW_COMPLETED):
                outcome = {"WorkflowCancelled": "cancelled", "WorkflowFailed": "failed"}
                close(at, outcome.get(ev.kind.value, "completed"))
            continue
        if ev.step_index != step_index:
            continue
        if ev.kind == _K.STEP_STARTED:
            close(at, "lost")
            token = ev.data.get("lease_token")
            out.append(Attempt(ev.attempt, at, worker_id=ev.worker_id,
                               lease_token=token if isinstance(token, int) else None))
        elif ev.kind == _K.STEP_COMPLETED:
            close(at, "completed")
        elif ev.kind == _K.STEP_FAILED:
            close(at, "timeout" if ev.reason == "timeout" else "failed", ev.reason)
            error = ev.data.get("error")
            if out and isinstance(error, dict):
                out[-1].error = error
        elif ev.kind == _K.STEP_WAITING:
            close(at, "waited", ev.reason)
        elif ev.kind == _K.WORKER_RECOVERED:
            close(at, "lost", ev.reason)
    return out
