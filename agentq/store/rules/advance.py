"""Transition rule of `DurableStore.advance_step`: complete a step and claim the next, at once.

A step that completes in a worker whose run goes straight on to the next step would record
its output (``complete_step``) and then claim the next step (``claim_step``): two
transactions. `advance_step` runs both rules, unchanged and in that order, in one
transaction: the events appended are exactly theirs (`StepCompleted`, then `StepStarted` of
the next step, or whatever the claim answers instead), and so are the rows. The claim is made
by the completing lease's worker; it gets the next step's own next fencing token, as a claim
always does. A refused completion (fencing, a closed workflow, a bad output) appends nothing
and claims nothing; a crash before the commit leaves the step leased, as a crash before the
completion would; after it, the state is the one the two verbs leave.

Every argument is checked before anything is read or written (the rules' order, see
`agentq.store.rules.tx`), so the claim's half never refuses after the completion wrote.
"""

from __future__ import annotations

import math
from typing import Any

from agentq.store.contract.checks import check_count, check_execution, check_now, check_ttl
from agentq.store.contract.claims import ClaimResult, Execution
from agentq.store.contract.rows import WorkflowRow
from agentq.store.rules.attempt import complete_step
from agentq.store.rules.lease import DEFAULT_MAX_RECOVERIES, claim_step
from agentq.store.rules.tx import Tx

__all__ = ["advance_step"]


def advance_step(
    tx: Tx,
    execution: Execution,
    output: Any,
    now: float,
    lease_ttl: float,
    max_recoveries: int = DEFAULT_MAX_RECOVERIES,
) -> tuple[WorkflowRow, ClaimResult | None]:
    """Rule of `DurableStore.advance_step`: `complete_step`, then `claim_step` of the next
    step by the same worker (none after the last step), in the caller's transaction.

    Returns:
        The workflow row as the completion left it, and the next step's `ClaimResult`
        (None when `execution` is the last step's).
    """
    ex = check_execution(execution)
    ttl = check_ttl(lease_ttl)
    check_count(max_recoveries, "max_recoveries")
    checked, _ = check_now(now)
    if not math.isfinite(checked + ttl):
        raise ValueError(f"now + lease_ttl overflows: {now!r} + {ttl!r}")
    row = complete_step(tx, ex, output, now)
    if ex.step_index >= len(row.step_names) - 1:
        return row, None
    claim = claim_step(
        tx, ex.workflow_id, ex.step_index + 1, ex.worker_id, ttl, now, max_recoveries
    )
    return row, claim
