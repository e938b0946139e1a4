"""Transactions on SQLite's own thread: the write lock, the rules' `Tx`, a batch's transaction.

Everything here is synchronous and runs on the connection's thread (the async half,
`agentq.store.sqlite.store`, ships each call there in one hop): `begin` takes the write lock with
``BEGIN IMMEDIATE`` (retried while another connection holds it); `SqliteTx` is the rules' `Tx`
over a `sqlite3.Connection`; `rebuild` rewrites the projection tables from the log. A batch's
transaction around the rules is `agentq.store.sqlite.transact`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from agentq.codec import dumps
from agentq.outcomes import ErrorInfo
from agentq.store.contract.rows import CallRow, StepRow, WorkflowRow, WorkflowState
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.rules.fence import CallFence, StepLease
from agentq.store.rules.tx import Draft
from agentq.store.sql import schedules as sql_schedules
from agentq.store.sql.kept import KeptRows
from agentq.store.sql.reads import JSON_ARROWS, Dialect
from agentq.store.sql.rows import (
    CALL_COLUMNS,
    EVENT_TABLE_COLUMNS,
    STEP_COLUMNS,
    STEP_STATES,
    WORKFLOW_SELECT,
    WORKFLOW_STATES,
    WORKFLOW_WIDTH,
    call_row,
    rewrite_projection,
    step_names,
    step_row,
    workflow_row,
)
from agentq.store.sqlite.binds import Sparse

__all__ = [
    "BEGIN_ATTEMPTS",
    "DIALECT",
    "SqliteTx",
    "begin",
    "is_busy",
    "rebuild",
    "rollback",
]

_MESSAGES = Dialect("?")
"""The dialect of the ``messages`` and ``end_hooks`` statements (`agentq.store.sql.messages`,
`agentq.store.sql.hooks`)."""

DIALECT = Dialect(
    "?",
    # The log's sequence numbers are AUTOINCREMENT: never handed out again, even once a sweep
    # deleted the latest events; the highest one handed out is in sqlite_sequence.
    last_seq_sql="SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)",
    json_arrows=JSON_ARROWS,
)
"""How SQLite's queries differ from PostgreSQL's (`agentq.store.sql.reads.Dialect`)."""

BEGIN_ATTEMPTS = 4
"""How many times ``BEGIN IMMEDIATE`` is tried, each waiting up to the busy timeout."""

def is_busy(exc: sqlite3.Error) -> bool:
    """Whether `exc` is SQLITE_BUSY or SQLITE_LOCKED ("database is locked")."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    return "locked" in str(exc) or "busy" in str(exc)


