"""The verb that ends one step and starts the next: `DurableAdvance` (``advance_step``).

`DurableStore` (``agentq.store.contract.protocol``) inherits this protocol; it lives apart
only to keep each module short.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentq.store.contract.claims import ClaimResult, Execution
from agentq.store.contract.rows import WorkflowRow

__all__ = ["DurableAdvance"]


class DurableAdvance(Protocol):
    """`advance_step` (see `DurableStore` for what every verb shares: atomicity,
    `StoreError`, `PayloadError`, leases and fencing)."""

    async def advance_step(
        self,
        execution: Execution,
        output: Any,
        now: float,
        *,
        lease_ttl: float,
        max_recoveries: int = 3,
    ) -> tuple[WorkflowRow, ClaimResult | None]:
        """`complete_step` then `claim_step` of the next step, in one transaction.

        Records the output under fencing exactly as `complete_step` does (`StepCompleted`,
        plus `WorkflowCompleted` after the last step), then, unless the step was the last,
        claims step ``execution.step_index + 1`` for ``execution.worker_id`` exactly as
        `claim_step` does (a new lease until ``now + lease_ttl`` with that step's next
        fencing token and `StepStarted`, or whatever else the claim answers: the workflow's
        deadline passed, say). The events and rows are those the two verbs would leave, one
        after the other; nothing of either is kept if the transaction does not commit, so a
        crash leaves either the step still leased (as before `complete_step`) or the next
        step leased (as after both). A caller that stops listening before the answer (a
        cancel) must hand back a lease it may have got (`release_dead` of the claim's
        execution, as for `claim_step`).

        Args:
            execution: The completing attempt, as claimed.
            output: The step's output (JSON).
            now: Unix seconds, of both halves.
            lease_ttl: The next step's lease length in seconds (> 0, finite).
            max_recoveries: The next step's ``StepDef.max_recoveries`` (an int >= 0).

        Returns:
            ``(row, claim)``: the workflow row as the completion left it, and the next
            step's `ClaimResult` (None after the last step).

        Raises:
            LeaseLostError / WorkflowClosedError / PayloadError: As `complete_step`;
                nothing is recorded or claimed.
            TypeError / ValueError: A bad argument, checked before anything is written.
        """
        ...
