"""One transaction of a sweep, in SQL, for both SQL stores: `sweep_batch`.

Reads at most `limit` workflows of one state after a cursor (``workflows_by_state``, an index
on ``(state, started_seq)``, in order), each with its end (the time of its latest event, one
seek of ``events_by_workflow``) and its latest lease expiry; picks those to remove with
`agentq.store.rules.sweep.chosen`; deletes their job outcomes, call rows, messages, end-hook
outbox rows, step rows, workflow rows and then their events (the log's triggers refuse to
delete an event of a stored workflow). On PostgreSQL the workflows read are locked (``FOR
UPDATE SKIP LOCKED``): one that a verb holds is left for the next sweep; a workflow's outbox
rows are read ``FOR UPDATE`` (a claim of one commits before the sweep decides, or waits for
it and finds the row gone). Runs on the store's thread, inside the transaction
the store opened (``SqliteStore`` through its group commit, ``PostgresStore`` in
``Connections.transact``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.keys import call_queue_key
from agentq.store.contract.sweep import SweepReport
from agentq.store.rules.sweep import (
    Candidate,
    SweepBatch,
    chosen,
    group_member,
    hook_holds,
    recorded_child,
)
from agentq.store.sql.hooks import HOOK_COLUMNS, hook_row
from agentq.store.sql.reads import Connection, Dialect

__all__ = ["sweep_batch"]

_CANDIDATES = (
    "SELECT c.workflow_id, c.started_seq,"
    " (SELECT at FROM events WHERE workflow_id = c.workflow_id ORDER BY seq DESC LIMIT 1),"
    " (SELECT max(lease_expires_at) FROM steps WHERE workflow_id = c.workflow_id)"
    " FROM (SELECT workflow_id, started_seq FROM workflows WHERE state = ? AND started_seq > ?"
    " ORDER BY started_seq LIMIT ?{lock}) AS c ORDER BY c.started_seq"
)
_RECORDED_CHILD = (
    "SELECT 1 FROM workflows AS w JOIN calls AS c ON c.workflow_id = w.workflow_id"
    " WHERE w.workflow_id = ? AND c.call_key = ?"
)

_GROUP_ITEM = "SELECT 1 FROM run_group_items WHERE group_id = ? AND item_key = ?"

_HOOKS = f"SELECT {HOOK_COLUMNS} FROM end_hooks WHERE workflow_id = ?{{lock}}"


def _within(d: Dialect, column: str, count: int) -> str:
    """``column`` among `count` values: one array parameter on PostgreSQL, else a list."""
    if d.names_one_param:
        return f"{column} = ANY(?)"
    return f"{column} IN ({', '.join('?' * count)})"


def _values(d: Dialect, values: Sequence[str]) -> tuple[Any, ...]:
    keys = [d.key(v) for v in values]
    return (keys,) if d.names_one_param else tuple(keys)


def _delete(conn: Connection, d: Dialect, table: str, column: str, values: Sequence[str]) -> int:
    """Delete the rows of `table` whose `column` is among `values`; how many."""
    if not values:
        return 0
    sql = d.sql(f"DELETE FROM {table} WHERE {_within(d, column, len(values))}")
    return int(conn.execute(sql, _values(d, values)).rowcount)


def sweep_batch(
    d: Dialect, conn: Connection, cutoff: float, state: str, after: int, limit: int
) -> SweepBatch:
    """`agentq.store.rules.sweep.Sweeper.batch` for a SQL store, on an open transaction.

    Args:
        d: The store's dialect (``ready_lock`` locks the workflows read on PostgreSQL).
        conn: The connection, inside the transaction.
        cutoff: Unix seconds: workflows ended strictly before it may go.
        state: The ended state swept (its stored value).
        after: The cursor: only workflows whose ``started_seq`` is greater are read.
        limit: At most this many workflows are read.

    Returns:
        What was removed, the cursor to go on from (None: none left), and whether a child
        run was kept for its parent.
    """
    lock = " FOR UPDATE SKIP LOCKED" if d.ready_lock else ""
    rows = conn.execute(
        d.sql(_CANDIDATES.format(lock=lock)), (state, after, limit)
    ).fetchall()
    candidates = [
        Candidate(str(r[0]), int(r[1]), float(r[2]), None if r[3] is None else float(r[3]))
        for r in rows
    ]

    def has_wait(parent_id: str, wait_key: str) -> bool:
        found = conn.execute(d.sql(_RECORDED_CHILD), (d.key(parent_id), d.key(wait_key)))
        return found.fetchone() is not None

    def has_item(group_id: str, key: str) -> bool:
        found = conn.execute(d.sql(_GROUP_ITEM), (d.key(group_id), d.key(key)))
        return found.fetchone() is not None

    def hooked(workflow_id: str) -> bool:
        sql = d.sql(_HOOKS.format(lock=" FOR UPDATE" if d.ready_lock else ""))
        rows = conn.execute(sql, (d.key(workflow_id),)).fetchall()
        return any(hook_holds(hook_row(r)) for r in rows)

    ids, skipped = chosen(
        candidates,
        cutoff,
        lambda wid: recorded_child(wid, has_wait),
        lambda wid: group_member(wid, has_item) is not None or hooked(wid),
    )
    cursor = candidates[-1].started_seq if len(candidates) == limit else None
    if not ids:
        return SweepBatch(SweepReport(), cursor, skipped)
    calls = conn.execute(
        d.sql(
            f"SELECT workflow_id, call_key FROM calls WHERE kind = 'call' AND "
            f"{_within(d, 'workflow_id', len(ids))}"
        ),
        _values(d, ids),
    ).fetchall()
    _delete(conn, d, "job_outcomes", "key", [call_queue_key(str(w), str(k)) for w, k in calls])
    removed_calls = _delete(conn, d, "calls", "workflow_id", ids)
    _delete(conn, d, "messages", "workflow_id", ids)
    _delete(conn, d, "end_hooks", "workflow_id", ids)
    _delete(conn, d, "steps", "workflow_id", ids)
    removed = _delete(conn, d, "workflows", "workflow_id", ids)
    events = _delete(conn, d, "events", "workflow_id", ids)
    return SweepBatch(SweepReport(removed, events, removed_calls), cursor, skipped)