def begin(conn: sqlite3.Connection | sqlite3.Cursor, wait: bool = True) -> bool:
    """``BEGIN IMMEDIATE`` (take the write lock now), retried while the database is busy.

    Each try already waits up to the connection's busy timeout; a writer that holds the lock
    longer than `BEGIN_ATTEMPTS` busy timeouts makes this raise the last error. Without
    `wait`, one try: False if the database is busy (nothing begun).

    Returns:
        True once the transaction has begun.
    """
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if is_busy(exc) and not wait:
                return False
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def rollback(conn: sqlite3.Connection) -> None:
    """``ROLLBACK`` the transaction in progress, if any (SQLite may have rolled back already)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# ---------------------------------------------------------------- the rules' Tx

_KEPT_TYPES = (dict, list, ErrorInfo)  # a tuple: isinstance of a union costs ~3x in 3.11

_LOAD = (
    WORKFLOW_SELECT.replace(" FROM workflows", ", "
    + ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(",")) + " FROM workflows")
    + " LEFT JOIN steps AS s ON s.workflow_id = w.workflow_id AND s.step_index BETWEEN ? AND ?"
    " WHERE w.workflow_id = ? ORDER BY s.step_index"
)


class SqliteTx(KeptRows):
    """The rules' `Tx` over a `sqlite3.Connection` inside an open transaction (the messages
    and end-hook outbox methods: `KeptRows`)."""

    kept_dialect = _MESSAGES

    def __init__(self, conn: sqlite3.Connection, cur: sqlite3.Cursor | None = None) -> None:
        self.conn: sqlite3.Connection = conn
        # One cursor for the statements whose rows are read at once (each `execute` resets
        # the last): a cursor made and freed per statement costs ~1k instructions.
        self.cur: sqlite3.Cursor = conn.cursor() if cur is None else cur
        # JSON text of the values read in this transaction, by id(value): a row written back
        # unchanged does not encode its (possibly large) output again.
        self._texts: dict[int, tuple[Any, str]] = {}
        # (state, reason) of the workflows read: an update that changes neither is skipped.
        self._states: dict[str, tuple[WorkflowState, str | None]] = {}

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        wf: WorkflowRow | None = None
        steps: dict[int, StepRow] = {}
        for r in self.cur.execute(_LOAD, (first, last, workflow_id)):
            wf = self._rows(r, wf, steps)
        return wf, steps

    def load_fence(self, workflow_id: str, index: int, key: str) -> CallFence | None:
        r = self.cur.execute(_LOAD_FENCE, (index, key, workflow_id)).fetchone()
        if r is None:
            return None
        lease = None if r[3] is None else StepLease(
            index, r[3], STEP_STATES[r[4]], r[5], r[6], r[7]
        )
        # The ids matched the arguments exactly (binary collation): not read back.
        call = (
            None if r[_FENCE_WIDTH] is None
            else self._call((workflow_id, key, *r[_FENCE_WIDTH:]))
        )
        return CallFence(workflow_id, WORKFLOW_STATES[r[0]], r[1], step_names(r[2]), lease, call)

    def touch_workflow(self, workflow_id: str, at: float, seq: int) -> None:
        """Nothing to write: a workflow's ``updated_at`` and ``last_seq`` are read from its
        latest event (`agentq.store.sql.rows.WORKFLOW_SELECT`)."""

    def _rows(self, r: Any, wf: WorkflowRow | None, steps: dict[int, StepRow]) -> WorkflowRow:
        """Read one row of `_LOAD`: the workflow (if `wf` is None yet) and its step, into
        `steps`; return the workflow's row."""
        if wf is None:
            wf = workflow_row(r)
            self._states[wf.workflow_id] = (wf.state, wf.reason)
        if r[WORKFLOW_WIDTH] is not None:
            step = r[WORKFLOW_WIDTH:]
            row = step_row(step)
            self._remember(row.output, step[8])
            self._remember(row.error, step[10])
            self._remember(row.resume_input, step[11])
            steps[row.step_index] = row
        return wf

    def _remember(self, value: Any, text: str | None) -> None:
        """Keep the JSON `text` a value was read from (or written as), for `_json`."""
        if text is not None and isinstance(value, _KEPT_TYPES):
            self._texts[id(value)] = (value, text)

    def _call(self, r: Any) -> CallRow:
        row = call_row(r)
        if r[8] is not None:
            self._remember(row.label, r[8])
        if r[9] is not None:
            self._remember(row.usage, r[9])
        if r[10] is not None:
            self._remember(row.output, r[10])
        return row

    def append(self, draft: Draft) -> int:
        seq = self.cur.execute(
            "INSERT INTO events (at, workflow_id, step_index, step_name, kind, attempt, "
            "worker_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                draft.at,
                draft.workflow_id,
                draft.step_index,
                draft.step_name,
                draft.kind._value_,  # a plain str binds at once (`binds`)
                draft.attempt,
                draft.worker_id,
                draft.data_json,
            ),
        ).lastrowid
        assert seq is not None
        for value, text in draft.texts:
            self._remember(value, text)
        return seq

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        state = (row.state, row.reason)
        if started_seq is None:
            if self._states.get(row.workflow_id) != state:
                self.cur.execute(
                    "UPDATE workflows SET state = ?, reason = ? WHERE workflow_id = ?",
                    (row.state._value_, row.reason, row.workflow_id),
                )
        else:
            self.cur.execute(
                "INSERT INTO workflows (started_seq, workflow_id, state, step_names, input, "
                "reason, created_at, definition, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    started_seq,
                    row.workflow_id,
                    row.state._value_,
                    dumps(list(row.step_names)),
                    self._json(row.input) or "null",
                    row.reason,
                    row.created_at,
                    row.definition,
                    row.deadline,
                ),
            )
        self._states[row.workflow_id] = state

    def _json(self, value: Any) -> str | None:
        if value is None:
            return None
        known = self._texts.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if isinstance(value, ErrorInfo):
            return dumps(value.to_dict())
        return dumps(value)

    def put_step(self, row: StepRow, new: bool) -> None:
        values = (
            row.state._value_,
            row.attempt,
            row.worker_id,
            row.lease_token,
            row.lease_expires_at,
            self._json(row.output),
            row.reason,
            self._json(row.error),
            self._json(row.resume_input),
            int(row.resumed),
            row.retry_at,
            row.started_at,
            row.finished_at,
            row.recoveries,
            row.wait_key,
            self._json(row.wait_details),
            row.wait_deadline,
        )
        if new:
            _INSERT_STEP.execute(
                self.cur, (row.workflow_id, row.step_index, row.step_name, *values)
            )
        else:
            _UPDATE_STEP.execute(self.cur, (*values, row.workflow_id, row.step_index))

    def load_call(self, workflow_id: str, key: str) -> CallRow | None:
        r = self.cur.execute(_LOAD_CALL, (workflow_id, key)).fetchone()
        return None if r is None else self._call(r)

    def load_calls(self, workflow_id: str) -> list[CallRow]:
        return [call_row(r) for r in self.conn.execute(_LOAD_CALLS, (workflow_id,))]

    def put_call(self, row: CallRow, new: bool) -> None:
        json_text = self._json  # each JSON column: None (NULL) without a call
        label, usage, output, error, details = (
            row.label, row.usage, row.output, row.error, row.details
        )
        values = (
            row.kind._value_,
            row.step_index,
            row.state._value_,
            row.fingerprint,
            row.lane,
            row.attempt,
            None if label is None else json_text(label),
            None if usage is None else json_text(usage),
            None if output is None else json_text(output),
            row.reason,
            None if error is None else json_text(error),
            None if details is None else json_text(details),
            row.deadline,
            row.started_at,
            row.finished_at,
            row.duration,
            row.runs,
            row.last_seq,
        )
        if new:
            _INSERT_CALL.execute(self.cur, (row.workflow_id, row.key, *values, row.first_seq))
        else:
            _UPDATE_CALL.execute(self.cur, (*values, row.workflow_id, row.key))

    def load_schedule(self, name: str) -> ScheduleRow | None:
        return sql_schedules.load_schedule(self.conn, DIALECT, name)

    def put_schedule(self, row: ScheduleRow) -> None:
        sql_schedules.put_schedule(self.conn, DIALECT, row)

    def delete_schedule(self, name: str) -> bool:
        return sql_schedules.delete_schedule(self.conn, DIALECT, name)



