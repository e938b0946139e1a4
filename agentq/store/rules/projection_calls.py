"""The ``calls`` projection as a pure function of the log: `project_call`.

`agentq.store.rules.projection.project` hands every event that concerns a durable call or wait to
`project_call`, which returns the workflow's call rows after it. What each event does to the
row of its ``key`` (the other rows are shared unchanged):

=====================  =================================================================
CallStarted            creates the call row (kind call), or starts it again: state
                       started, ``runs`` + 1, the run's outcome fields cleared; the stored
                       fingerprint is kept when the event has none
CallCompleted          call completed: output, usage, duration, finished_at
CallFailed             call failed: reason, error, duration, finished_at
StepWaiting (key)      creates the wait row (kind wait): state waiting with its reason
                       (the question), details and deadline; a wait still waiting (left
                       so by a cancellation, asked again after a retry) is re-opened: the
                       same row, ``runs`` + 1, its step, attempt, details, deadline and
                       start time from the event; a receive's wait (the event has a
                       ``topic``) has the label ``{"topic": topic}``
StepResumed (key)      wait answered: output is the input; duration is the time it waited
WaitTimedOut           wait timed_out; duration is the time it waited
ChildStarted           creates the wait row of a child run (kind wait, key ``child:<key>``):
                       state waiting, its reason, details {child, definition}; the
                       step's `StepWaiting` on it later re-opens it, its `StepResumed`
                       (the child ended) answers it with the child's outcome
ChildEnded             wait answered with the child's outcome (the child ended while its
                       step did not wait on it); a `StepWaiting` of the step on it later
                       re-opens it (then answered at once by a `StepResumed`)
=====================  =================================================================

A `StepWaiting` or `StepResumed` without a key (the step-level wait) changes no call row.
Every row records the sequence number of its latest event (``last_seq``) and of its first
(``first_seq``, the order `DurableStore.calls` lists rows in).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from agentq.events import Event, EventKind
from agentq.outcomes import ErrorInfo
from agentq.store.contract.children import child_of
from agentq.store.contract.rows import CallKind, CallRow, CallState

__all__ = ["CALL_KINDS", "Logged", "error_info", "project_call", "touches_calls"]

_K = EventKind

CALL_KINDS = frozenset(
    {
        _K.CALL_STARTED, _K.CALL_COMPLETED, _K.CALL_FAILED, _K.WAIT_TIMED_OUT, _K.CHILD_STARTED,
        _K.CHILD_ENDED,
    }
)
"""Kinds that concern only a call row (`WaitTimedOut` also moves its step on)."""


class Logged(NamedTuple):
    """What `project_call` reads of an `Event`, without its `datetime`: a call verb's rule
    projects the event it just appended (`agentq.store.rules.tx.Draft.logged`)."""

    seq: int
    kind: EventKind
    workflow_id: str
    step_index: int | None
    attempt: int | None
    data: dict[str, Any]
    timestamp: float


def error_info(value: Any) -> ErrorInfo | None:
    """Return the `ErrorInfo` an event's ``error`` member describes (None if absent)."""
    if not isinstance(value, dict):
        return None
    return ErrorInfo(
        type=str(value.get("type", "")),
        message=str(value.get("message", "")),
        traceback=str(value.get("traceback", "")),
    )


def touches_calls(event: Event) -> bool:
    """Whether `event` changes a call row (call events; waits and resumes with a key)."""
    kind = event.kind
    if kind in CALL_KINDS:
        return True
    return kind in (_K.STEP_WAITING, _K.STEP_RESUMED) and event.data.get("key") is not None


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _existing(
    event: Event | Logged, calls: Mapping[str, CallRow], key: str, kind: CallKind
) -> CallRow:
    row = calls.get(key)
    if row is None or row.kind is not kind:
        raise ValueError(
            f"event #{event.seq} ({event.kind}) names {kind} key {key!r} of workflow "
            f"{event.workflow_id!r}, not loaded as one"
        )
    return row


def _started(event: Event | Logged, row: CallRow | None, key: str, at: float) -> CallRow:
    data = event.data
    index = event.step_index if event.step_index is not None else -1
    fingerprint = data.get("fingerprint")
    if row is None:
        return CallRow(
            event.workflow_id,
            key,
            CallKind.CALL,
            index,
            CallState.STARTED,
            fingerprint=fingerprint,
            lane=data.get("lane"),
            attempt=event.attempt or 0,
            label=data.get("label"),
            started_at=at,
            runs=1,
            last_seq=event.seq,
            first_seq=event.seq,
        )
    if row.kind is not CallKind.CALL:
        raise ValueError(f"event #{event.seq} starts wait key {key!r} as a call")
    return CallRow(  # not dataclasses.replace (3x the cost): a run of a call starts again
        row.workflow_id,
        row.key,
        row.kind,
        index,
        CallState.STARTED,
        row.fingerprint if fingerprint is None else fingerprint,
        data.get("lane"),
        event.attempt or 0,
        data.get("label"),
        None,  # usage
        None,  # output
        None,  # reason
        None,  # error
        row.details,
        row.deadline,
        at,  # started_at
        None,  # finished_at
        None,  # duration
        row.runs + 1,
        event.seq,  # last_seq
        row.first_seq,
    )


