"""`group_frame`: a run group's members as a DataFrame (re-exported by `agentq.frames`).

One row per key of the group's manifest, in the order submitted, with the member's state
(``pending`` for a key whose workflow is not stored yet), input, output or reason, times and
the usage its durable calls recorded. Columns and dtypes are fixed (`GROUP_DTYPES`), also
when nothing has run yet, as in the other frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentq._frame_columns import categorical, gc_paused, modules, nullable_ints, text, utc
from agentq.errors import UnknownWorkflowError
from agentq.store import DurableGroups, DurableStore, StepState, WorkflowState, summed_usage
from agentq.workflows import GroupStatus

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GROUP_DTYPES", "group_frame"]

_UTC = "datetime64[ns, UTC]"

GROUP_DTYPES: dict[str, str] = {
    "key": "string",
    "workflow_id": "string",
    "status": "category",
    "input": "object",
    "output": "object",
    "reason": "string",
    "started_at": _UTC,
    "ended_at": _UTC,
    "duration": "timedelta64[ns]",
    "input_tokens": "Int64",
    "output_tokens": "Int64",
    "usage": "object",
}
"""Columns of `group_frame`, in order, with their dtypes (``status``'s categories are the
`GroupStatus` fields: pending, running, waiting, completed, failed, cancelled)."""

_STATES = list(GroupStatus())


async def group_frame(store: DurableStore, group_id: str) -> pd.DataFrame:
    """Return a run group's members as a DataFrame, one row per key, in the order submitted.

    Args:
        store: A store that keeps run groups (`MemoryStore`, `SqliteStore`, `PostgresStore`).
        group_id: The group's id (`WorkflowEngine.group`).

    Returns:
        Columns (dtypes) as in `GROUP_DTYPES`: ``key``, ``workflow_id`` (``<group>/<key>``),
        ``status`` (category: pending — not stored yet —, running, waiting, completed,
        failed, cancelled), ``input`` and ``output`` (decoded JSON; the output of the last
        step once completed, else None), ``reason`` (why it failed, was cancelled or
        waits), ``started_at`` and ``ended_at`` (datetime64[ns, UTC]; ``ended_at`` NaT
        while open), ``duration`` (timedelta64[ns]), ``input_tokens`` and
        ``output_tokens`` (Int64, the sums of its durable calls' recorded usage; <NA> when
        none recorded them) and ``usage`` (every integer figure recorded, summed, a dict; None
        when none).

    Raises:
        UnknownWorkflowError: No group `group_id` is stored.
        TypeError: The store keeps no run groups.
        MissingExtraError: pandas is not installed.
        StoreError: The store failed.
    """
    pdm, npm = modules()
    if not isinstance(store, DurableGroups):
        raise TypeError(f"{store!r} keeps no run groups (it has no DurableGroups verbs)")
    manifest = await store.load_group(group_id)
    if manifest is None:
        raise UnknownWorkflowError(f"no run group {group_id!r} is in the store")
    rows = {row.workflow_id: row for row in await store.group_members(group_id)}
    records: list[dict[str, Any]] = []
    for key, value in manifest.items.items():
        wid = manifest.member_id(key)
        row = rows.get(wid)
        record: dict[str, Any] = {"key": key, "id": wid, "input": value, "state": "pending"}
        if row is not None:
            steps = await store.step_rows(wid)
            done = [s.output for s in steps if s.state is StepState.COMPLETED]
            completed = row.state is WorkflowState.COMPLETED
            focus = next((s.reason for s in steps if s.reason is not None), None)
            record.update(
                state=row.state.value,
                output=done[-1] if completed and done else None,
                reason=None if completed else row.reason or focus,
                started=row.created_at,
                ended=row.updated_at if row.state.closed else None,
                usage=summed_usage([c.usage for c in await store.calls(wid)]),
            )
        records.append(record)
    usage = [r.get("usage") or {} for r in records]
    with gc_paused():
        started = utc(npm, pdm, [r.get("started") for r in records])
        ended = utc(npm, pdm, [r.get("ended") for r in records])
        data = {
            "key": text(pdm, npm, [r["key"] for r in records]),
            "workflow_id": text(pdm, npm, [r["id"] for r in records]),
            "status": categorical(pdm, npm, [r["state"] for r in records], _STATES),
            "input": pdm.Series([r["input"] for r in records], dtype=object),
            "output": pdm.Series([r.get("output") for r in records], dtype=object),
            "reason": text(pdm, npm, [r.get("reason") for r in records]),
            "started_at": started,
            "ended_at": ended,
            "duration": ended - started,
            "input_tokens": nullable_ints(pdm, npm, [u.get("input_tokens") for u in usage]),
            "output_tokens": nullable_ints(pdm, npm, [u.get("output_tokens") for u in usage]),
            "usage": pdm.Series([r.get("usage") for r in records], dtype=object),
        }
        frame: pd.DataFrame = pdm.DataFrame(data, copy=False)
    return frame
