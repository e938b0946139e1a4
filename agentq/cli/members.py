"""``agentq ls STORE --group G``: a run group's members and its summary line.

The members are the workflows ``G/<key>`` of the group's manifest (their child runs left
out), listed in the order submitted; a key whose workflow is not stored yet is counted as
pending in the summary.
"""

from __future__ import annotations

from collections import Counter

from agentq.errors import UnknownWorkflowError
from agentq.store import DurableGroups, DurableStore, StepRow, WorkflowRow, WorkflowState

__all__ = ["GroupListing", "group_listing"]

_ORDER = ("completed", "failed", "cancelled", "running", "waiting", "pending")


class GroupListing:
    """What ``ls --group`` prints: the stored members (rows, steps) and the summary line.

    Attributes:
        rows: The stored members' rows, in the order submitted (filtered by state if asked).
        steps: Their step rows.
        summary: ``group G (definition D): N members: a completed, b failed, …`` (``(K
            definitions)`` when the members have their own).
    """

    def __init__(self, rows: list[WorkflowRow], steps: list[StepRow], summary: str) -> None:
        self.rows = rows
        self.steps = steps
        self.summary = summary


async def group_listing(
    store: DurableStore, group_id: str, state: WorkflowState | None, with_steps: bool
) -> GroupListing:
    """Read group `group_id`'s members (only those in `state`, if given).

    Raises:
        UnknownWorkflowError: No such group in the store, or the store keeps no groups.
    """
    if not isinstance(store, DurableGroups):
        raise UnknownWorkflowError(f"{store!r} keeps no run groups")
    manifest = await store.load_group(group_id)
    if manifest is None:
        raise UnknownWorkflowError(f"no run group {group_id!r} is in the store")
    stored = {row.workflow_id: row for row in await store.group_members(group_id)}
    members = [stored.get(manifest.member_id(key)) for key in manifest.items]
    counts = Counter("pending" if row is None else row.state.value for row in members)
    shown = [r for r in members if r is not None and (state is None or r.state is state)]
    steps: list[StepRow] = []
    if with_steps:
        for row in shown:
            steps.extend(await store.step_rows(row.workflow_id))
    parts = ", ".join(f"{counts[name]} {name}" for name in _ORDER)
    shared = manifest.definition
    named = (
        f"definition {shared}" if shared is not None
        else f"{len(set(manifest.definitions.values()))} definitions"
    )
    summary = f"group {group_id} ({named}): {len(members)} members: {parts}"
    return GroupListing(shown, steps, summary)
