"""The read side of `SqliteStore` as queries: one function per read verb.

Each takes the raw `sqlite3.Connection` and runs on the connection's thread (the async half,
`agentq.store.sqlite`, ships it there after every write submitted before it). `event_rows`
extracts the JSON members in SQL where SQLite has the ``->`` operators (`JSON_ARROWS`).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from agentq.events import Event, EventKind
from agentq.store.claims import Execution, execution_of
from agentq.store.ready import ReadyWork
from agentq.store.rows import (
    INPUT_KINDS,
    KEY_KINDS,
    LABEL_KINDS,
    OUTPUT_KINDS,
    REASON_KINDS,
    CallRow,
    StepRow,
    StepState,
    WorkflowRow,
    WorkflowState,
    event_row,
)
from agentq.store.sqlite_rows import (
    CALL_COLUMNS,
    EVENT_TABLE_COLUMNS,
    STEP_COLUMNS,
    WORKFLOW_SELECT,
    WORKFLOW_WIDTH,
    call_row,
    event_of,
    step_row,
    workflow_row,
)

__all__ = [
    "JSON_ARROWS",
    "calls",
    "event_rows",
    "expired_leases",
    "get_workflow",
    "last_seq",
    "load_events",
    "ready_workflows",
    "step_rows",
    "workflows",
]


def get_workflow(conn: sqlite3.Connection, workflow_id: str) -> WorkflowRow | None:
    """Return one workflow's row, or None."""
    r = conn.execute(f"{WORKFLOW_SELECT} WHERE w.workflow_id = ?", (workflow_id,)).fetchone()
    return None if r is None else workflow_row(r)


def workflows(conn: sqlite3.Connection, state: WorkflowState | None) -> list[WorkflowRow]:
    """Return workflows (optionally in `state`) in start order."""
    if state is None:
        cursor = conn.execute(f"{WORKFLOW_SELECT} ORDER BY w.started_seq")
    else:
        cursor = conn.execute(
            f"{WORKFLOW_SELECT} WHERE w.state = ? ORDER BY w.started_seq", (state.value,)
        )
    return [workflow_row(r) for r in cursor]


def step_rows(conn: sqlite3.Connection, workflow_id: str | None) -> list[StepRow]:
    """Return the step rows of one workflow, or of all in start order, by step index."""
    if workflow_id is not None:
        cursor = conn.execute(
            f"SELECT {STEP_COLUMNS} FROM steps WHERE workflow_id = ? ORDER BY step_index",
            (workflow_id,),
        )
    else:
        columns = ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(","))
        cursor = conn.execute(
            f"SELECT {columns} FROM steps AS s JOIN workflows AS w USING (workflow_id) "
            "ORDER BY w.started_seq, s.step_index"
        )
    return [step_row(r) for r in cursor]


def calls(
    conn: sqlite3.Connection, workflow_id: str | None, step_index: int | None
) -> list[CallRow]:
    """Return the call rows of one workflow (or all), optionally of one step, by first_seq."""
    where: list[str] = []
    params: list[Any] = []
    if workflow_id is not None:
        where.append("workflow_id = ?")
        params.append(workflow_id)
    if step_index is not None:
        where.append("step_index = ?")
        params.append(step_index)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT {CALL_COLUMNS} FROM calls{clause} ORDER BY first_seq"
    return [call_row(r) for r in conn.execute(sql, params)]


def expired_leases(conn: sqlite3.Connection, now: float) -> list[Execution]:
    """Return the leases with ``expires_at < now``, oldest first."""
    cursor = conn.execute(
        f"SELECT {STEP_COLUMNS} FROM steps WHERE state = 'leased' AND lease_expires_at < ? "
        "ORDER BY lease_expires_at, workflow_id, step_index",
        (now,),
    )
    return [execution_of(step_row(r)) for r in cursor]


def _where(workflow_id: str | None, after_seq: int) -> tuple[str, tuple[Any, ...]]:
    if workflow_id is None:
        return "seq > ?", (after_seq,)
    return "workflow_id = ? AND seq > ?", (workflow_id, after_seq)


