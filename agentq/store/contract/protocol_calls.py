"""The durable-call verbs of `DurableStore`: `DurableCalls`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. A durable call (``ctx.call``) is recorded under its key,
scoped to the workflow: `start_call` before its body runs, then `complete_call` or
`fail_call`, each fenced by the attempt's lease like `DurableStore.complete_step`; `calls`
reads the ``calls`` projection (calls and keyed waits). Keyed waits use `DurableStore.wait_step`,
`DurableStore.resume_step` and `DurableStore.time_out_wait`.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentq.outcomes import ErrorInfo
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import CallRow

__all__ = ["DurableCalls"]


class DurableCalls(Protocol):
    """Durable calls: start, complete, fail, and the read side `calls` (see `DurableStore`
    for what every verb shares: one transaction each, `StoreError`, `PayloadError`)."""

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
