"""`PostgresTx`: the rules' `Tx` over one open PostgreSQL transaction; rebuilding the projection.

Synchronous, over a `psycopg.Connection` (the async half, `agentq.store.postgres.store`, runs each
transaction on a worker thread; `agentq.store.postgres.connection` begins and commits it).
Concurrency is the database's, so the transaction takes its locks itself:

- `PostgresTx.load` locks the workflow's row (``SELECT … FOR UPDATE``), then reads it and
  its steps in one statement: every write verb reads its workflow first
  (`agentq.store.rules.tx.load_step`), so two verbs on one workflow take turns, and a claim is a
  compare-and-swap: the loser of a race reads the winner's committed lease and gets
  `HeldByOther`. A workflow not there yet is
  locked by id with ``pg_advisory_xact_lock`` and read again, so two `start_workflow` of one
  id create it once.
- `PostgresTx.append` takes the next sequence number from the one row of ``event_seq``
  (``UPDATE … RETURNING``): held until commit, that row lock orders commits as their
  sequence numbers and leaves no gap. Transactions on different workflows run at once up to
  their first event; from there they commit one at a time.
- The fencing check runs in the rule (`agentq.store.rules.attempt.fenced`) on the locked row,
  in the transaction that appends the event and writes the step; and the write itself is a
  compare-and-swap, ``UPDATE steps … WHERE lease_token = <the token read>``, which refuses
  (`LeaseLostError`, the transaction rolled back) if the row changed regardless.

Keys (ids, names, call keys) are sent as UTF-8 ``bytea`` (they may hold NUL) and read back as
`str` by the loader that `agentq.store.postgres.connection` registers on each connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentq.codec import dumps
from agentq.errors import LeaseLostError
from agentq.outcomes import ErrorInfo
from agentq.store.contract.rows import CallRow, StepRow, WorkflowRow, WorkflowState
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.rules.fence import CallFence, fence_of
from agentq.store.rules.tx import Draft, describe_step
from agentq.store.sql import schedules as sql_schedules
from agentq.store.sql.kept import KeptRows
from agentq.store.sql.reads import Dialect
from agentq.store.sql.rows import (
    CALL_COLUMNS,
    EVENT_TABLE_COLUMNS,
    STEP_COLUMNS,
    WORKFLOW_SELECT,
    WORKFLOW_WIDTH,
    call_row,
    rewrite_projection,
    step_row,
    workflow_row,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["DIALECT", "PostgresTx", "key", "rebuild"]



def key(value: str | None) -> bytes | None:
    """A key as the ``bytea`` parameter it is stored as (UTF-8), or None."""
    return None if value is None else value.encode("utf-8")


_MESSAGES = Dialect("%s", key=key)
"""The dialect of the ``messages`` and ``end_hooks`` statements (`agentq.store.sql.messages`,
`agentq.store.sql.hooks`)."""


def _json(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, ErrorInfo):
        return dumps(value.to_dict())
    return dumps(value)


DIALECT = Dialect(
    "%s",
    key=key,
    last_seq_sql="SELECT last_seq FROM event_seq",
    names_one_param=True,
    ready_lock=" FOR UPDATE OF w SKIP LOCKED",
)
"""How PostgreSQL's queries differ from SQLite's (`agentq.store.sql.reads.Dialect`)."""

_LOCK = "SELECT 1 FROM workflows WHERE workflow_id = %s FOR UPDATE"
_LOCK_ID = "SELECT pg_advisory_xact_lock(hashtextextended(encode(%s, 'hex'), 17))"
# The workflow row and its steps first..last, in one statement, once the row is locked. Not
# "FOR UPDATE OF w" here: after waiting for the lock, READ COMMITTED would recheck the locked
# row alone and join it with the step rows of before the wait.
_LOAD = (
    WORKFLOW_SELECT.replace(" FROM workflows", ", "
    + ", ".join(f"s.{c.strip()}" for c in STEP_COLUMNS.split(",")) + " FROM workflows")
    + " LEFT JOIN steps AS s ON s.workflow_id = w.workflow_id AND s.step_index BETWEEN %s AND %s"
    " WHERE w.workflow_id = %s ORDER BY s.step_index"
)
_APPEND = (
    "WITH n AS (UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq) "
    "INSERT INTO events (seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, "
    "data) SELECT n.last_seq, %s, %s, %s, %s, %s, %s, %s, %s FROM n RETURNING seq"
)
_STEP_VALUES = (
    "state, attempt, worker_id, lease_token, lease_expires_at, output, reason, error, "
    "resume_input, resumed, retry_at, started_at, finished_at, recoveries, wait_key, "
    "wait_details, wait_deadline"
)
_INSERT_STEP = (
    f"INSERT INTO steps (workflow_id, step_index, step_name, {_STEP_VALUES}) VALUES "
    f"({', '.join(['%s'] * 20)})"
)
_UPDATE_STEP = (
    "UPDATE steps SET " + ", ".join(f"{c.strip()} = %s" for c in _STEP_VALUES.split(","))
    + " WHERE workflow_id = %s AND step_index = %s AND lease_token = %s"
)
_LOAD_CALLS = f"SELECT {CALL_COLUMNS} FROM calls WHERE workflow_id = %s ORDER BY first_seq"
_LOAD_CALL = f"SELECT {CALL_COLUMNS} FROM calls WHERE workflow_id = %s AND call_key = %s"
_LOAD_CALLS = f"SELECT {CALL_COLUMNS} FROM calls WHERE workflow_id = %s ORDER BY first_seq"
_INSERT_CALL = f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({', '.join(['%s'] * 21)})"
_UPDATE_CALL = (
    "UPDATE calls SET "
    + ", ".join(f"{c.strip()} = %s" for c in CALL_COLUMNS.split(",")[2:-1])
    + " WHERE first_seq = %s"
)


class PostgresTx(KeptRows):
    """The rules' `Tx` over a `psycopg.Connection` inside an open transaction (the messages
    and end-hook outbox methods: `KeptRows`)."""

    kept_dialect = _MESSAGES
    hook_lock = " FOR UPDATE SKIP LOCKED"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn: psycopg.Connection[Any] = conn
        self._locked: set[str] = set()  # workflows whose row this transaction locked
        # The fencing token of each step row as read: an update is conditional on it.
        self._tokens: dict[tuple[str, int], int] = {}
        # (state, reason) of the workflows read: an update that changes neither is skipped.
        self._states: dict[str, tuple[WorkflowState, str | None]] = {}

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        wid = key(workflow_id)
        if workflow_id not in self._locked:
            if self.conn.execute(_LOCK, (wid,)).fetchone() is None:
                # Not there (yet): serialize the creators of this id, then lock again (READ
                # COMMITTED: a new statement sees a row committed while we waited).
                self.conn.execute(_LOCK_ID, (wid,))
                self.conn.execute(_LOCK, (wid,))
            self._locked.add(workflow_id)
        rows = self.conn.execute(_LOAD, (first, last, wid)).fetchall()
        if not rows:
            return None, {}
        wf = workflow_row(rows[0])
        self._states[workflow_id] = (wf.state, wf.reason)
        steps: dict[int, StepRow] = {}
        for r in rows:
            if r[WORKFLOW_WIDTH] is not None:
                row = step_row(r[WORKFLOW_WIDTH:])
                steps[row.step_index] = row
                self._tokens[(workflow_id, row.step_index)] = row.lease_token
        return wf, steps

    def append(self, draft: Draft) -> int:
        r = self.conn.execute(
            _APPEND,
            (
                draft.at,
                key(draft.workflow_id),
                draft.step_index,
                key(draft.step_name),
                str(draft.kind),
                draft.attempt,
                key(draft.worker_id),
                draft.data_json,
            ),
        ).fetchone()
        assert r is not None
        return int(r[0])

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        state = (row.state, row.reason)
        if started_seq is None:
            if self._states.get(row.workflow_id) != state:
                self.conn.execute(
                    "UPDATE workflows SET state = %s, reason = %s WHERE workflow_id = %s",
                    (str(row.state), row.reason, key(row.workflow_id)),
                )
                self._states[row.workflow_id] = state
            return
        self._states[row.workflow_id] = state
        self.conn.execute(
            "INSERT INTO workflows (started_seq, workflow_id, state, step_names, input, "
            "reason, created_at, definition, deadline) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                started_seq,
                key(row.workflow_id),
                str(row.state),
                dumps(list(row.step_names)),
                _json(row.input) or "null",
                row.reason,
                row.created_at,
                key(row.definition),
                row.deadline,
            ),
        )

    def put_step(self, row: StepRow, new: bool) -> None:
        values = (
            str(row.state),
            row.attempt,
            key(row.worker_id),
            row.lease_token,
            row.lease_expires_at,
            _json(row.output),
            row.reason,
            _json(row.error),
            _json(row.resume_input),
            bool(row.resumed),
            row.retry_at,
            row.started_at,
            row.finished_at,
            row.recoveries,
            key(row.wait_key),
            _json(row.wait_details),
            row.wait_deadline,
        )
        if new:
            head = (key(row.workflow_id), row.step_index, key(row.step_name))
            self.conn.execute(_INSERT_STEP, (*head, *values))
        else:
            where = (row.workflow_id, row.step_index)
            token = self._tokens.get(where)
            if token is None:  # pragma: no cover - every rule reads the steps it writes
                raise AssertionError(f"PostgresTx: step {where!r} written but never read")
            changed = self.conn.execute(
                _UPDATE_STEP, (*values, key(row.workflow_id), row.step_index, token)
            ).rowcount
            if changed != 1:  # the row lock should make this impossible: refuse, roll back
                raise LeaseLostError(
                    f"{describe_step(row.workflow_id, row.step_index, row.step_name)}: its "
                    f"fencing token is no longer #{token} (changed under this transaction)"
                )
        self._tokens[(row.workflow_id, row.step_index)] = row.lease_token

    def load_call(self, workflow_id: str, key_: str) -> CallRow | None:
        r = self.conn.execute(_LOAD_CALL, (key(workflow_id), key(key_))).fetchone()
        return None if r is None else call_row(r)

    def load_fence(self, workflow_id: str, index: int, call_key: str) -> CallFence | None:
        wf, steps = self.load(workflow_id, index, index)  # locks the workflow's row first
        return fence_of(wf, steps, index, self.load_call(workflow_id, call_key))

    def touch_workflow(self, workflow_id: str, at: float, seq: int) -> None:
        """Nothing to write: a workflow's ``updated_at`` and ``last_seq`` are read from its
        latest event (`agentq.store.sql.rows.WORKFLOW_SELECT`)."""

    def load_calls(self, workflow_id: str) -> list[CallRow]:
        return [call_row(r) for r in self.conn.execute(_LOAD_CALLS, (key(workflow_id),))]

    def put_call(self, row: CallRow, new: bool) -> None:
        values = (
            str(row.kind),
            row.step_index,
            str(row.state),
            key(row.fingerprint),
            key(row.lane),
            row.attempt,
            _json(row.label),
            _json(row.usage),
            _json(row.output),
            row.reason,
            _json(row.error),
            _json(row.details),
            row.deadline,
            row.started_at,
            row.finished_at,
            row.duration,
            row.runs,
            row.last_seq,
        )
        if new:
            self.conn.execute(
                _INSERT_CALL, (key(row.workflow_id), key(row.key), *values, row.first_seq)
            )
        else:
            self.conn.execute(_UPDATE_CALL, (*values, row.first_seq))

    def load_schedule(self, name: str) -> ScheduleRow | None:
        return sql_schedules.load_schedule(self.conn, DIALECT, name, " FOR UPDATE")

    def put_schedule(self, row: ScheduleRow) -> None:
        sql_schedules.put_schedule(self.conn, DIALECT, row)

    def delete_schedule(self, name: str) -> bool:
        return sql_schedules.delete_schedule(self.conn, DIALECT, name)



def rebuild(tx: PostgresTx) -> None:
    """Recompute the ``workflows``, ``steps``, ``calls`` and ``messages`` tables from the log
    (inside a transaction, which first locks the projection tables against every other writer)."""
    conn = tx.conn
    conn.execute("LOCK TABLE workflows, steps, calls, messages, event_seq IN EXCLUSIVE MODE")
    cursor = conn.execute(f"SELECT {EVENT_TABLE_COLUMNS} FROM events ORDER BY seq")
    rewrite_projection(conn.execute, cursor.fetchall(), tx)
