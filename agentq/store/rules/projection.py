"""The projection as a pure function of the event log: `project` and `replay`.

Every store changes its ``workflows``, ``steps``, ``calls`` and ``messages`` rows only through
`project` (every rule writes through `agentq.store.rules.tx.apply`, which calls it), and
`rebuild_projection` folds the whole log through the same function with `replay`; so the
projection always equals a replay of the log. The one documented exception is a lease's expiry
time extended by `renew_lease`, which appends no event: a replayed lease expires as of its
`StepStarted` event.

What each event does to the rows (besides setting the workflow's ``updated_at`` and
``last_seq``):

=====================  =================================================================
WorkflowStarted        creates the workflow (running, with its definition's name or None)
                       and its steps (pending)
StepStarted            step leased: attempt, worker, lease token and expiry from the event
StepCompleted          step completed with its output; lease cleared
StepFailed             step failed with reason and error; lease cleared
RetryScheduled         the failed step is pending again until ``retry_at``
StepWaiting            step waiting (reason; a keyed wait's key, details and deadline);
                       workflow waiting; lease cleared
StepResumed            step pending, attempt and recoveries back to 0, resume input kept,
                       wait fields cleared; workflow running
WaitTimedOut           step pending, attempt and recoveries back to 0, wait fields
                       cleared; workflow running (the step continues and its wait raises
                       `InputTimeout`)
WorkerRecovered        the lost attempt's lease is dropped: step pending, ``recoveries`` + 1
                       unless ``crash`` is false (a lease its worker handed back after a
                       shutdown), ``attempt`` - 1 (a lost attempt does not count toward
                       max_attempts; the re-admitted one runs under the same number)
LeaseReleased          the fence of a lease a cancel revoked is lifted: the step's
                       ``lease_expires_at`` is cleared (its state is unchanged)
WorkflowCompleted      workflow completed
WorkflowFailed         workflow failed with the reason
WorkflowCancelled      workflow cancelled; leased and waiting steps become failed
                       ("cancelled") so that nothing holds a lease on a closed workflow;
                       the leased step keeps its worker and, as ``lease_expires_at``, the
                       event's ``fenced_until``: the revoked lease fences it (see below)
WorkflowRetried        workflow running again, reason cleared; the steps from ``from_step``
                       on are pending as if never run (counters, outputs, errors, resume
                       input, wait fields and times cleared) but keep their fencing token,
                       which goes on increasing, and a fence (worker and expiry); the steps
                       before keep their outputs
WorkflowForked         nothing but ``updated_at`` and ``last_seq`` (the lineage is read
                       from the event)
CallStarted, …         call events change only the call row (see `projection_calls`),
                       as do `ChildStarted` and `ChildEnded`
MessageSent            only a message row (see `projection_messages`; a `StepResumed`
                       that delivers a message also consumes its row)
=====================  =================================================================

A *fence* is a failed or pending step whose ``lease_expires_at`` is set: the lease a cancel
revoked, whose body may still run until its worker notices. `agentq.store.rules.lease.claim_step`
lets no other worker claim the step before `LeaseReleased` (its worker handed it back once the
body stopped, or is gone) or before the fence's expiry has passed (a claim then, or one by
the fence's own worker, records `LeaseReleased` first); ready-work queries skip it likewise.
The fence's expiry is the one the cancel recorded (``fenced_until``: a renewal is not
logged, so the live lease's expiry is written into the event), so a replay fences alike.

Events of durable calls and keyed waits also change the workflow's ``calls`` rows, through
`agentq.store.rules.projection_calls.project_call`; call rows are never touched by cancellation (a
started call stays started: in doubt; a wait stays waiting, unanswered) nor by a retry (what
reached the outside world stays recorded; a retried step answers its completed calls from the
log and may ask its unanswered wait again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from agentq.events import Event, EventKind
from agentq.store.contract.frozen import quick_init
from agentq.store.contract.messages import MessageRow
from agentq.store.contract.rows import CallRow, StepRow, StepState, WorkflowRow, WorkflowState
from agentq.store.rules.projection_calls import CALL_KINDS, project_call, touches_calls
from agentq.store.rules.projection_messages import message_seq, project_message, touches_messages
from agentq.store.rules.projection_steps import STEP_KINDS, closed, fresh, is_fenced, step_after

__all__ = ["CANCELLED_STEP_REASON", "TIMED_OUT_REASON", "Rows", "is_fenced", "project", "replay"]

CANCELLED_STEP_REASON = "cancelled"
"""`StepRow.reason` of a step that was leased or waiting when its workflow was cancelled."""
TIMED_OUT_REASON = "WorkflowTimedOut"
"""The reason of a workflow that reached its deadline (followed by ``: ...`` details), and of
its steps that were leased or waiting then."""

_K = EventKind


@quick_init
@dataclass(frozen=True, slots=True)
class Rows:
    """The projection of one workflow: its row and (some of) its step and call rows.

    Attributes:
        workflow: The workflow's row, or None before `WorkflowStarted`.
        steps: Step rows by step index. A verb loads only the steps its events touch (the
            step itself; every step for cancellation, retry and the last completion); a
            replay holds them all.
        calls: Call rows by key. A verb loads only the key its events touch; `replay`
            returns them all.
        messages: Message rows by ``seq``, likewise.
    """

    workflow: WorkflowRow | None
    steps: Mapping[int, StepRow]
    calls: Mapping[str, CallRow] = field(default_factory=dict)
    messages: Mapping[int, MessageRow] = field(default_factory=dict)


def project(event: Event, rows: Rows) -> Rows:
    """Apply one event to one workflow's rows; pure (returns new rows, shares unchanged ones).

    Args:
        event: An event of the workflow, with its sequence number.
        rows: The workflow's rows before the event (the rows the event touches must be
            present; see `Rows`).

    Returns:
        The rows after the event. Unchanged step rows are the same objects, so a caller can
        write only what changed (compare with ``is``).

    Raises:
        ValueError: The event does not fit the rows (a corrupt log): an unknown workflow or
            step, or a second `WorkflowStarted`.
    """
    at = event.timestamp
    if event.kind is _K.WORKFLOW_STARTED:
        if rows.workflow is not None:
            raise ValueError(f"event #{event.seq}: workflow {event.workflow_id!r} started twice")
        names = tuple(str(n) for n in event.data["steps"])
        deadline, run_at = event.data.get("deadline"), event.data.get("run_at")
        workflow = WorkflowRow(
            event.workflow_id,
            WorkflowState.RUNNING,
            names,
            event.data.get("input"),
            None,
            at,
            at,
            event.seq,
            event.data.get("definition"),
            None if deadline is None else float(deadline),
        )
        steps0 = {
            i: StepRow(event.workflow_id, i, n, StepState.PENDING) for i, n in enumerate(names)
        }
        if run_at is not None:  # not claimable before run_at: as a retry time of step 0
            steps0[0] = replace(steps0[0], retry_at=float(run_at))
        return Rows(workflow, steps0)
    wf = rows.workflow
    if wf is None:
        raise ValueError(f"event #{event.seq} for workflow {event.workflow_id!r} before its start")
    state, reason = wf.state, wf.reason
    steps: Mapping[int, StepRow] = rows.steps
    calls = rows.calls
    messages = rows.messages
    kind = event.kind
    if touches_calls(event):
        calls = project_call(event, calls)
    if touches_messages(event):
        messages = project_message(event, messages)
    if kind in STEP_KINDS:
        index = event.step_index
        if index is None or index not in steps:
            raise ValueError(f"event #{event.seq} ({kind}) names step {index!r}, not loaded")
        steps = {**steps, index: step_after(event, steps[index], at)}
        if kind is _K.STEP_WAITING:
            state = WorkflowState.WAITING
        elif kind in (_K.STEP_RESUMED, _K.WAIT_TIMED_OUT):
            state = WorkflowState.RUNNING
    elif kind in CALL_KINDS or kind in (_K.WORKFLOW_FORKED, _K.MESSAGE_SENT):
        pass  # the call or message row changed above; a fork's lineage is only in its event
    elif kind is _K.WORKFLOW_COMPLETED:
        state = WorkflowState.COMPLETED
    elif kind is _K.WORKFLOW_FAILED:
        state, reason = WorkflowState.FAILED, event.reason
        if "deadline" in event.data:  # timed out: its leases are revoked, its wait ended
            steps = closed(steps, TIMED_OUT_REASON, at)
    elif kind is _K.WORKFLOW_CANCELLED:
        state, reason = WorkflowState.CANCELLED, event.reason
        until = event.data.get("fenced_until")  # absent in logs written before fences
        # the revoked lease fences the step until it is released or expires
        steps = closed(steps, CANCELLED_STEP_REASON, at, None if until is None else float(until))
    elif kind is _K.WORKFLOW_RETRIED:
        state, reason = WorkflowState.RUNNING, None
        first = int(event.data["from_step"])
        steps = {i: (fresh(s) if i >= first else s) for i, s in steps.items()}
    else:  # pragma: no cover - every kind is handled above
        raise ValueError(f"event #{event.seq} has an unknown kind {kind!r}")
    workflow = WorkflowRow(  # not dataclasses.replace: this runs for every event
        wf.workflow_id,
        state,
        wf.step_names,
        wf.input,
        reason,
        wf.created_at,
        at,
        event.seq,
        wf.definition,
        wf.deadline,
    )
    return Rows(workflow, steps, calls, messages)


def replay(events: Iterable[Event]) -> list[tuple[int, Rows]]:
    """Fold an event log (in sequence order) into the projection.

    Args:
        events: Every event of the log, or of some workflows, by increasing ``seq``.

    Returns:
        ``(started_seq, rows)`` per workflow, in the order they were started, where
        ``started_seq`` is the sequence number of the workflow's `WorkflowStarted`; each
        `Rows` holds all the workflow's steps, its call rows in `CallRow.first_seq` order and
        its message rows in ``seq`` order.

    Raises:
        ValueError: The log is inconsistent (see `project`).
    """
    out: dict[str, tuple[int, Rows]] = {}
    calls: dict[str, dict[str, CallRow]] = {}
    messages: dict[str, dict[int, MessageRow]] = {}
    empty = Rows(None, {})
    for event in events:
        wid = event.workflow_id
        started, rows = out.get(wid, (event.seq, empty))
        on_call, on_message = touches_calls(event), touches_messages(event)
        if on_call or on_message:
            # Hand `project` only the rows it touches: copying every call row of a workflow
            # for each event would make a replay quadratic in its number of calls.
            known = calls.setdefault(wid, {})
            key = str(event.data["key"]) if on_call else ""
            view = {key: known[key]} if on_call and key in known else {}
            kept = messages.setdefault(wid, {})
            seq = message_seq(event) if on_message else -1
            sent = {seq: kept[seq]} if seq in kept else {}
            after = project(event, Rows(rows.workflow, rows.steps, view, sent))
            if on_call:
                known[key] = after.calls[key]
            if on_message:
                kept[seq] = after.messages[seq]
            rows = Rows(after.workflow, after.steps)
        else:
            rows = project(event, rows)
        out[wid] = (started, rows)
    return [
        (started, Rows(rows.workflow, rows.steps, calls.get(wid, {}), messages.get(wid, {})))
        for wid, (started, rows) in out.items()
    ]
