"""The event log: every workflow transition as an immutable `Event`.

Events are appended by the store (which gives each its sequence number) and never updated or
deleted. The `steps` projection is a function of the log; `rebuild_projection` recomputes it.

Kind-specific values live in `Event.data` (a JSON object):

=====================  ===========================================================
kind                   data keys
=====================  ===========================================================
WorkflowStarted        steps (list of step names), input, definition (the name of the
                       `WorkflowDef` it was made from, or null for a plain Workflow;
                       absent in logs written before definitions existed); trace (the
                       W3C trace context of the run that started it, when tracing was
                       on; see `agentq.tracing`); run_at (Unix seconds: its first step
                       is not claimed before) and deadline (Unix seconds: it fails with
                       WorkflowTimedOut if not ended by then), each only when set; parent
                       {workflow_id, step, key} for a child run (``ctx.child``; absent
                       otherwise)
StepStarted            lease_token, expires_at (Unix seconds)
StepCompleted          output
StepFailed             reason (error / timeout / cancelled / payload), error {type,
                       message, traceback}
RetryScheduled         retry_at (Unix seconds), delay (seconds)
StepWaiting            reason; for a keyed wait (``ctx.wait_for_input``) also key,
                       details (JSON object or null), deadline (Unix seconds or null);
                       topic, for a ``ctx.receive`` (its wait takes messages on it)
StepResumed            input; key (the wait key it answered) when the wait had one;
                       message (the seq of the `MessageSent` it delivers, consumed by it)
WorkflowCompleted      outputs (list, one per step)
WorkflowFailed         reason (the event names the step that failed); deadline (Unix
                       seconds) when it failed for reaching its deadline (reason
                       ``WorkflowTimedOut: ...``; no step named, its leased or waiting
                       step fails too)
WorkflowCancelled      reason; fenced_until (Unix seconds, only when a step was leased):
                       the expiry of the lease the cancel revoked, which keeps fencing
                       that step from other workers until it is released
WorkerRecovered        previous_worker, lease_token, expired_at (Unix seconds: when
                       the lease ran out, or would have), reason (why it was taken
                       back: "lease expired", the worker's process is gone, or its
                       worker handed it back after a shutdown), crash (only on the
                       latter: false, not counted toward max_recoveries; absent means
                       a crash)
LeaseReleased          lease_token, reason: the fence of a lease a cancel revoked is
                       lifted, since its attempt's body has stopped (its worker handed it
                       back) or its worker is gone; the event names the step and worker
WorkflowRetried        from_step (0-based index; the event names the step too),
                       previous_state (failed / cancelled), previous_reason
CallStarted            key, lane (or null), attempt, label (JSON object or null),
                       fingerprint (or null), rerun (true: an earlier start of this key
                       never finished)
CallCompleted          key, output, duration (seconds), usage (JSON object or null),
                       label, lane, attempt
CallFailed             key, reason, error {type, message, traceback} or null, duration
                       (seconds), label, lane, attempt
WaitTimedOut           key (the wait whose deadline passed)
WorkflowForked         parent (the workflow it was forked from), at {step (0-based
                       index), step_name, key (the call key, or null: the step)},
                       replaced (the keys whose output the fork replaced); right
                       after the fork's `WorkflowStarted`
ChildStarted           key (the parent's wait key ``child:<key>``), child (the child
                       workflow's id), definition, reason (what the wait row shows);
                       in the parent's log, made by the attempt that started the child
ChildEnded             key (the parent's wait key ``child:<key>``), input (the child's
                       outcome, which names it, as a `StepResumed` of that wait carries
                       it); in the parent's log, written by the transaction that ends the
                       child while the parent's step does not wait on it (a durable call
                       awaits it): the wait row is answered, the step is not touched
MessageSent            topic (null: an input kept for the keyed wait ``key``, sent by an
                       early ``resume``), key (the sender's key, or null), payload; a
                       workflow-level event, kept until a `StepResumed` delivers it
=====================  ===========================================================

A fork's copies of its parent's history (`StepCompleted`, call and wait events written by
``fork_workflow``) carry ``forked_from`` (the parent's id) in their data and no attempt or
worker; a copied output that the fork replaced also carries ``replaced: true``.

A resumed step's input is in its `StepResumed` event (and in the step's projection row), not
repeated in every later `StepStarted`. `WorkerRecovered` marks an attempt lost to a crash (its
``attempt`` is the lost attempt's number, which the re-admitted attempt runs under again); it
is recorded by the worker that took the lease over (its ``worker_id``), or with no worker by
`release_expired` and `release_dead`. Events written before agentq recorded a ``reason`` on
`WorkerRecovered` have none.

A cancel revokes the lease of the step that was running, but the attempt's body may still run
until its worker notices (its next renewal): the revoked lease fences the step, failed and
then pending again after a retry, from every other worker until `LeaseReleased` (recorded
by `release_dead` once the body stopped) or until ``fenced_until`` has passed (the claim
that then starts the step records `LeaseReleased` first, as does a claim by the fence's own
worker: every lease ends in the log). Logs written
before fences existed have no ``fenced_until``: their cancelled steps are not fenced.

Durable calls and waits (``ctx.call``, ``ctx.wait_for_input``) are step events too: each
names its workflow and step. Call events carry the step attempt that made the call and its
worker (``attempt`` in ``data`` is the same number as `Event.attempt`); a call's ``label``
and ``lane`` are repeated on each of its events so that any one of them can be read alone.
`StepResumed`, `WaitTimedOut` and `ChildEnded` are not made by an attempt: their attempt and
worker are None. A `StepWaiting` or `StepResumed` without a ``key`` member (written by the
step-level ``raise WaitForInput``, or before durable waits existed) is about the step-level
wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

__all__ = ["Event", "EventKind"]


class EventKind(StrEnum):
    """The kinds of event in the log (values are stored as text)."""

    WORKFLOW_STARTED = "WorkflowStarted"
    STEP_STARTED = "StepStarted"
    STEP_COMPLETED = "StepCompleted"
    STEP_FAILED = "StepFailed"
    RETRY_SCHEDULED = "RetryScheduled"
    STEP_WAITING = "StepWaiting"
    STEP_RESUMED = "StepResumed"
    WORKFLOW_COMPLETED = "WorkflowCompleted"
    WORKFLOW_FAILED = "WorkflowFailed"
    WORKFLOW_CANCELLED = "WorkflowCancelled"
    WORKER_RECOVERED = "WorkerRecovered"
    LEASE_RELEASED = "LeaseReleased"
    WORKFLOW_RETRIED = "WorkflowRetried"
    CALL_STARTED = "CallStarted"
    CALL_COMPLETED = "CallCompleted"
    CALL_FAILED = "CallFailed"
    WAIT_TIMED_OUT = "WaitTimedOut"
    WORKFLOW_FORKED = "WorkflowForked"
    CHILD_STARTED = "ChildStarted"
    MESSAGE_SENT = "MessageSent"
    CHILD_ENDED = "ChildEnded"


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the append-only event log.

    Attributes:
        seq: Sequence number given by the store: strictly increasing across the whole log.
        at: When it was recorded (timezone-aware, UTC).
        kind: What happened.
        workflow_id: The workflow it belongs to.
        step_index: 0-based step position, or None for workflow-level events.
        step_name: The step's name, or None for workflow-level events.
        attempt: The attempt number (1-based) for step attempt events, else None.
        worker_id: The worker that caused it, when one did.
        data: Kind-specific JSON values (see the module docstring).
    """

    seq: int
    at: datetime
    kind: EventKind
    workflow_id: str
    step_index: int | None = None
    step_name: str | None = None
    attempt: int | None = None
    worker_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str | None:
        """The reason of failure (steps, calls), waiting, cancellation and recovery events."""
        value = self.data.get("reason")
        return None if value is None else str(value)

    @property
    def output(self) -> Any:
        """The output of a `StepCompleted` or `CallCompleted` event (None otherwise)."""
        return self.data.get("output")

    @property
    def input(self) -> Any:
        """The input of a `StepResumed` or `WorkflowStarted` event (None otherwise)."""
        return self.data.get("input")

    @property
    def timestamp(self) -> float:
        """`at` as Unix seconds."""
        return self.at.timestamp()


def utc(seconds: float) -> datetime:
    """Convert Unix seconds to an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)
