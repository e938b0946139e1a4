"""Transition rule of child runs (``ctx.child``): `start_child`.

A parent's step attempt starts a child run: in one transaction the child's `WorkflowStarted`
(recording its parent: workflow id, step, wait key) and the parent's `ChildStarted` (the wait
row ``child:<key>`` whose details name the child). Starting it again (a replay of the step,
a retry, another process after a crash) appends nothing and returns what is stored, with
the child's outcome once it has ended (and answers the wait with a `ChildEnded` if a log
written before the end of a child did so left it waiting). A wait answered by an end of
the child that was retried since (open again, or ended otherwise) is re-opened by this
attempt (`ChildStarted` again, ``agentq.store.rules.links.rejoin``), and answered at once
with the child's new outcome if it has ended again. The end of a child answers its
parent's wait in the transaction that ends it (``agentq.store.rules.tx``); a parent that
starts waiting after the child ended is answered at once (the ``wait_step`` rule).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentq.errors import KeyConflictError, WorkflowMismatchError
from agentq.events import EventKind
from agentq.keys import validate_key
from agentq.store.contract.checks import check_now
from agentq.store.contract.children import (
    CHILD_WAIT_PREFIX,
    ChildStart,
    child_of,
    child_reason,
    child_workflow_id,
)
from agentq.store.contract.rows import CallRow, CallState, WorkflowRow
from agentq.store.rules.attempt import fenced
from agentq.store.rules.links import rejoin
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import Draft, Tx, apply_rows, child_outcome, describe_call
from agentq.store.rules.workflow import start_workflow

__all__ = ["start_child"]


def start_child(
    tx: Tx,
    execution: object,
    key: str,
    definition: str,
    step_names: Sequence[str],
    input: Any,
    now: float,
    trace: Mapping[str, str] | None = None,
) -> ChildStart:
    """Rule of `DurableStore.start_child`: start (once) child run `key` of the attempt's step.

    Raises:
        LeaseLostError / WorkflowClosedError: As `start_call` (nothing written).
        KeyConflictError: The wait key ``child:<key>`` of the parent is recorded for
            something else (a wait, another child).
        WorkflowMismatchError: The child's id is stored already, not as this child (another
            definition, steps or input, or a workflow that is no child of this parent).
        InvalidKeyError / TypeError / ValueError: A bad key (one holding ``/`` included),
            definition, step names or trace.
        PayloadError: `input` is not JSON or too large.
    """
    definition = validate_key(definition, "definition name")
    now, at = check_now(now)
    ex, wf, steps = fenced(tx, execution, "start_child")
    child_id = child_workflow_id(ex.workflow_id, key)
    wait_key = CHILD_WAIT_PREFIX + key
    row = tx.load_call(ex.workflow_id, wait_key)
    if row is not None:
        if child_of(row) != child_id:
            raise KeyConflictError(
                f"{describe_call(ex.workflow_id, wait_key, 'key')} is recorded for another "
                "wait; a child run's key needs a wait key of its own"
            )
        child, created = start_workflow(tx, child_id, step_names, input, now, definition)
        answer = child_outcome(tx, child_id)
        if row.state is CallState.ANSWERED and answer != row.output:  # retried since then
            wf, row = rejoin(tx, ex, Rows(wf, steps, {}), row, at)
        if answer is not None and row.state is CallState.WAITING:
            row = _mend(tx, wf, row, answer, at)
        return ChildStart(child, created, row, answer)
    existing, _ = tx.load(child_id, 0, -1)
    if existing is not None:
        raise WorkflowMismatchError(
            f"workflow {child_id!r} is stored already, not as child run {key!r} of workflow "
            f"{ex.workflow_id!r}: use another child key"
        )
    parent = {"workflow_id": ex.workflow_id, "step": ex.step_index, "key": wait_key}
    child, created = start_workflow(
        tx, child_id, step_names, input, now, definition, trace, parent=parent
    )
    data = {
        "key": wait_key,
        "child": child_id,
        "definition": definition,
        "reason": child_reason(child_id, definition),
    }
    draft = Draft.build(
        EventKind.CHILD_STARTED,
        ex.workflow_id,
        at,
        data,
        step=steps[ex.step_index],
        attempt=ex.attempt,
        worker_id=ex.worker_id,
    )
    after = apply_rows(tx, Rows(wf, steps, {}), [draft])
    return ChildStart(child, created, after.calls[wait_key], None)


def _mend(tx: Tx, wf: WorkflowRow, row: CallRow, answer: dict[str, Any], at: float) -> CallRow:
    """Answer the wait `row` of a child run that has ended (`answer`, its outcome) and left
    it waiting: a `ChildEnded` (a log written before the end of a child answered it so)."""
    _, steps = tx.load(wf.workflow_id, row.step_index, row.step_index)
    draft = Draft.build(
        EventKind.CHILD_ENDED, wf.workflow_id, at, {"input": answer, "key": row.key},
        step=steps[row.step_index],
    )
    return apply_rows(tx, Rows(wf, steps, {row.key: row}), [draft]).calls[row.key]
