"""What a retry does to the links between a parent run and its child runs.

A retried parent answers each ``child:`` wait row still waiting on a child that has ended
(`ended_children`): its log closed before the child's end could answer it (a parent cancelled
with its child). A retried child leaves its parent alone: the parent's attempt that starts
it again (`start_child`) re-opens its answered wait row on it (`rejoin`, a `ChildStarted`
again in the parent's log, in that attempt's transaction), so the child's next end answers
the parent again (a `ChildEnded`, or a `StepResumed` if the parent's step parks on it). A
parent that read the answer and moved on is never re-opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from agentq.events import EventKind
from agentq.store.contract.children import child_of
from agentq.store.contract.claims import Execution
from agentq.store.contract.rows import CallRow, CallState, StepRow, WorkflowRow
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import Draft, Tx, apply_rows, child_outcome

__all__ = ["ended_children", "rejoin"]


def ended_children(
    tx: Tx, workflow_id: str, steps: Mapping[int, StepRow], at: float
) -> tuple[dict[str, CallRow], list[Draft]]:
    """The ``child:`` wait rows of `workflow_id` left waiting on a child that has ended, and
    the `ChildEnded` answering each with the child's outcome (`steps`: the workflow's)."""
    rows: dict[str, CallRow] = {}
    drafts: list[Draft] = []
    for row in tx.load_calls(workflow_id):
        child = child_of(row)
        if child is None or row.state is not CallState.WAITING:
            continue
        answer = child_outcome(tx, child)
        if answer is not None:
            rows[row.key] = row
            data = {"input": answer, "key": row.key}
            drafts.append(Draft.build(
                EventKind.CHILD_ENDED, workflow_id, at, data, step=steps[row.step_index]
            ))
    return rows, drafts


def rejoin(
    tx: Tx, ex: Execution, rows: Rows, row: CallRow, at: float
) -> tuple[WorkflowRow, CallRow]:
    """The attempt `ex` of the parent (`rows`: its workflow and steps) starts its child
    again (`start_child`) and finds its wait row `row` answered with an outcome the child no
    longer has (it was retried since): re-open the row (`ChildStarted` again, by this
    attempt, with the row's child, definition and reason), so the child's end answers it
    again. Only the parent re-opens it: a parent that read the answer and moved on never
    does. Returns the parent's workflow row and the wait row, as re-opened."""
    details = row.details or {}
    data = {"key": row.key, "child": child_of(row), "definition": details.get("definition"),
            "reason": row.reason}
    draft = Draft.build(EventKind.CHILD_STARTED, ex.workflow_id, at, data,
                        step=rows.steps[ex.step_index], attempt=ex.attempt,
                        worker_id=ex.worker_id)
    after = apply_rows(tx, replace(rows, calls={row.key: row}), [draft])
    assert after.workflow is not None  # a started workflow's row
    return after.workflow, after.calls[row.key]