def load_events(
    conn: sqlite3.Connection, workflow_id: str | None, after_seq: int, limit: int | None
) -> list[Event]:
    """Return events after `after_seq` (of one workflow, or all), by seq."""
    where, params = _where(workflow_id, after_seq)
    sql = f"SELECT {EVENT_TABLE_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    if limit is not None:
        sql, params = f"{sql} LIMIT ?", (*params, limit)
    return [event_of(r) for r in conn.execute(sql, params)]


def _kinds(kinds: frozenset[EventKind]) -> str:
    return ", ".join(f"'{k.value}'" for k in sorted(kinds))


# `->` (SQLite >= 3.38) returns a member as JSON text exactly as stored; json_extract would
# turn a top-level number into a REAL and print it back with 15 digits. ->> returns SQL text.
_EVENT_ROWS_SQL = (
    "SELECT seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, "
    f"CASE WHEN kind IN ({_kinds(REASON_KINDS)}) THEN data ->> '$.reason' END, "
    f"CASE WHEN kind IN ({_kinds(OUTPUT_KINDS)}) THEN data -> '$.output' END, "
    f"CASE WHEN kind IN ({_kinds(INPUT_KINDS)}) THEN data -> '$.input' END, "
    f"CASE WHEN kind IN ({_kinds(KEY_KINDS)}) THEN data ->> '$.key' END, "
    f"CASE WHEN kind IN ({_kinds(LABEL_KINDS)}) AND data ->> '$.label' IS NOT NULL "
    "THEN data -> '$.label' END "
    "FROM events WHERE {where} ORDER BY seq"
)
JSON_ARROWS = sqlite3.sqlite_version_info >= (3, 38, 0)
"""Whether this SQLite has the ``->`` and ``->>`` operators (else rows are built in Python)."""


def event_rows(
    conn: sqlite3.Connection, workflow_id: str | None, after_seq: int
) -> list[tuple[Any, ...]]:
    """Return events as tuples in `EVENT_COLUMNS` order, the JSON members extracted in SQL."""
    where, params = _where(workflow_id, after_seq)
    if JSON_ARROWS:
        return conn.execute(_EVENT_ROWS_SQL.format(where=where), params).fetchall()
    sql = f"SELECT {EVENT_TABLE_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    return [event_row(event_of(r)) for r in conn.execute(sql, params)]


def last_seq(conn: sqlite3.Connection) -> int:
    """Return the highest sequence number (0 when the log is empty)."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])


_READY = (
    "WITH ready AS (SELECT w.workflow_id AS wid, s.step_index AS idx, s.state AS sstate,"
    " w.started_seq AS started FROM workflows AS w JOIN steps AS s"
    " ON s.workflow_id = w.workflow_id AND s.step_index = (SELECT MIN(step_index) FROM steps"
    " WHERE workflow_id = w.workflow_id AND state <> 'completed')"
    " WHERE w.definition IN ({names}) AND w.state IN ('running', 'waiting') AND ("
    "(w.state = 'running' AND s.state = 'pending' AND (s.retry_at IS NULL OR s.retry_at <= ?))"
    " OR (w.state = 'running' AND s.state = 'leased' AND s.lease_expires_at < ?)"
    " OR (w.state = 'waiting' AND s.state = 'waiting' AND s.wait_deadline <= ?))"
    " ORDER BY w.started_seq LIMIT ?) "
    + WORKFLOW_SELECT.replace(
        " FROM workflows AS w",
        ", r.idx, r.sstate FROM ready AS r JOIN workflows AS w ON w.workflow_id = r.wid",
    )
    + " ORDER BY r.started"
)


def ready_workflows(
    conn: sqlite3.Connection, now: float, names: tuple[str, ...], limit: int
) -> list[ReadyWork]:
    """Return up to `limit` open workflows of `names` whose current step is ready at `now`
    (`agentq.store.ready.is_ready`, as SQL), in start order."""
    if not names:
        return []
    sql = _READY.format(names=", ".join("?" * len(names)))
    return [
        ReadyWork(workflow_row(r), r[WORKFLOW_WIDTH], StepState(r[WORKFLOW_WIDTH + 1]))
        for r in conn.execute(sql, (*names, now, now, now, limit))
    ]

