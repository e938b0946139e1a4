"""The `DurableStore` protocol: the only way the engine reaches durable state.

A store keeps the append-only event log and its projection (``workflows``, ``steps`` and
``calls`` rows), and changes both in one atomic transaction per verb. Stores are passive: they
are given the time (``now``, Unix seconds), never sleep and never start background tasks. Every
verb raises `StoreError` (with the backend's exception as ``__cause__``) when the backend
fails, and `PayloadError` before writing anything when a value is not JSON or too large (see
`agentq.codec`).

Leases: a claimed step is held by a worker until ``expires_at``; it is *live* while
``now <= expires_at`` and *expired* once ``now > expires_at``. Each claim gets a new
``lease_token`` (a fencing token, increasing per step); writes for an attempt name the worker
and token, and are refused with `LeaseLostError` once another claim has taken the step over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from agentq.events import Event
from agentq.outcomes import ErrorInfo
from agentq.store.claims import ClaimResult, Execution
from agentq.store.rows import CallRow, StepRow, WorkflowRow, WorkflowState

__all__ = ["DurableStore"]


@runtime_checkable
class DurableStore(Protocol):
    """The durable state behind `WorkflowEngine`: an event log plus a ``steps`` projection.

    Every write verb is one atomic transaction that appends its events and updates the
    projection together; a refused verb appends nothing. `MemoryStore` is the reference
    implementation; `tests/store/` is the contract suite any implementation must pass.

    All methods are coroutines to be awaited on one event loop; a store object is not shared
    between loops or threads.
    """

    async def start_workflow(
        self, workflow_id: str, step_names: Sequence[str], input: Any, now: float
    ) -> tuple[WorkflowRow, bool]:
        """Create the workflow with its steps Pending and append `WorkflowStarted`, once.

        Returns:
            ``(row, created)``: `created` is False when the workflow already existed (nothing
            is appended then).

        Raises:
            WorkflowMismatchError: The id exists with different step names or another input
                (compared as decoded JSON).
            PayloadError: `input` is not JSON or too large.
        """
        ...

    async def claim_step(
        self, workflow_id: str, step_index: int, worker_id: str, lease_ttl: float, now: float
    ) -> ClaimResult:
        """Claim a step for a worker, atomically (compare-and-swap).

        A Pending step, or a Leased one whose lease expired (``now > expires_at``; recorded as
        `WorkerRecovered` first), becomes Leased by `worker_id` until ``now + lease_ttl`` with
        the next fencing token and attempt number, and `StepStarted` is appended. A completed
        step is never claimed again; a live lease is never taken over, not even at the tick it
        expires and not even by its own worker id (two runs in one worker get `HeldByOther`).
        Results are checked in this order: completed, workflow closed, waiting, earlier step
        not completed, live lease.

        Returns:
            `Claimed`, `AlreadyCompleted(output)`, `HeldByOther`, `AlreadyWaiting` or
            `WorkflowClosed`.

        Raises:
            UnknownWorkflowError: No such workflow.
            UnknownStepError: No such step.
            EngineError: An earlier step has not completed.
        """
        ...

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        """Extend a held lease to ``now + lease_ttl`` (no event is appended).

        A lease that expired but was not taken over (nor released) is still held, and can be
        renewed.

        Returns:
            The execution with its new `expires_at`.

        Raises:
            LeaseLostError: The lease is no longer held by this worker and token (taken over,
                released, or revoked by cancellation).
        """
        ...

    async def complete_step(self, execution: Execution, output: Any, now: float) -> WorkflowRow:
        """Record the output: `StepCompleted`, plus `WorkflowCompleted` after the last step.

        Raises:
            LeaseLostError: Fencing: another claim took the step over, or the lease was
                released (the late result is refused; nothing is recorded).
            WorkflowClosedError: The lease is still this one's but the workflow was cancelled
                (or is otherwise closed) meanwhile; nothing is recorded.
            PayloadError: `output` is not JSON or too large; nothing is recorded.
        """
        ...

    async def fail_step(
        self,
        execution: Execution,
        reason: str,
        error: ErrorInfo | None,
        now: float,
        retry_at: float | None,
    ) -> WorkflowRow:
        """Record a failed attempt: `StepFailed`, then `RetryScheduled` or `WorkflowFailed`.

        Args:
            execution: The attempt, as claimed.
            reason: error, timeout, cancelled, payload, or the `NonRetryable` reason.
            error: The exception's description, if any.
            now: Unix seconds.
            retry_at: Unix seconds of the next attempt (the step becomes Pending), or None to
                fail the step and the workflow for good.

        Raises:
            LeaseLostError: Fencing refused the write.
            WorkflowClosedError: The workflow was cancelled meanwhile; nothing is recorded.
        """
        ...

    async def wait_step(
        self,
        execution: Execution,
        reason: str,
        now: float,
        *,
        key: str | None = None,
        details: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> WorkflowRow:
        """Record `StepWaiting`: the step waits for `resume_step`; the lease is released.

        Without a key this is the step-level wait (``raise WaitForInput``). With a key (a
        durable wait, ``ctx.wait_for_input``) the event also carries the key, details and
        deadline, the step row exposes them (`StepRow.wait_key`, ``wait_details``,
        ``wait_deadline``) and a new `CallRow` (kind wait) is ``waiting`` with the reason as
        its question. A wait key is recorded once: the engine answers a key it finds in
        `calls` from there (answered: its input; timed out: `InputTimeout`).

        Args:
            execution: The attempt, as claimed.
            reason: The question (descriptive text: never refused).
            now: Unix seconds.
            key: The wait key, scoped to the workflow (`agentq.keys` rules), or None.
            details: A JSON object shown with the wait (a tool's name and arguments), or None.
            deadline: Unix seconds after which `time_out_wait` ends the wait, or None.

        Raises:
            LeaseLostError: Fencing refused the write.
            WorkflowClosedError: The workflow was cancelled meanwhile; nothing is recorded.
            KeyConflictError: `key` is a call's key, or a wait key recorded before (a wait
                key asks one question once).
            InvalidKeyError / TypeError / ValueError: A bad key, details that are not a dict,
                a deadline that is not finite, or details/deadline without a key.
            PayloadError: `details` holds something that is not JSON, or is too large.
        """
        ...

    async def resume_step(
        self,
        workflow_id: str,
        step_index: int,
        input: Any,
        now: float,
        *,
        key: str | None = None,
    ) -> WorkflowRow:
        """Deliver input to a Waiting step: `StepResumed`; the step becomes Pending.

        Exactly one of several concurrent resumes of one wait succeeds. With ``key=None``
        this answers whatever the step waits on; with a key, that key must be the step's
        current wait. When the step waits on a keyed wait, the event records its key and the
        wait's `CallRow` becomes ``answered`` with `input` as its output.

        Raises:
            UnknownWorkflowError / UnknownStepError: No such workflow or step.
            WorkflowClosedError: The workflow is cancelled or failed.
            NotWaitingError: The step is not Waiting (message names the actual state), e.g.
                it was resumed already, or it completed; or `key` is not the key the step
                waits on (the message names both).
            PayloadError: `input` is not JSON or too large.
            InvalidKeyError: A bad `key`.
        """
        ...

    async def time_out_wait(self, workflow_id: str, step_index: int, now: float) -> bool:
        """End a keyed wait whose deadline has passed: `WaitTimedOut`; the step continues.

        If the step waits on a keyed wait whose deadline is ``<= now``, appends
        `WaitTimedOut` {key}: the wait's `CallRow` becomes ``timed_out``, the step becomes
        Pending with attempt 0 (claimable, as after a resume; its next attempt's wait raises
        `InputTimeout`) and the workflow running. Of a resume and a time-out racing, exactly
        one wins.

        Returns:
            True if the wait was timed out; False (nothing written) if the step is not
            waiting, waits without a key or a deadline, its deadline is still ahead, or the
            workflow is closed.

        Raises:
            UnknownWorkflowError / UnknownStepError: No such workflow or step.
        """
        ...

    async def start_call(
        self,
        execution: Execution,
        key: str,
        *,
        fingerprint: str | None,
        lane: str | None,
        label: dict[str, Any] | None,
        now: float,
    ) -> CallRow:
        """Record that a durable call starts: `CallStarted`, committed before its body runs.

        The call's row (kind call) becomes ``started``, ``runs`` + 1. The event's ``rerun``
        is true when the stored row was still ``started`` (an earlier start of the key never
        finished: a crash, a lost lease). A failed call may start again (``rerun`` false).

        Args:
            execution: The attempt making the call, as claimed (fencing, as `complete_step`).
            key: The call's key, scoped to the workflow (`agentq.keys` rules).
            fingerprint: What identifies the call, compared exactly with the stored one;
                None is never compared (and keeps the stored one).
            lane: The queue lane it runs in, or None.
            label: A JSON object stored with every event of the call, or None.
            now: Unix seconds.

        Returns:
            The call's row after the start.

        Raises:
            LeaseLostError: The attempt's lease was taken over or released (nothing written).
            WorkflowClosedError: The workflow is closed (nothing written).
            KeyConflictError: The key is stored with another fingerprint, or is a wait's key.
            EngineError: The key completed already: answer it from `calls` instead.
            InvalidKeyError / TypeError / ValueError: A bad key, lane, fingerprint or label.
            PayloadError: `label` holds something that is not JSON.
        """
        ...

    async def complete_call(
        self,
        execution: Execution,
        key: str,
        *,
        output: Any,
        usage: dict[str, Any] | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """Record a started call's output: `CallCompleted`; the row becomes ``completed``.

        The event repeats the call's label and lane from its start. Fenced as
        `complete_step`, with one difference: a call that was running when its workflow was
        cancelled is still recorded (the attempt's token was not taken over; the call did
        happen, and a retried workflow must not make it again).

        Args:
            execution: The attempt that started the call.
            key: The call's key.
            output: The call's output (JSON; tuples read back as lists).
            usage: Figures the caller reports (tokens, cost): a JSON object, or None.
            duration: Seconds the call ran (finite, >= 0).
            now: Unix seconds.

        Returns:
            The call's row after the outcome (what `calls` now returns for the key).

        Raises:
            LeaseLostError: The attempt's lease was taken over or released (nothing written).
            WorkflowClosedError: The workflow closed otherwise than by a cancellation during
                this attempt (nothing written).
            PayloadError: `output` or `usage` is not JSON or too large, naming the field and
                type (nothing written: the caller may `fail_call` instead).
            EngineError: The key was never started, is not ``started`` now (each run ends
                once), or was started by another step.
            KeyConflictError: The key is a wait's key.
            TypeError / ValueError: A bad duration or usage.
        """
        ...

    async def fail_call(
        self,
        execution: Execution,
        key: str,
        *,
        reason: str,
        error: ErrorInfo | None,
        duration: float,
        now: float,
    ) -> CallRow:
        """Record a started call's failure: `CallFailed`; the row becomes ``failed``.

        A failed key may be started again by a later run. Arguments, return value, fencing
        and errors as for `complete_call`, with `reason` (descriptive text, never refused:
        ``error``, ``timeout``, ``cancelled``, ``payload: …``) and `error` (the exception's
        `ErrorInfo`, or None; else `TypeError`) instead of output and usage.
        """
        ...

    async def cancel_workflow(self, workflow_id: str, reason: str, now: float) -> bool:
        """Cancel a running or waiting workflow: `WorkflowCancelled`, once.

        Leases are revoked (a late result is refused) and waiting steps stop waiting: both
        become failed with reason ``"cancelled"``. A cancelled workflow never completes.

        Returns:
            True if this call cancelled it; False if it was already closed (nothing appended).

        Raises:
            UnknownWorkflowError: No such workflow.
        """
        ...

    async def expired_leases(self, now: float) -> list[Execution]:
        """Return the leases that expired before `now` (``now > expires_at``).

        Ordered by ``expires_at``, then workflow id, then step index.
        """
        ...

    async def release_expired(self, execution: Execution, now: float) -> bool:
        """Re-admit a step whose lease expired: `WorkerRecovered`; the step becomes Pending.

        Returns:
            True if released; False if the lease is live, or was renewed or taken meanwhile.
        """
        ...

    async def get_workflow(self, workflow_id: str) -> WorkflowRow | None:
        """Return one workflow's row, or None."""
        ...

    async def workflows(self, state: WorkflowState | None = None) -> list[WorkflowRow]:
        """Return workflows (optionally only those in `state`), in the order they started."""
        ...

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        """Return projection rows of one workflow (or all), by workflow start order then step
        index."""
        ...

    async def calls(
        self, workflow_id: str | None = None, step_index: int | None = None
    ) -> list[CallRow]:
        """Return the durable calls and waits of one workflow (or all), one query.

        Args:
            workflow_id: The workflow, or None for every workflow.
            step_index: Only the rows whose latest start or wait was made by this step.

        Returns:
            The rows, in the order their keys were first recorded (`CallRow.first_seq`).
        """
        ...

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Return events with ``seq > after_seq`` (of one workflow, or all), by seq."""
        ...

    async def event_rows(
        self, workflow_id: str | None = None, *, after_seq: int = 0
    ) -> list[tuple[Any, ...]]:
        """Return events as plain tuples in `EVENT_COLUMNS` order (for DataFrames), by seq.

        ``reason`` is set for StepFailed, StepWaiting, WorkflowFailed, WorkflowCancelled and
        CallFailed; ``output`` (JSON text) for StepCompleted and CallCompleted; ``input``
        (JSON text) for WorkflowStarted and StepResumed; else None.
        """
        ...

    async def last_seq(self) -> int:
        """Return the highest sequence number in the log (0 when empty); cheap."""
        ...

    async def rebuild_projection(self) -> None:
        """Recompute every workflow, step and call row by replaying the event log.

        Lease expiry times extended by `renew_lease` are not in the log; a rebuilt lease
        expires as of its `StepStarted` event.
        """
        ...

    async def close(self) -> None:
        """Release the backend's resources; further calls raise `StoreError`."""
        ...
