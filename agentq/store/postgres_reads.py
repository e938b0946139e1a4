"""The read side of `PostgresStore` as queries: one function per read verb.

Each takes a `psycopg.Connection` of the pool (autocommit: a statement sees every transaction
committed before it starts) and runs on one of the store's worker threads. The column lists
and the row decoders are the SQLite store's (`agentq.store.sqlite_rows`): both keep JSON as
the same compact text, and the key columns, stored as ``bytea``, are read back as `str` by the
connection's loader. `event_rows` builds its tuples in Python (`agentq.store.rows.event_row`),
so its JSON text is byte-for-byte what the other stores return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentq.events import Event
from agentq.store.claims import Execution, execution_of
from agentq.store.postgres_tx import key
from agentq.store.ready import ReadyWork
from agentq.store.rows import (
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

if TYPE_CHECKING:
    import psycopg

__all__ = [
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


def get_workflow(conn: psycopg.Connection[Any], workflow_id: str) -> WorkflowRow | None:
    """Return one workflow's row, or None."""
    r = conn.execute(f"{WORKFLOW_SELECT} WHERE w.workflow_id = %s", (key(workflow_id),)).fetchone()
    return None if r is None else workflow_row(r)


def workflows(conn: psycopg.Connection[Any], state: WorkflowState | None) -> list[WorkflowRow]:
    """Return workflows (optionally in `state`) in start order."""
    if state is None:
        cursor = conn.execute(f"{WORKFLOW_SELECT} ORDER BY w.started_seq")
    else:
        cursor = conn.execute(
            f"{WORKFLOW_SELECT} WHERE w.state = %s ORDER BY w.started_seq", (state.value,)
        )
    return [workflow_row(r) for r in cursor]


def step_rows(conn: psycopg.Connection[Any], workflow_id: str | None) -> list[StepRow]:
    """Return the step rows of one workflow, or of all in start order, by step index."""
    if workflow_id is not None:
        cursor = conn.execute(
            f"SELECT {STEP_COLUMNS} FROM steps WHERE workflow_id = %s ORDER BY step_index",
            (key(workflow_id),),
        )
    else:
        columns = ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(","))
        cursor = conn.execute(
            f"SELECT {columns} FROM steps AS s JOIN workflows AS w USING (workflow_id) "
            "ORDER BY w.started_seq, s.step_index"
        )
    return [step_row(r) for r in cursor]


def calls(
    conn: psycopg.Connection[Any], workflow_id: str | None, step_index: int | None
) -> list[CallRow]:
    """Return the call rows of one workflow (or all), optionally of one step, by first_seq."""
    where: list[str] = []
    params: list[Any] = []
    if workflow_id is not None:
        where.append("workflow_id = %s")
        params.append(key(workflow_id))
    if step_index is not None:
        where.append("step_index = %s")
        params.append(step_index)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT {CALL_COLUMNS} FROM calls{clause} ORDER BY first_seq"
    return [call_row(r) for r in conn.execute(sql, params)]


def expired_leases(conn: psycopg.Connection[Any], now: float) -> list[Execution]:
    """Return the leases with ``expires_at < now``, oldest first."""
    cursor = conn.execute(
        f"SELECT {STEP_COLUMNS} FROM steps WHERE state = 'leased' AND lease_expires_at < %s "
        "ORDER BY lease_expires_at, workflow_id, step_index",
        (now,),
    )
    return [execution_of(step_row(r)) for r in cursor]


def load_events(
    conn: psycopg.Connection[Any], workflow_id: str | None, after_seq: int, limit: int | None
) -> list[Event]:
    """Return events after `after_seq` (of one workflow, or all), by seq."""
    params: tuple[Any, ...]
    if workflow_id is None:
        where, params = "seq > %s", (after_seq,)
    else:
        where, params = "workflow_id = %s AND seq > %s", (key(workflow_id), after_seq)
    sql = f"SELECT {EVENT_TABLE_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    if limit is not None:
        sql, params = f"{sql} LIMIT %s", (*params, limit)
    return [event_of(r) for r in conn.execute(sql, params)]


def event_rows(
    conn: psycopg.Connection[Any], workflow_id: str | None, after_seq: int
) -> list[tuple[Any, ...]]:
    """Return events as tuples in `EVENT_COLUMNS` order (built by `event_row`)."""
    return [event_row(e) for e in load_events(conn, workflow_id, after_seq, None)]


def last_seq(conn: psycopg.Connection[Any]) -> int:
    """Return the highest sequence number (0 when the log is empty)."""
    r = conn.execute("SELECT last_seq FROM event_seq").fetchone()
    return 0 if r is None else int(r[0])


# `agentq.store.ready.is_ready` as SQL (as SQLite's query), plus FOR UPDATE SKIP LOCKED: the
# workflows another transaction holds right now (a claim in flight) are left to it.
_READY = (
    "WITH ready AS (SELECT w.workflow_id AS wid, s.step_index AS idx, s.state AS sstate,"
    " w.started_seq AS started FROM workflows AS w JOIN steps AS s"
    " ON s.workflow_id = w.workflow_id AND s.step_index = (SELECT min(step_index) FROM steps"
    " WHERE workflow_id = w.workflow_id AND state <> 'completed')"
    " WHERE w.definition = ANY(%s) AND w.state IN ('running', 'waiting') AND ("
    "(w.state = 'running' AND s.state = 'pending' AND (s.retry_at IS NULL OR s.retry_at <= %s))"
    " OR (w.state = 'running' AND s.state = 'leased' AND s.lease_expires_at < %s)"
    " OR (w.state = 'waiting' AND s.state = 'waiting' AND s.wait_deadline <= %s))"
    " ORDER BY w.started_seq LIMIT %s FOR UPDATE OF w SKIP LOCKED) "
    + WORKFLOW_SELECT.replace(
        " FROM workflows AS w",
        ", r.idx, r.sstate FROM ready AS r JOIN workflows AS w ON w.workflow_id = r.wid",
    )
    + " ORDER BY r.started"
)


def ready_workflows(
    conn: psycopg.Connection[Any], now: float, names: tuple[str, ...], limit: int
) -> list[ReadyWork]:
    """Return up to `limit` open workflows of `names` whose current step is ready at `now`
    (`agentq.store.ready.is_ready`, as SQL), in start order, skipping rows locked now."""
    if not names:
        return []
    params = ([key(n) for n in names], now, now, now, limit)
    return [
        ReadyWork(workflow_row(r), r[WORKFLOW_WIDTH], StepState(r[WORKFLOW_WIDTH + 1]))
        for r in conn.execute(_READY, params)
    ]
