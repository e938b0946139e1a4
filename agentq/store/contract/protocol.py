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

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from agentq.outcomes import ErrorInfo
from agentq.store.contract.claims import ClaimResult, Execution
from agentq.store.contract.protocol_advance import DurableAdvance
from agentq.store.contract.protocol_calls import DurableCalls
from agentq.store.contract.protocol_fork import DurableForks
from agentq.store.contract.protocol_hooks import DurableHooks
from agentq.store.contract.protocol_messages import DurableMessages
from agentq.store.contract.protocol_reads import DurableReads
from agentq.store.contract.protocol_schedules import DurableSchedules
from agentq.store.contract.protocol_sweep import DurableSweeps
from agentq.store.contract.protocol_waits import DurableWaits
from agentq.store.contract.rows import WorkflowRow

__all__ = ["DurableStore"]


@runtime_checkable
class DurableStore(
    DurableAdvance,
    DurableCalls,
    DurableForks,
    DurableHooks,
    DurableMessages,
    DurableReads,
    DurableSchedules,
    DurableSweeps,
    DurableWaits,
    Protocol,
):
    """The durable state behind `WorkflowEngine`: an event log plus a ``steps`` projection.

    Every write verb is one atomic transaction that appends its events and updates the
    projection together; a refused verb appends nothing. `MemoryStore` is the reference
    implementation; `tests/store/` is the contract suite any implementation must pass.
    `MemoryStore` and `SqliteStore` also implement `agentq.queue.JobOutcomeStore` (the
    queue's three verbs for completed keys), a separate protocol that a store used only for
    workflows need not implement. The verbs of durable calls (`start_call`, `complete_call`,
    `fail_call`, `calls`) are declared in `DurableCalls` (``protocol_calls``) and the read
    verbs (`get_workflow`, `workflows`, `step_rows`, `load_events`, `event_rows`,
    `last_seq`, `ready_workflows`, `expired_leases`) in `DurableReads` (``protocol_reads``),
    `fork_workflow` in `DurableForks`, `send_message` and `messages` in `DurableMessages`,
    the end-hook outbox verbs in `DurableHooks`, the schedule verbs in `DurableSchedules`,
    `sweep` (retention) in `DurableSweeps`, the wait verbs (`wait_step`, `resume_step`,
    `time_out_wait`) in `DurableWaits`, `advance_step` (a completion and the next claim in
    one transaction) in `DurableAdvance` (each in its ``protocol_*`` module); this
    protocol inherits them and declares the write verbs.

    All methods are coroutines to be awaited on one event loop; a store object is not shared
    between loops or threads.
    """

    async def start_workflow(
        self,
        workflow_id: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        *,
        definition: str | None = None,
        trace: Mapping[str, str] | None = None,
        run_at: float | None = None,
        deadline: float | None = None,
    ) -> tuple[WorkflowRow, bool]:
        """Create the workflow with its steps Pending and append `WorkflowStarted`, once.

        Args:
            workflow_id: The new workflow's id (`agentq.keys` rules).
            step_names: Its step names, in order (non-empty, unique).
            input: Its input (JSON).
            now: Unix seconds.
            definition: The name of the `WorkflowDef` it is made from (`agentq.keys`
                rules), recorded in `WorkflowStarted` and `WorkflowRow.definition`; None for
                a plain workflow.
            trace: The W3C trace context of the run that starts it (``traceparent``, maybe
                ``tracestate``; `agentq.tracing.carrier`), kept in the event's data as
                ``trace`` so that later runs link back to it; None (or empty) records
                nothing. Not compared when the workflow exists.
            run_at: Unix seconds before which its first step is not claimed (kept as that
                step's ``retry_at``: `claim_step` answers `NotBefore` until then, and
                `ready_workflows` lists it from then on), or None. Recorded in the event's
                data only when given; not compared when the workflow exists.
            deadline: Unix seconds after which the workflow fails with ``WorkflowTimedOut``
                (`time_out_workflow`; `claim_step` after it does the same), kept in
                `WorkflowRow.deadline`, or None. Recorded and compared as `run_at`.

        Returns:
            ``(row, created)``: `created` is False when the workflow already existed with
            the same steps, input and definition (nothing is appended then).

        Raises:
            WorkflowMismatchError: The id exists with different step names, another input
                (compared as decoded JSON) or another definition (a plain workflow's None
                included); nothing is appended.
            PayloadError: `input` is not JSON or too large.
            InvalidKeyError / TypeError: A bad id, step name or definition name, or a
                `trace` that is not a dict of str to str.
            TypeError / ValueError: `run_at` or `deadline` is not a finite number.
        """
        ...

    async def claim_step(
        self,
        workflow_id: str,
        step_index: int,
        worker_id: str,
        lease_ttl: float,
        now: float,
        *,
        max_recoveries: int = 3,
    ) -> ClaimResult:
        """Claim a step for a worker, atomically (compare-and-swap).

        A Pending step, or a Leased one whose lease expired (``now > expires_at``; recorded as
        `WorkerRecovered` first), becomes Leased by `worker_id` until ``now + lease_ttl`` with
        the next fencing token, and `StepStarted` is appended. A completed step is never
        claimed again; a live lease is never taken over, not even at the tick it expires and
        not even by its own worker id (two runs in one worker get `HeldByOther`); a step
        whose next attempt is scheduled (``retry_at``, from `fail_step`) is not claimed before
        that time, by any worker. Results are checked in this order: completed, workflow
        closed, workflow deadline passed (then it fails as by `time_out_workflow` and the
        claim answers `WorkflowClosed`), waiting, earlier step not completed, live lease,
        retry time.

        Lost attempts: an attempt whose lease was taken back without an outcome (here, or by
        `release_expired` / `release_dead`) is re-admitted under the same attempt number (it
        does not count toward ``RetryPolicy.max_attempts``) and counted in the step's
        ``recoveries``. A claim that would re-admit more than `max_recoveries` of them
        appends `StepFailed` and `WorkflowFailed` instead, with a reason saying that the
        step's attempts were lost to crashes, and returns `WorkflowClosed`.

        Args:
            workflow_id: The workflow.
            step_index: 0-based position of the step.
            worker_id: The claiming worker; the lease holder.
            lease_ttl: Lease length in seconds (> 0, finite).
            now: Unix seconds.
            max_recoveries: Lost attempts of this step that may be re-admitted (an int >= 0;
                the step's ``StepDef.max_recoveries``).

        Returns:
            `Claimed` (with the attempt's `Execution`), `AlreadyCompleted(output)`,
            `HeldByOther(worker_id, expires_at)`, `AlreadyWaiting(reason)`,
            `WorkflowClosed(state, reason)` or `NotBefore(retry_at)` (nothing appended).

        Raises:
            UnknownWorkflowError: No such workflow.
            UnknownStepError: No such step.
            EngineError: An earlier step has not completed.
            TypeError / ValueError: A bad argument (e.g. ``max_recoveries=-1``).
        """
        ...

    async def renew_lease(self, execution: Execution, lease_ttl: float, now: float) -> Execution:
        """Extend a held lease to ``now + lease_ttl`` (no event is appended).

        A lease that expired but was not taken over (nor released) is still held, and can be
        renewed. A lease a cancel revoked that still fences its step (the attempt's body may
        still run) is renewed as a fence: the step stays fenced from other workers until
        ``now + lease_ttl``, and the execution returned says ``revoked=True`` (its worker
        learns of the cancel, interrupts the body, and keeps renewing until the body has
        stopped and it hands the lease back with `release_dead`).

        Returns:
            The execution with its new `expires_at` (and `revoked` set for a fence).

        Raises:
            LeaseLostError: The lease is no longer held by this worker and token (taken over,
                released, or revoked by cancellation and no longer a fence: released, or
                claimed again).
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

    async def time_out_workflow(self, workflow_id: str, now: float) -> bool:
        """Fail an open workflow whose deadline has passed (``deadline <= now``), once.

        Appends `WorkflowFailed` with the reason ``WorkflowTimedOut: ...`` and the data key
        ``deadline``; like a cancel, its leased and waiting steps fail (reason
        ``WorkflowTimedOut``), which revokes their leases.

        Returns:
            True if this call failed it; False if it has no deadline, the deadline is still
            ahead, or it is closed already (nothing appended).

        Raises:
            UnknownWorkflowError: No such workflow.
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

    async def release_expired(self, execution: Execution, now: float) -> bool:
        """Re-admit a step whose lease expired: `WorkerRecovered` ("lease expired"); the step
        becomes Pending and counts one more lost attempt (see `claim_step`).

        Returns:
            True if released; False if the lease is live, or was renewed or taken meanwhile.
        """
        ...

    async def release_dead(self, execution: Execution, now: float, reason: str) -> bool:
        """Re-admit a step whose worker is gone, live lease or not: `WorkerRecovered`.

        The caller vouches that the lease's worker no longer exists (e.g. its process on this
        host is gone, see ``agentq.workflows.workers``): were it alive, its late writes would
        be refused by fencing and its body would have run twice. Otherwise as
        `release_expired`.

        Args:
            execution: The lease to take back (from a step row: `execution_of`).
            now: Unix seconds.
            reason: Why the worker is known to be gone; recorded in the event. A worker
                handing back its own lease once its attempt's body stopped (a graceful
                shutdown) passes `agentq.store.HANDED_BACK_REASON`: the event then says
                ``crash: false`` and the step's ``recoveries`` is not counted up.

        Returns:
            True if released; False if the step is no longer under that lease.
        """
        ...

    async def retry_workflow(
        self, workflow_id: str, from_step: int | None, now: float
    ) -> WorkflowRow:
        """Run a failed or cancelled workflow again: `WorkflowRetried`; the workflow is running.

        The steps before `from_step` keep their outputs; from `from_step` on (default: the
        first step that did not complete — the failed or cancelled one) the steps are pending
        as if never run: attempt and recovery counters at 0, outputs, errors and resume input
        cleared. Their fencing tokens keep increasing, so a stale worker is still refused.
        Each ``child:`` wait row still waiting on a child that has ended is answered in the
        same transaction (`ChildEnded` with the child's outcome, after `WorkflowRetried`).
        Atomic: two concurrent retries append one `WorkflowRetried`; the other is refused.

        Raises:
            UnknownWorkflowError / UnknownStepError: No such workflow, or no such step.
            NotRetryableError: The workflow is running, waiting or completed (the message
                names its state), or a step before `from_step` has not completed; nothing
                is appended.
        """
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
