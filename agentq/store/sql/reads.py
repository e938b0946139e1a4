"""The read side of the SQL stores as queries: one function per read verb, for both dialects.

`SqliteStore` and `PostgresStore` keep the same tables, column lists and JSON text, so their
reads are the same queries; a `Dialect` names what differs (the placeholder, how a key is
passed, the last sequence number, the ready query's list of names and its row locks, and
whether JSON members are extracted in SQL). Each function takes the raw connection
(``sqlite3.Connection`` or ``psycopg.Connection``) and runs on the store's thread; the async
half (`agentq.store.sql.verbs`) ships it there after every write submitted before it. Query
texts are built once per dialect, so each driver's statement cache finds them again.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentq.events import Event, EventKind
from agentq.store.contract.claims import Execution, execution_of, lease_of
from agentq.store.contract.ready import ReadyWork
from agentq.store.contract.rows import (
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
from agentq.store.sql.rows import (
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
    "Connection",
    "Dialect",
    "calls",
    "event_rows",
    "expired_leases",
    "live_leases",
    "get_workflow",
    "last_seq",
    "load_events",
    "ready_workflows",
    "step_rows",
    "workflows",
]


class Connection(Protocol):
    """What a query needs of a connection: ``execute(sql, params)`` returning a cursor."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any:
        """Run one statement; return its cursor (iterable, with ``fetchone``)."""


JSON_ARROWS = sqlite3.sqlite_version_info >= (3, 38, 0)
"""Whether this SQLite has the ``->`` and ``->>`` operators (else rows are built in Python)."""


def _same(value: str | None) -> Any:
    return value


@dataclass(frozen=True)
class Dialect:
    """What differs between the SQL stores' queries.

    Attributes:
        placeholder: ``"?"`` (sqlite3) or ``"%s"`` (psycopg); queries are written with ``?``.
        key: A key (workflow id, definition name) as its query parameter.
        last_seq_sql: The query of the highest sequence number (one row, one column, or none).
        names_one_param: True: the ready query takes its definition names as one array
            parameter (``= ANY(%s)``); False: one placeholder each (``IN (?, ?)``).
        ready_lock: Appended to the ready query's inner select (row locks), or "".
        json_arrows: Whether `event_rows` extracts JSON members in SQL (`JSON_ARROWS`).
    """

    placeholder: str
    key: Callable[[str | None], Any] = _same
    last_seq_sql: str = "SELECT coalesce(max(seq), 0) FROM events"
    names_one_param: bool = False
    ready_lock: str = ""
    json_arrows: bool = False
    _texts: dict[str, str] = field(default_factory=dict, init=False, compare=False, repr=False)

    def sql(self, text: str) -> str:
        """The query `text` (written with ``?``) in this dialect, the same object each time."""
        found = self._texts.get(text)
        if found is None:
            found = self._texts[text] = text.replace("?", self.placeholder)
        return found


def get_workflow(conn: Connection, d: Dialect, workflow_id: str) -> WorkflowRow | None:
    """Return one workflow's row, or None."""
    sql = d.sql(f"{WORKFLOW_SELECT} WHERE w.workflow_id = ?")
    r = conn.execute(sql, (d.key(workflow_id),)).fetchone()
    return None if r is None else workflow_row(r)


def workflows(conn: Connection, d: Dialect, state: WorkflowState | None) -> list[WorkflowRow]:
    """Return workflows (optionally in `state`) in start order."""
    if state is None:
        cursor = conn.execute(f"{WORKFLOW_SELECT} ORDER BY w.started_seq")
    else:
        sql = d.sql(f"{WORKFLOW_SELECT} WHERE w.state = ? ORDER BY w.started_seq")
        cursor = conn.execute(sql, (state.value,))
    return [workflow_row(r) for r in cursor]


_ALL_STEPS = (
    "SELECT " + ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(","))
    + " FROM steps AS s JOIN workflows AS w USING (workflow_id) "
    "ORDER BY w.started_seq, s.step_index"
)