def _child_answered(row: CallRow) -> bool:
    """Whether `row` is a child run's wait answered by its `ChildEnded` (its details name
    the child): the step may still park on it, which re-opens it."""
    return row.state is CallState.ANSWERED and child_of(row) is not None


def _parks_on_child(event: Event | Logged, row: CallRow) -> bool:
    """Whether `event` is a step parking on its child run's wait `row`: not a run of the
    row (a child's wait row counts its `ChildStarted` events: the starts and re-joins)."""
    return event.kind is _K.STEP_WAITING and child_of(row) is not None


def _waiting(event: Event | Logged, row: CallRow | None, key: str, at: float) -> CallRow:
    data = event.data
    index = event.step_index if event.step_index is not None else -1
    topic = data.get("topic")
    label = None if topic is None else {"topic": topic}
    if row is not None:
        if row.kind is not CallKind.WAIT or (
            row.state is not CallState.WAITING and not _child_answered(row)
        ):
            raise ValueError(f"event #{event.seq} waits on key {key!r}, recorded before")
        return replace(  # asked again after a retry: the same wait, re-opened
            row,
            state=CallState.WAITING,
            output=None,
            finished_at=None,
            duration=None,
            step_index=index,
            attempt=event.attempt or 0,
            label=label,
            reason=data.get("reason"),
            details=data.get("details"),
            deadline=_number(data.get("deadline")),
            started_at=at,
            runs=row.runs + (0 if _parks_on_child(event, row) else 1),
            last_seq=event.seq,
        )
    return CallRow(
        event.workflow_id,
        key,
        CallKind.WAIT,
        index,
        CallState.WAITING,
        attempt=event.attempt or 0,
        label=label,
        reason=data.get("reason"),
        details=data.get("details"),
        deadline=_number(data.get("deadline")),
        started_at=at,
        runs=1,
        last_seq=event.seq,
        first_seq=event.seq,
    )


def _ended(event: Event | Logged, row: CallRow, at: float) -> CallRow:
    """The row of a call after its `CallCompleted` or `CallFailed`: built field by field, not
    by dataclasses.replace (3x the cost; this runs for every call)."""
    data = event.data
    completed = event.kind is _K.CALL_COMPLETED
    return CallRow(
        row.workflow_id,
        row.key,
        row.kind,
        row.step_index,
        CallState.COMPLETED if completed else CallState.FAILED,
        row.fingerprint,
        row.lane,
        event.attempt or 0,
        row.label,
        data.get("usage") if completed else row.usage,
        data.get("output") if completed else row.output,
        row.reason if completed else data.get("reason"),
        row.error if completed else error_info(data.get("error")),
        row.details,
        row.deadline,
        row.started_at,
        at,  # finished_at
        _number(data.get("duration")),
        row.runs,
        event.seq,  # last_seq
        row.first_seq,
    )


def project_call(event: Event | Logged, calls: Mapping[str, CallRow]) -> Mapping[str, CallRow]:
    """Apply one event to a workflow's call rows; pure (returns a new mapping).

    Args:
        event: An event for which `touches_calls` is true.
        calls: The workflow's call rows by key; the row of the event's key must be present
            if it exists (a verb loads it; a replay holds them all).

    Returns:
        The rows after the event; unchanged rows are the same objects.

    Raises:
        ValueError: The event does not fit the rows (a corrupt log): an outcome for a key
            that was never started, a call event on a wait key or the reverse, a wait key
            recorded again once answered or timed out.
    """
    data, kind, at = event.data, event.kind, event.timestamp
    key = str(data["key"])
    if kind is _K.CALL_STARTED:
        row = _started(event, calls.get(key), key, at)
    elif kind is _K.STEP_WAITING:
        row = _waiting(event, calls.get(key), key, at)
    elif kind is _K.CHILD_STARTED:
        known = calls.get(key)  # the same child's answered row: the child was retried
        if known is not None and (
            child_of(known) != data.get("child") or not _child_answered(known)
        ):
            raise ValueError(f"event #{event.seq} starts child key {key!r}, recorded before")
        row = replace(
            _waiting(event, known, key, at),
            details={"child": data.get("child"), "definition": data.get("definition")},
        )
    elif kind is _K.CALL_COMPLETED or kind is _K.CALL_FAILED:
        row = _ended(event, _existing(event, calls, key, CallKind.CALL), at)
    elif kind in (_K.STEP_RESUMED, _K.WAIT_TIMED_OUT, _K.CHILD_ENDED):
        wait = _existing(event, calls, key, CallKind.WAIT)
        answered = kind is not _K.WAIT_TIMED_OUT
        row = replace(
            wait,
            state=CallState.ANSWERED if answered else CallState.TIMED_OUT,
            output=data.get("input") if answered else None,
            finished_at=at,
            duration=None if wait.started_at is None else max(at - wait.started_at, 0.0),
            last_seq=event.seq,
        )
    else:
        raise ValueError(f"event #{event.seq} of kind {kind} does not concern a call")
    return {**calls, key: row}
