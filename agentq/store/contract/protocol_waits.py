"""The wait verbs of `DurableStore`: `DurableWaits`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. A step waits for input (`wait_step`: a step-level wait, a
keyed durable wait, or a receive of messages), is answered (`resume_step`), or its keyed
wait times out (`time_out_wait`).
"""

from __future__ import annotations

from typing import Any, Protocol

from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import WorkflowRow

__all__ = ["DurableWaits"]


class DurableWaits(Protocol):
    """Waits: `wait_step`, `resume_step`, `time_out_wait` (see `DurableStore` for what every
    verb shares: atomicity, `StoreError`, `PayloadError`, leases and fencing)."""

    async def wait_step(
        self,
        execution: Execution,
        reason: str,
        now: float,
        *,
        key: str | None = None,
        details: dict[str, Any] | None = None,
        deadline: float | None = None,
        topic: str | None = None,
    ) -> WorkflowRow:
        """Record `StepWaiting`: the step waits for `resume_step`; the lease is released.

        Without a key this is the step-level wait (``raise WaitForInput``). With a key (a
        durable wait, ``ctx.wait_for_input``) the event also carries the key, details and
        deadline, the step row exposes them (`StepRow.wait_key`, ``wait_details``,
        ``wait_deadline``) and a new `CallRow` (kind wait) is ``waiting`` with the reason as
        its question. A wait key is recorded once: the engine answers a key it finds in
        `calls` from there (answered: its input; timed out: `InputTimeout`). A wait that
        a cancellation left unanswered is asked again after `retry_workflow` under the same
        key and question: its row is re-opened (``runs`` + 1).

        Args:
            execution: The attempt, as claimed.
            reason: The question (descriptive text: never refused).
            now: Unix seconds.
            key: The wait key, scoped to the workflow (`agentq.keys` rules), or None.
            details: A JSON object shown with the wait (a tool's name and arguments), or None.
            deadline: Unix seconds after which `time_out_wait` ends the wait, or None.
            topic: For a receive (``ctx.receive``, a keyed wait): the topic it takes
                messages on. A keyed wait that finds a kept message (the oldest not
                consumed on `topic`, or without a topic the input an early `resume_step`
                kept for its key) is answered in the same transaction: `StepResumed` with
                the message follows `StepWaiting`, and the returned workflow is running.

        Raises:
            LeaseLostError: Fencing refused the write.
            WorkflowClosedError: The workflow was cancelled meanwhile; nothing is recorded.
            KeyConflictError: `key` is a call's key, or a wait key answered or timed out
                before, or left unanswered with another question (a wait key asks one
                question once).
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
        this answers whatever the step waits on. When the step waits on a keyed wait, the
        event records its key and the wait's `CallRow` becomes ``answered`` with `input` as
        its output. With a `key` the step does not wait on (yet), the input is kept for the
        wait of that key instead (``MessageSent`` with no topic; the step is unchanged):
        the ``wait_step`` of that key, in any step of the workflow, takes it at once (see
        `DurableMessages`).

        Raises:
            UnknownWorkflowError / UnknownStepError: No such workflow or step.
            WorkflowClosedError: The workflow is cancelled or failed.
            NotWaitingError: Without a key, the step is not Waiting (message names the actual
                state), e.g. it was resumed already, or it completed. With a key: the step
                completed, the wait `key` was answered or timed out, or an input is kept for
                it already.
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
