"""The rule of `DurableStore.advance`: a step's completion and the claim of the next step.

An engine whose step returns at once records `StepCompleted` and then claims the next step;
as two verbs that is two transactions and two hops to the store's thread. `advance` runs the
two existing rules, `rules_attempt.complete_step` and then `rules_lease.claim_step` of the
next step, in the one transaction the store opens for it: the log gets exactly the events the
two verbs would have appended, in the same order, and each rule keeps its own checks (the
completion is fenced; the claim is a compare-and-swap on the row the completion just wrote).
The claim's arguments are checked before anything is written, so a bad one refuses the whole
verb and nothing is recorded.
"""

from __future__ import annotations

from typing import Any

from agentq.keys import validate_key
from agentq.store.checks import check_count, check_ttl
from agentq.store.claims import ClaimResult, Execution
from agentq.store.rows import WorkflowRow
from agentq.store.rules_attempt import complete_step
from agentq.store.rules_lease import claim_step
from agentq.store.tx import Tx

__all__ = ["advance"]


def advance(
    tx: Tx,
    execution: Execution,
    output: Any,
    now: float,
    worker_id: str,
    lease_ttl: float,
    max_recoveries: int,
) -> tuple[WorkflowRow, ClaimResult | None]:
    """Rule of `DurableStore.advance`: `complete_step`, then `claim_step` of the next step.

    Returns:
        The workflow's row after the completion, and the claim's result (None after the
        last step: the workflow completed, nothing to claim).
    """
    validate_key(worker_id, "worker id")  # the claim's checks, before the completion writes
    check_ttl(lease_ttl)
    check_count(max_recoveries, "max_recoveries")
    row = complete_step(tx, execution, output, now)
    following = execution.step_index + 1
    if following >= len(row.step_names):
        return row, None
    claim = claim_step(
        tx, row.workflow_id, following, worker_id, lease_ttl, now, max_recoveries
    )
    return row, claim