def step_rows(conn: Connection, d: Dialect, workflow_id: str | None) -> list[StepRow]:
    """Return the step rows of one workflow, or of all in start order, by step index."""
    if workflow_id is None:
        cursor = conn.execute(_ALL_STEPS)
    else:
        sql = d.sql(f"SELECT {STEP_COLUMNS} FROM steps WHERE workflow_id = ? ORDER BY step_index")
        cursor = conn.execute(sql, (d.key(workflow_id),))
    return [step_row(r) for r in cursor]


def calls(
    conn: Connection, d: Dialect, workflow_id: str | None, step_index: int | None
) -> list[CallRow]:
    """Return the call rows of one workflow (or all), optionally of one step, by first_seq."""
    where: list[str] = []
    params: list[Any] = []
    if workflow_id is not None:
        where.append("workflow_id = ?")
        params.append(d.key(workflow_id))
    if step_index is not None:
        where.append("step_index = ?")
        params.append(step_index)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = d.sql(f"SELECT {CALL_COLUMNS} FROM calls{clause} ORDER BY first_seq")
    return [call_row(r) for r in conn.execute(sql, params)]


def expired_leases(conn: Connection, d: Dialect, now: float) -> list[Execution]:
    """Return the leases with ``expires_at < now``, oldest first."""
    sql = d.sql(
        f"SELECT {STEP_COLUMNS} FROM steps WHERE state = 'leased' AND lease_expires_at < ? "
        "ORDER BY lease_expires_at, workflow_id, step_index"
    )
    return [execution_of(step_row(r)) for r in conn.execute(sql, (now,))]


_S_COLUMNS = ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(","))

# The leases, then the fences of revoked leases on the pending steps of running workflows
# (``steps_by_lease_expiry`` and ``workflows_by_state``: no scan of the steps).
_LIVE = (
    f"SELECT {STEP_COLUMNS} FROM steps WHERE state = 'leased' AND lease_expires_at >= ? "
    "AND substr(worker_id, 1, length(?)) = ? UNION ALL "
    f"SELECT {_S_COLUMNS} FROM workflows AS w JOIN steps AS s USING (workflow_id) "
    "WHERE w.state = 'running' AND s.state = 'pending' AND s.lease_expires_at >= ? "
    "AND substr(s.worker_id, 1, length(?)) = ? "
    "ORDER BY lease_expires_at, workflow_id, step_index"
)


def live_leases(conn: Connection, d: Dialect, now: float, prefix: str) -> list[Execution]:
    """Return the leases with ``now <= expires_at`` whose worker id starts with `prefix`, and
    the fences of revoked leases on pending steps of running workflows (`lease_of`), by
    expiry (``substr``, not ``LIKE``: a host name's ``_`` is no wildcard)."""
    key = d.key(prefix)
    cursor = conn.execute(d.sql(_LIVE), (now, key, key, now, key, key))
    return [lease_of(step_row(r)) for r in cursor]


def _where(d: Dialect, workflow_id: str | None, after_seq: int) -> tuple[str, tuple[Any, ...]]:
    if workflow_id is None:
        return "seq > ?", (after_seq,)
    return "workflow_id = ? AND seq > ?", (d.key(workflow_id), after_seq)


def load_events(
    conn: Connection, d: Dialect, workflow_id: str | None, after_seq: int, limit: int | None
) -> list[Event]:
    """Return events after `after_seq` (of one workflow, or all), by seq."""
    where, params = _where(d, workflow_id, after_seq)
    sql = f"SELECT {EVENT_TABLE_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    if limit is not None:
        sql, params = f"{sql} LIMIT ?", (*params, limit)
    return [event_of(r) for r in conn.execute(d.sql(sql), params)]


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
    "THEN data -> '$.label' END, "
    "COALESCE(data ->> '$.forked_from', "
    f"CASE WHEN kind = '{EventKind.WORKFLOW_FORKED.value}' THEN data ->> '$.parent' END) "
    "FROM events WHERE {where} ORDER BY seq"
)


