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
Both halves read their rows in one load: the workflow, the step and the next one (the
claim's half works on the rows as the completion left them: `attempt.completed`,
`lease.claim_loaded`), not a second read of what this transaction has just written.
"""

from __future__ import annotations

import math
from typing import Any

from agentq.store.contract.checks import (
    check_count,
    check_execution,
    check_now,
    check_payload,
    check_ttl,
)
from agentq.store.contract.claims import ClaimResult, Execution
from agentq.store.contract.rows import WorkflowRow
from agentq.store.rules.attempt import check_fence, completed
from agentq.store.rules.fence import check_known
from agentq.store.rules.lease import DEFAULT_MAX_RECOVERIES, claim_loaded
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
    limit = check_count(max_recoveries, "max_recoveries")
    checked, at = check_now(now)
    if not math.isfinite(checked + ttl):
        raise ValueError(f"now + lease_ttl overflows: {now!r} + {ttl!r}")
    value, text = check_payload(output, "output")
    index = ex.step_index
    wf, steps = tx.load(ex.workflow_id, index, index + 1)  # complete_step's `fenced`, and
    check_known(  # the next step's row for the claim
        ex.workflow_id, index, None if wf is None else wf.step_names, index in steps
    )
    assert wf is not None
    check_fence(ex, wf, steps[index], "complete_step", False)
    after = completed(tx, ex, value, text, at, wf, steps)
    row = after.workflow
    assert row is not None
    nxt = index + 1
    if nxt >= len(row.step_names):
        return row, None
    check_known(ex.workflow_id, nxt, row.step_names, nxt in steps)
    rows = {index: after.steps[index], nxt: steps[nxt]}
    return row, claim_loaded(
        tx, row, rows, nxt, ex.worker_id, checked, at, checked + ttl, limit
    )
