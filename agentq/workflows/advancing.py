"""A step that completes and its next step's claim, in one store transaction.

A run whose attempt completes a step goes on to claim the next step: two store verbs
(``complete_step``, ``claim_step``) and two transactions. When the run would claim the next
step at once anyway (`Follow.allowed`: the engine is not stopping, its queue is open, no
other run waits for a claim slot), the attempt's recorder records the completion with
``advance_step`` instead: the completion and the next step's claim in one transaction, the
same events and rows as the two verbs. The claim it gets is offered to the run
(`Follow.offer`, the driver's ``offer``: the run uses it for the next step, or hands its
lease back when it ends without it); any other answer of the claim (a deadline passed) is
left for the run's own claim to find again.

A run that continues a stored workflow reads the outputs of its completed steps once
(`completed_outputs`) rather than claiming each of them again.

`advance` is cancel-safe like the driver's claim: a caller cancelled while the transaction
is in flight waits for its answer (the transaction may commit all the same) and hands back
the lease it got. `Follow` also carries back whether an attempt that ended waiting waits on
a child run (`child_wait`), so that the run reads the step's row only for such a wait.

Private to `agentq.workflows.driver` and ``recording``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentq.clock import Clock
from agentq.store import Claimed, ClaimResult, DurableStore, Execution, StepState, WorkflowRow
from agentq.workflows.attempts import cancel_safe_claim
from agentq.workflows.model import StepDef

__all__ = ["Follow", "advance", "completed_outputs"]


class Follow:
    """What a run tells the attempt of one step about the step after it, and what the
    attempt tells back.

    Args:
        after: The workflow's steps after this one (only the first is looked at).
        allowed: Whether the run may take the next step's claim with the completion now
            (asked when the completion is recorded).
        offer: Hands the next step's claim to the run (the driver's ``offer``).

    Attributes:
        max_recoveries: The next step's ``StepDef.max_recoveries``; None if the step is the
            workflow's last (nothing to claim).
        child_wait: Set by the recorder when the attempt ends waiting: whether the wait is
            on a child run (True until known: the run then reads the step's row).
    """

    __slots__ = ("allowed", "child_wait", "max_recoveries", "offer")

    def __init__(
        self,
        after: Sequence[StepDef],
        allowed: Callable[[], bool],
        offer: Callable[[Claimed], None],
    ) -> None:
        self.max_recoveries = after[0].max_recoveries if after else None
        self.allowed = allowed
        self.offer = offer
        self.child_wait = True


async def advance(
    store: DurableStore,
    clock: Clock,
    execution: Execution,
    output: Any,
    now: float,
    lease_ttl: float,
    max_recoveries: int,
) -> tuple[WorkflowRow, ClaimResult | None]:
    """`store.advance_step`, cancel-safe: if the caller is cancelled meanwhile, the next
    step's lease the transaction got all the same (it may commit after the caller stopped
    listening) is handed back.

    Raises:
        Whatever ``advance_step`` raises (`LeaseLostError`, `WorkflowClosedError`,
        `PayloadError`, `StoreError`); `asyncio.CancelledError` (the lease handed back first).
    """
    return await cancel_safe_claim(
        store,
        clock,
        store.advance_step(
            execution, output, now, lease_ttl=lease_ttl, max_recoveries=max_recoveries
        ),
        lambda answer: answer[1],
    )


async def completed_outputs(store: DurableStore, row: WorkflowRow) -> list[Any]:
    """The outputs of the steps a stored workflow has completed, from its first step on,
    in one read, so that a run continuing it (a resume, a restart) claims none of them again.

    Only a workflow with events after its start (``updated_at > created_at``) is read; any
    other answers ``[]``, as does a workflow whose rows the store no longer has: the run then
    claims from the first step, and a claim of a completed step answers its output, as it
    always did. A completed step's output never changes while the workflow is open (only
    `retry_workflow` of a closed one resets steps), so the outputs read stay right.
    """
    if row.updated_at <= row.created_at:
        return []
    outputs: list[Any] = []
    for step in await store.step_rows(row.workflow_id):
        if step.state is not StepState.COMPLETED:
            break
        outputs.append(step.output)
    return outputs