def _marks(columns: str) -> str:
    return ", ".join("?" for _ in columns.split(","))


_LOAD_FENCE = (
    "SELECT w.state, w.reason, w.step_names, s.step_name, s.state, s.worker_id,"
    " s.lease_token, s.lease_expires_at, "
    + ", ".join(f"c.{c.strip()}" for c in CALL_COLUMNS.split(",")[2:])
    + " FROM workflows AS w"
    " LEFT JOIN steps AS s ON s.workflow_id = w.workflow_id AND s.step_index = ?"
    " LEFT JOIN calls AS c ON c.workflow_id = w.workflow_id AND c.call_key = ?"
    " WHERE w.workflow_id = ?"
)
"""The workflow's state, its step's lease and the call row of a key (`SqliteTx.load_fence`)."""
_FENCE_WIDTH = 8
"""Where the call row's columns (after its workflow id and key) start in a row of
`_LOAD_FENCE`."""
_INSERT_STEP = Sparse(f"INSERT INTO steps ({STEP_COLUMNS}) VALUES ({_marks(STEP_COLUMNS)})")
_UPDATE_STEP = Sparse(
    "UPDATE steps SET state = ?, attempt = ?, worker_id = ?, lease_token = ?, "
    "lease_expires_at = ?, output = ?, reason = ?, error = ?, resume_input = ?, "
    "resumed = ?, retry_at = ?, started_at = ?, finished_at = ?, recoveries = ?, "
    "wait_key = ?, wait_details = ?, wait_deadline = ? "
    "WHERE workflow_id = ? AND step_index = ?"
)
_LOAD_CALL = f"SELECT {CALL_COLUMNS} FROM calls WHERE workflow_id = ? AND call_key = ?"
_LOAD_CALLS = f"SELECT {CALL_COLUMNS} FROM calls WHERE workflow_id = ? ORDER BY first_seq"
_INSERT_CALL = Sparse(f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({_marks(CALL_COLUMNS)})")
_UPDATE_CALL = Sparse(
    "UPDATE calls SET "
    + ", ".join(f"{c.strip()} = ?" for c in CALL_COLUMNS.split(",")[2:-1])
    + " WHERE workflow_id = ? AND call_key = ?"
)
"""A call row's update, by its primary key (``first_seq`` never changes)."""


def rebuild(tx: SqliteTx) -> None:
    """Recompute the ``workflows``, ``steps``, ``calls`` and ``messages`` tables from the log
    (inside a transaction)."""
    conn = tx.conn
    cursor = conn.execute(f"SELECT {EVENT_TABLE_COLUMNS} FROM events ORDER BY seq")
    rewrite_projection(conn.execute, cursor, tx)
