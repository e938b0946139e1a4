"""Child runs (``ctx.child``): how a parent and its children are named, and `ChildStart`.

A child run is a workflow whose id is its parent's id, a ``/`` and the child's key
(`child_workflow_id`); the key holds no ``/``, so the parent's id is the part before the last
one (`parent_of`). The parent's step waits on the child under the wait key ``child:<key>``
(`CHILD_WAIT_PREFIX`); that wait row, recorded by `ChildStarted` in the parent's log, holds the
child's id in its details, which is how the store checks the link both ways.

When the child ends, the store answers the parent's wait with the child's `outcome`, in the
transaction that ends the child; see ``agentq.store.rules.tx`` and `DurableStore.start_child`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from agentq.keys import validate_key
from agentq.store.contract.rows import CallKind, CallRow, WorkflowRow, WorkflowState

__all__ = [
    "CHILD_WAIT_PREFIX",
    "RECEIVE_WAIT_PREFIX",
    "SLEEP_WAIT_PREFIX",
    "ChildStart",
    "child_of",
    "child_reason",
    "child_workflow_id",
    "closed_by_parent",
    "closed_with_parent",
    "engine_wait",
    "outcome",
    "parent_of",
    "waited_child",
]

CHILD_WAIT_PREFIX = "child:"
"""The parent's wait key of a child run is this prefix followed by the child's key."""


class ChildStart(NamedTuple):
    """What `DurableStore.start_child` returns.

    Attributes:
        child: The child workflow's row (new, or as stored).
        created: True if this call stored the child.
        wait: The parent's wait row for the child (key ``child:<key>``).
        outcome: The child's outcome if it has ended (see `outcome`), else None.
    """

    child: WorkflowRow
    created: bool
    wait: CallRow
    outcome: dict[str, Any] | None


def child_workflow_id(
    parent_id: str, key: str, *, kind: str = "child", parent: str = "parent"
) -> str:
    """Return the id of the child run `key` of workflow `parent_id`: ``<parent_id>/<key>``.

    Args:
        parent_id: The parent's id (a run, or a run group).
        key: The child's key.
        kind: What the key names, for the error messages: ``"child"`` (``"a child key"``)
            or e.g. ``"group member"`` (`member_id`).
        parent: What `parent_id` names, for the error messages (``<parent>/<key>``).

    Raises:
        InvalidKeyError / TypeError: `key` (or the id made) is not a valid key.
        ValueError: `key` holds a ``/`` (the parent's id would be ambiguous).
    """
    key = validate_key(key, f"{kind} key")
    if "/" in key:
        raise ValueError(
            f"a {kind} key holds no '/' (the {kind}'s id is <{parent}>/<key>): {key!r}"
        )
    return validate_key(f"{parent_id}/{key}", f"{kind} workflow id")


def parent_of(child_id: str) -> tuple[str, str] | None:
    """Return (parent id, the parent's wait key) a child run's id names, or None (no ``/``)."""
    parent, sep, key = child_id.rpartition("/")
    if not sep or not parent or not key:
        return None
    return parent, CHILD_WAIT_PREFIX + key


SLEEP_WAIT_PREFIX = "sleep:"
"""Keys of the waits of durable sleeps (``ctx.sleep``): ``sleep:<n>``."""
RECEIVE_WAIT_PREFIX = "receive:"
"""Keys of the waits of receives (``ctx.receive``): ``receive:<step>:<topic>:<n>``."""

_ENGINE_WAITS = {
    SLEEP_WAIT_PREFIX: "a durable sleep (ctx.sleep): its time wakes it; cancel or retry the "
    "workflow",
    RECEIVE_WAIT_PREFIX: "a receive (ctx.receive): send the workflow a message (engine.send)",
}


def engine_wait(wait_key: str | None) -> str | None:
    """What answers a wait the engine made for a sleep (key ``sleep:<n>``) or a receive
    (``receive:...``), or None for any other key: such a wait is never a person's input."""
    if wait_key is None:
        return None
    for prefix, said in _ENGINE_WAITS.items():
        if wait_key.startswith(prefix):
            return said
    return None


def waited_child(workflow_id: str, wait_key: str | None) -> str | None:
    """Return the id of the child run a wait key ``child:<key>`` of workflow `workflow_id`
    names (``<workflow_id>/<key>``), or None (`wait_key` is None or not a child wait's key)."""
    if wait_key is None or not wait_key.startswith(CHILD_WAIT_PREFIX):
        return None
    return f"{workflow_id}/{wait_key[len(CHILD_WAIT_PREFIX):]}"


def child_of(row: CallRow) -> str | None:
    """Return the child workflow id a parent's call row waits on, or None (not a child wait)."""
    if row.kind is not CallKind.WAIT or not row.key.startswith(CHILD_WAIT_PREFIX):
        return None
    child = (row.details or {}).get("child")
    return child if isinstance(child, str) else None


def closed_by_parent(parent_id: str, why: str) -> str:
    """The reason of a child run cancelled because its parent `parent_id` closed (`why`:
    ``"was cancelled"``, ``"timed out (its deadline passed)"``)."""
    return f"its parent workflow {parent_id!r} {why}"


def closed_with_parent(child_id: str, reason: str | None) -> bool:
    """Whether child run `child_id`, with its end's `reason`, was cancelled because its
    parent closed (`closed_by_parent`), rather than ended on its own."""
    parent = parent_of(child_id)
    return parent is not None and (reason or "").startswith(closed_by_parent(parent[0], ""))


def child_reason(child_id: str, definition: str) -> str:
    """The text of a parent's wait on a child run (its wait row's reason)."""
    return f"child run {child_id!r} ({definition})"


def outcome(child: WorkflowRow, output: Any) -> dict[str, Any] | None:
    """The outcome a parent's wait is answered with, for an ended child; None while open.

    ``{"child": id, "state": "completed", "output": <its last step's output>}``, or
    ``{"child": id, "state": "failed" | "cancelled", "reason": <why>}``.
    """
    if not child.state.closed:
        return None
    if child.state is WorkflowState.COMPLETED:
        return {"child": child.workflow_id, "state": "completed", "output": output}
    return {"child": child.workflow_id, "state": str(child.state), "reason": child.reason}
