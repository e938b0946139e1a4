"""The run-group tables of the SQL stores (``run_groups``, ``run_group_items``) as queries.

Both SQL stores keep the same two tables (a group's creation time; one row per member:
position, key, definition name, input as JSON text) and run the same statements, in their
`Dialect`. `record` and `forget` run inside a write transaction (given the raw connection),
`load` and `members` are reads. The tables are not part of the event log.
"""

from __future__ import annotations

from typing import Any

from agentq.codec import decode
from agentq.store.contract.groups import GroupItem, GroupManifest
from agentq.store.contract.rows import WorkflowRow
from agentq.store.sql.reads import Connection, Dialect
from agentq.store.sql.rows import WORKFLOW_SELECT, workflow_row

__all__ = ["forget", "load", "members", "record"]


def load(conn: Connection, d: Dialect, group_id: str) -> GroupManifest | None:
    """Return the manifest stored under `group_id`, or None."""
    head = conn.execute(
        d.sql("SELECT created_at FROM run_groups WHERE group_id = ?"), (d.key(group_id),)
    ).fetchone()
    if head is None:
        return None
    rows = conn.execute(
        d.sql(
            "SELECT item_key, definition, input FROM run_group_items WHERE group_id = ? "
            "ORDER BY position"
        ),
        (d.key(group_id),),
    ).fetchall()
    names = {key: name for key, name, _ in rows}
    items = {key: None if text == "null" else decode(text) for key, _, text in rows}
    return GroupManifest(group_id, names, items, head[0])


def record(
    conn: Connection,
    d: Dialect,
    group_id: str,
    items: list[GroupItem],
    now: float,
) -> tuple[GroupManifest, bool]:
    """Insert the manifest unless one is stored (``ON CONFLICT DO NOTHING``); return the
    manifest stored and whether this call inserted it."""
    inserted = conn.execute(
        d.sql(
            "INSERT INTO run_groups (group_id, created_at) VALUES (?, ?) "
            "ON CONFLICT (group_id) DO NOTHING"
        ),
        (d.key(group_id), now),
    ).rowcount
    if inserted != 1:
        found = load(conn, d, group_id)
        assert found is not None  # the conflict was on this very row, inside this transaction
        return found, False
    sql = d.sql(
        "INSERT INTO run_group_items (group_id, position, item_key, definition, input) "
        "VALUES (?, ?, ?, ?, ?)"
    )
    gid = d.key(group_id)
    for position, item in enumerate(items):
        conn.execute(sql, (gid, position, d.key(item.key), item.definition, item.text))
    names = {i.key: i.definition for i in items}
    manifest = GroupManifest(group_id, names, {i.key: i.input for i in items}, now)
    return manifest, True


def forget(conn: Connection, d: Dialect, group_id: str) -> bool:
    """Delete the manifest (its items first); True if there was one."""
    gid = d.key(group_id)
    conn.execute(d.sql("DELETE FROM run_group_items WHERE group_id = ?"), (gid,))
    deleted: int = conn.execute(d.sql("DELETE FROM run_groups WHERE group_id = ?"), (gid,)).rowcount
    return deleted > 0


def members(conn: Connection, d: Dialect, group_id: str) -> list[WorkflowRow]:
    """Return the workflows whose id starts with ``<group_id>/``, by id (a range of the
    primary key: ids from ``<group_id>/`` up to, not including, ``<group_id>0``)."""
    sql = d.sql(
        f"{WORKFLOW_SELECT} WHERE w.workflow_id >= ? AND w.workflow_id < ? ORDER BY w.workflow_id"
    )
    low: Any = d.key(group_id + "/")
    high: Any = d.key(group_id + "0")
    return [workflow_row(r) for r in conn.execute(sql, (low, high))]
