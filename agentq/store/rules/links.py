"""What a retry does to the links between a parent run and its child runs.

A retried parent answers each ``child:`` wait row still waiting on a child that has ended
(`ended_children`): its log closed before the child's end could answer it (a parent cancelled
with its child). A retried child re-opens its open parent's answered wait row on it
(`relink`, a `ChildStarted` again in the parent's log), so the child's next end answers the
parent again (a `ChildEnded`, or a `StepResumed` if the parent's step parks on it) instead of
the first end standing.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentq.events import EventKind
from agentq.store.contract.children import child_of, parent_of
from agentq.store.contract.rows import CallRow, CallState, StepRow
from agentq.store.rules.projection import Rows
from agentq.store.rules.tx import Draft, Tx, apply_rows, child_outcome

__all__ = ["ended_children", "relink"]


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


def relink(tx: Tx, child_id: str, at: float) -> None:
    """Child run `child_id` was just retried: if its parent is open and its wait row on the
    child answered (by the child's earlier end), re-open that row (`ChildStarted` again,
    with the row's child, definition and reason). A closed parent is left alone."""
    link = parent_of(child_id)
    if link is None:
        return
    parent_id, key = link
    pwf, _ = tx.load(parent_id, 0, -1)  # first: a store that locks rows locks the parent's
    if pwf is None or pwf.state.closed:
        return
    row = tx.load_call(parent_id, key)
    if row is None or child_of(row) != child_id or row.state is not CallState.ANSWERED:
        return
    pwf, psteps = tx.load(parent_id, row.step_index, row.step_index)
    step = psteps.get(row.step_index)
    if pwf is None or step is None:  # pragma: no cover - a row's step is stored
        return
    details = row.details or {}
    data = {"key": key, "child": child_id, "definition": details.get("definition"),
            "reason": row.reason}
    draft = Draft.build(EventKind.CHILD_STARTED, parent_id, at, data, step=step)
    apply_rows(tx, Rows(pwf, psteps, {key: row}), [draft])
