"""`DurableAdvance`: the verb that completes a step and claims the next one in one transaction.

Declared apart from `agentq.store.protocol.DurableStore` (which inherits it) to keep that
module readable; every store implements it through `agentq.store.verbs.RuleStore`.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentq.store.claims import ClaimResult, Execution
from agentq.store.rows import WorkflowRow

__all__ = ["DurableAdvance"]


class DurableAdvance(Protocol):
    """The step-to-step verb of a `DurableStore`."""

    async def advance(
        self,
        execution: Execution,
        output: Any,
        now: float,
        *,
        worker_id: str,
        lease_ttl: float,
        max_recoveries: int = 3,
    ) -> tuple[WorkflowRow, ClaimResult | None]:
        """`complete_step` of `execution`, then `claim_step` of the next step, in ONE
        transaction: exactly their events, in the same order, or nothing at all.

        The engine's hot path: a step that returns is recorded and the next step is claimed
        for the same worker without a second transaction (nor a second trip to the store's
        thread). Every guarantee of the two verbs holds: the completion is fenced, the claim
        is a compare-and-swap that may answer anything `claim_step` answers (a claim that
        would fail the workflow past `max_recoveries` appends those events too).

        Args:
            execution: The attempt, as its claim returned it.
            output: The step's output (JSON).
            now: Unix seconds, for both the completion and the claim.
            worker_id: The worker that claims the next step (usually `execution`'s).
            lease_ttl: The next lease's length in seconds (> 0, finite).
            max_recoveries: The next step's ``StepDef.max_recoveries`` (an int >= 0).

        Returns:
            The workflow's row after the completion, and `claim_step`'s result for the next
            step, or None after the last step (the workflow completed).

        Raises:
            LeaseLostError / WorkflowClosedError / PayloadError: As `complete_step`; nothing
                is recorded.
            TypeError / ValueError: A bad argument of the claim (e.g. ``lease_ttl=0``),
                checked before anything is written; nothing is recorded.
        """
        ...