def event_rows(
    conn: Connection, d: Dialect, workflow_id: str | None, after_seq: int
) -> list[tuple[Any, ...]]:
    """Return events as tuples in `EVENT_COLUMNS` order: the JSON members extracted in SQL
    where the dialect can (`Dialect.json_arrows`), else built by `event_row`, byte for byte the
    same text."""
    if d.json_arrows:
        where, params = _where(d, workflow_id, after_seq)
        return list(conn.execute(d.sql(_EVENT_ROWS_SQL.format(where=where)), params).fetchall())
    return [event_row(e) for e in load_events(conn, d, workflow_id, after_seq, None)]


def last_seq(conn: Connection, d: Dialect) -> int:
    """Return the highest sequence number (0 when the log is empty)."""
    r = conn.execute(d.last_seq_sql).fetchone()
    return 0 if r is None else int(r[0])


# `agentq.store.contract.ready.is_ready` as SQL; {names} is the definitions' list, {steps}
# each one's step names (``WHEN name THEN json``: an instance started with other steps is
# not listed), {lock} the dialect's row locks (PostgreSQL: FOR UPDATE SKIP LOCKED, a claim in
# flight is left to it).
_READY = (
    "WITH ready AS (SELECT w.workflow_id AS wid, s.step_index AS idx, s.state AS sstate,"
    " w.started_seq AS started FROM workflows AS w JOIN steps AS s"
    " ON s.workflow_id = w.workflow_id AND s.step_index = (SELECT min(step_index) FROM steps"
    " WHERE workflow_id = w.workflow_id AND state <> 'completed')"
    " WHERE w.definition {names} AND w.step_names = CASE w.definition {steps} END"
    " AND w.state IN ('running', 'waiting') AND (w.deadline <= ?"
    " OR (w.state = 'running' AND s.state = 'pending' AND (s.retry_at IS NULL OR s.retry_at <= ?)"
    " AND (s.lease_expires_at IS NULL OR s.lease_expires_at < ?))"  # not fenced (is_ready)
    " OR (w.state = 'running' AND s.state = 'leased' AND s.lease_expires_at < ?)"
    " OR (w.state = 'waiting' AND s.state = 'waiting' AND s.wait_deadline <= ?))"
    " ORDER BY w.started_seq LIMIT ?{lock}) "
    + WORKFLOW_SELECT.replace(
        " FROM workflows AS w",
        ", r.idx, r.sstate FROM ready AS r JOIN workflows AS w ON w.workflow_id = r.wid",
    )
    + " ORDER BY r.started"
)


def ready_workflows(
    conn: Connection, d: Dialect, now: float, served: dict[str, tuple[str, ...]], limit: int
) -> list[ReadyWork]:
    """Return up to `limit` open workflows of the definitions `served` (name -> step names)
    started with those steps, whose current step is ready at `now`
    (`agentq.store.contract.ready.is_ready`, as SQL), in start order (skipping rows locked now where
    the dialect locks)."""
    if not served:
        return []
    keys = [d.key(n) for n in served]
    cases = [p for n, key in zip(served.values(), keys, strict=True) for p in (key, _names(n))]
    steps = " ".join(["WHEN ? THEN ?"] * len(keys))
    if d.names_one_param:
        among, params = "= ANY(?)", (keys, *cases, now, now, now, now, now, limit)
    else:
        among = f"IN ({', '.join('?' * len(keys))})"
        params = (*keys, *cases, now, now, now, now, now, limit)
    sql = d.sql(_READY.format(names=among, steps=steps, lock=d.ready_lock))
    return [
        ReadyWork(workflow_row(r), r[WORKFLOW_WIDTH], StepState(r[WORKFLOW_WIDTH + 1]))
        for r in conn.execute(sql, params)
    ]


def _names(steps: tuple[str, ...]) -> str:
    """Step names as the stores write them into ``workflows.step_names`` (compact JSON)."""
    return json.dumps(list(steps), ensure_ascii=False, separators=(",", ":"))
