"""The durable-call verbs of `DurableStore`: `DurableCalls`.

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short. A durable call (``ctx.call``) is recorded under its key,
scoped to the workflow: `start_call` before its body runs, then `complete_call` or
`fail_call`, each fenced by the attempt's lease like `DurableStore.complete_step`; `calls`
reads the ``calls`` projection (calls and keyed waits). Keyed waits use `DurableStore.wait_step`,
`DurableStore.resume_step` and `DurableStore.time_out_wait`. A child run (``ctx.child``) is
started by `start_child` and waited on as a keyed wait that its end answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentq.outcomes import ErrorInfo
from agentq.store.contract.children import ChildStart
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import CallRow

__all__ = ["DurableCalls"]


class DurableCalls(Protocol):
    """Durable calls: start, complete, fail, and the read side `calls` (see `DurableStore`
    for what every verb shares: one transaction each, `StoreError`, `PayloadError`); child
    runs: `start_child`."""

    async def start_child(
        self,
        execution: Execution,
        key: str,
        *,
        definition: str,
        step_names: Sequence[str],
        input: Any,
        now: float,
        trace: Mapping[str, str] | None = None,
    ) -> ChildStart:
        """Start (once) the child run `key` of the attempt's step, an instance of `definition`.

        In one transaction: the child ``<parent id>/<key>`` is stored (`WorkflowStarted`
        recording ``parent``: the parent's workflow id, step and wait key), and the parent's
        log records `ChildStarted` (its wait row ``child:<key>``, state waiting, details
        {child, definition}). Called again for the same key (a replay), it appends nothing
        and returns what is stored, with the child's outcome once it has ended (if the
        child has ended and its wait row is still waiting, it appends `ChildEnded`, which
        answers the row).

        From then on the store keeps the link: when the child ends (completed, failed,
        cancelled), the transaction that ends it also answers the parent's wait if the
        parent is open: `StepResumed` with the outcome if the parent's step waits on
        ``child:<key>`` (`wait_step` with that key and the wait row's reason), else
        `ChildEnded` (the wait row answered, the step untouched: a call of it awaits the
        child); a `wait_step` on it after the child ended is answered at once, in its own
        transaction (re-opening a row `ChildEnded` answered). Cancelling a workflow
        cancels its open child runs in the same transaction (and theirs, down the tree).

        Args:
            execution: The parent's attempt, as claimed (fencing, as `complete_step`).
            key: The child's key within the parent (`agentq.keys` rules, no ``/``).
            definition: The name of the child's `WorkflowDef`.
            step_names: The definition's step names.
            input: The child's input (JSON).
            now: Unix seconds.
            trace: As `start_workflow`'s.

        Returns:
            A `ChildStart`: the child's row, whether this call stored it, the parent's wait
            row, and the child's outcome (``{"child", "state": "completed", "output"}`` or
            ``{"child", "state": "failed" | "cancelled", "reason"}``) or None while it runs.

        Raises:
            LeaseLostError / WorkflowClosedError: As `start_call` (nothing written).
            KeyConflictError: The parent's key ``child:<key>`` names another wait.
            WorkflowMismatchError: The child's id is stored with another definition, other
                steps or another input, or is no child of this parent.
            InvalidKeyError / TypeError / ValueError: A bad key (one holding ``/``),
                definition, step names or trace.
            PayloadError: `input` is not JSON or too large.
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
