"""The synchronous half of `SqliteStore`: everything that runs on the connection's thread.

Schema migrations, the rules' `Tx` over a `sqlite3.Connection`, one group-commit
transaction for a batch of verbs, and the read queries. Nothing here touches asyncio; the
async half (`agentq.store.sqlite`) ships these functions to aiosqlite's thread, one call each.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from agentq.codec import decode
from agentq.errors import SchemaError, StoreError
from agentq.events import Event, EventKind, utc
from agentq.outcomes import ErrorInfo
from agentq.store.base import Execution, StepRow, StepState, WorkflowRow, WorkflowState
from agentq.store.projection import INPUT_KINDS, REASON_KINDS, event_row, execution_of, replay
from agentq.store.rules import Draft

__all__ = [
    "SCHEMA_VERSION",
    "SqliteTx",
    "begin",
    "migrate",
    "migrations",
    "rebuild",
    "transact",
]

_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

BEGIN_ATTEMPTS = 4
"""How many times ``BEGIN IMMEDIATE`` is tried, each waiting up to the busy timeout."""

Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)`` for one verb of a batch."""


# ---------------------------------------------------------------- schema


def migrations() -> list[list[str]]:
    """Return the statements of each migration in ``schema.sql``; index 0 is version 1."""
    text = resources.files("agentq.store").joinpath("schema.sql").read_text("utf-8")
    out: list[list[str]] = []
    statement = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("-- migration "):
            if int(line.split()[2]) != len(out) + 1:
                raise SchemaError(f"schema.sql: migrations out of order at {line.strip()!r}")
            out.append([])
            continue
        if not out or (not statement and (not line.strip() or line.startswith("--"))):
            continue
        statement += line
        if sqlite3.complete_statement(statement):
            out[-1].append(statement.strip())
            statement = ""
    return out


_MIGRATIONS = migrations()
SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this agentq writes (``PRAGMA user_version``)."""


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether `exc` is SQLITE_BUSY or SQLITE_LOCKED ("database is locked")."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    return "locked" in str(exc) or "busy" in str(exc)


def begin(conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE`` (take the write lock now), retried while the database is busy.

    Each try already waits up to the connection's busy timeout; a writer that holds the lock
    longer than `BEGIN_ATTEMPTS` busy timeouts makes this raise the last error.
    """
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back on its own
            conn.execute("ROLLBACK")


def migrate(conn: sqlite3.Connection, name: str) -> None:
    """Bring the file to `SCHEMA_VERSION`, in one transaction.

    Raises:
        SchemaError: The file has a newer version than this agentq knows, or is not an
            agentq database that can be migrated.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    begin(conn)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may
        if version > SCHEMA_VERSION:  # have migrated while we waited for the lock
            raise SchemaError(
                f"{name} has schema version {version}; this agentq reads versions up to "
                f"{SCHEMA_VERSION}: upgrade agentq"
            )
        if version == 0:
            foreign = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
            ]
            if foreign:
                raise SchemaError(
                    f"{name} is not an agentq database (it has tables {sorted(foreign)[:5]} "
                    "and no agentq schema version); refusing to add agentq's tables to it"
                )
        for statements in _MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        _rollback(conn)
        raise SchemaError(
            f"cannot migrate {name} from schema version {version} to {SCHEMA_VERSION}: {exc}"
        ) from exc
    except BaseException:
        _rollback(conn)
        raise


def prepare(conn: sqlite3.Connection, name: str, busy_ms: int, synchronous: str) -> str:
    """Set the pragmas of a new connection and migrate; return the journal mode in use."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
    mode = "?"
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            break
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    migrate(conn, name)
    return mode


# ---------------------------------------------------------------- rows

_STEP_COLUMNS = (
    "workflow_id, step_index, step_name, state, attempt, worker_id, lease_token, "
    "lease_expires_at, output, reason, error, resume_input, resumed, retry_at, started_at, "
    "finished_at"
)
_EVENT_COLUMNS = "seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, data"
# A workflow row: updated_at and last_seq come from its latest event (index seek).
_WORKFLOW_SELECT = (
    "SELECT w.workflow_id, w.state, w.step_names, w.input, w.reason, w.created_at, e.at, "
    "e.seq FROM workflows AS w JOIN events AS e ON e.seq = (SELECT seq FROM events WHERE "
    "workflow_id = w.workflow_id ORDER BY seq DESC LIMIT 1)"
)
_LOAD = (
    _WORKFLOW_SELECT.replace(" FROM workflows", ", "
    + ", ".join(f"s.{c.strip()}" for c in _STEP_COLUMNS.split(",")) + " FROM workflows")
    + " LEFT JOIN steps AS s ON s.workflow_id = w.workflow_id AND s.step_index BETWEEN ? AND ?"
    " WHERE w.workflow_id = ? ORDER BY s.step_index"
)
_WORKFLOW_STATES = {s.value: s for s in WorkflowState}
_STEP_STATES = {s.value: s for s in StepState}
_KINDS = {k.value: k for k in EventKind}
_NAMES: dict[str, tuple[str, ...]] = {}  # decoded step_names JSON, by text (few distinct)


def _names(text: str) -> tuple[str, ...]:
    names = _NAMES.get(text)
    if names is None:
        names = tuple(json.loads(text))
        if len(_NAMES) < 1024:
            _NAMES[text] = names
    return names


def workflow_row(r: Sequence[Any]) -> WorkflowRow:
    """Build a `WorkflowRow` from a row of `_WORKFLOW_SELECT`."""
    return WorkflowRow(
        r[0],
        _WORKFLOW_STATES[r[1]],
        _names(r[2]),
        None if r[3] == "null" else decode(r[3]),
        r[4],
        r[5],
        r[6],
        r[7],
    )


def _error(text: str | None) -> ErrorInfo | None:
    if text is None:
        return None
    value = json.loads(text)
    return ErrorInfo(value["type"], value["message"], value["traceback"])


def step_row(r: Sequence[Any]) -> StepRow:
    """Build a `StepRow` from a row of `_STEP_COLUMNS`."""
    return StepRow(
        r[0],
        r[1],
        r[2],
        _STEP_STATES[r[3]],
        r[4],
        r[5],
        r[6],
        r[7],
        None if r[8] is None else json.loads(r[8]),
        r[9],
        _error(r[10]),
        None if r[11] is None else json.loads(r[11]),
        bool(r[12]),
        r[13],
        r[14],
        r[15],
    )


def _event(r: Sequence[Any]) -> Event:
    return Event(r[0], utc(r[1]), _KINDS[r[5]], r[2], r[3], r[4], r[6], r[7], json.loads(r[8]))


class SqliteTx:
    """The rules' `Tx` over a `sqlite3.Connection` inside an open transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        # JSON text of the values read in this transaction, by id(value): a row written back
        # unchanged does not encode its (possibly large) output again.
        self._texts: dict[int, tuple[Any, str]] = {}
        # (state, reason) of the workflows read: an update that changes neither is skipped.
        self._states: dict[str, tuple[WorkflowState, str | None]] = {}

    def load(
        self, workflow_id: str, first: int = 0, last: int = -1
    ) -> tuple[WorkflowRow | None, dict[int, StepRow]]:
        wf, steps = None, {}
        for r in self.conn.execute(_LOAD, (first, last, workflow_id)):
            if wf is None:
                wf = workflow_row(r)
                self._states[wf.workflow_id] = (wf.state, wf.reason)
            if r[8] is None:
                continue
            row = step_row(r[8:])
            for value, text in ((row.output, r[16]), (row.error, r[18]), (row.resume_input, r[19])):
                if text is not None and isinstance(value, dict | list | ErrorInfo):
                    self._texts[id(value)] = (value, text)
            steps[row.step_index] = row
        return wf, steps

    def append(self, draft: Draft) -> Event:
        seq = self.conn.execute(
            "INSERT INTO events (at, workflow_id, step_index, step_name, kind, attempt, "
            "worker_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                draft.at,
                draft.workflow_id,
                draft.step_index,
                draft.step_name,
                draft.kind,
                draft.attempt,
                draft.worker_id,
                draft.data_json,
            ),
        ).lastrowid
        assert seq is not None
        return draft.event(seq)

    def put_workflow(self, row: WorkflowRow, started_seq: int | None) -> None:
        state = (row.state, row.reason)
        if started_seq is None:
            if self._states.get(row.workflow_id) != state:
                self.conn.execute(
                    "UPDATE workflows SET state = ?, reason = ? WHERE workflow_id = ?",
                    (row.state, row.reason, row.workflow_id),
                )
        else:
            self.conn.execute(
                "INSERT INTO workflows (started_seq, workflow_id, state, step_names, input, "
                "reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    started_seq,
                    row.workflow_id,
                    row.state,
                    _JSON.encode(list(row.step_names)),
                    self._json(row.input) or "null",
                    row.reason,
                    row.created_at,
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
            return _JSON.encode(value.to_dict())
        return _JSON.encode(value)

    def put_step(self, row: StepRow, new: bool) -> None:
        values = (
            row.state,
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
        )
        if new:
            self.conn.execute(
                f"INSERT INTO steps ({_STEP_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (row.workflow_id, row.step_index, row.step_name, *values),
            )
            return
        self.conn.execute(
            "UPDATE steps SET state = ?, attempt = ?, worker_id = ?, lease_token = ?, "
            "lease_expires_at = ?, output = ?, reason = ?, error = ?, resume_input = ?, "
            "resumed = ?, retry_at = ?, started_at = ?, finished_at = ? "
            "WHERE workflow_id = ? AND step_index = ?",
            (*values, row.workflow_id, row.step_index),
        )


# ---------------------------------------------------------------- transactions


def store_error(exc: BaseException) -> BaseException:
    """Wrap a sqlite3 error in `StoreError` (``__cause__`` set); return others unchanged."""
    if isinstance(exc, sqlite3.Error):
        wrapped = StoreError(f"SQLite failed: {exc}")
        wrapped.__cause__ = exc
        return wrapped
    return exc


def transact(conn: sqlite3.Connection, fns: Sequence[Callable[[SqliteTx], Any]]) -> list[Outcome]:
    """Run a batch of verbs in one ``BEGIN IMMEDIATE … COMMIT``; one outcome per verb.

    With more than one verb, each runs in its own SAVEPOINT: a verb that raises is rolled back
    alone and gets its exception; the others commit together. If the transaction itself fails
    (BEGIN, a savepoint, COMMIT), no verb is committed and each gets a `StoreError`, except
    those already refused, whose refusal stands.
    """
    outcomes: list[Outcome] = []
    single = len(fns) == 1
    try:
        begin(conn)
        for fn in fns:
            tx = SqliteTx(conn)
            if not single:
                conn.execute("SAVEPOINT agentq_verb")
            try:
                value = fn(tx)
            except Exception as exc:
                if single:
                    _rollback(conn)
                    return [(False, store_error(exc))]
                conn.execute("ROLLBACK TO agentq_verb")
                conn.execute("RELEASE agentq_verb")
                outcomes.append((False, store_error(exc)))
            else:
                if not single:
                    conn.execute("RELEASE agentq_verb")
                outcomes.append((True, value))
        conn.execute("COMMIT")
        return outcomes
    except BaseException as exc:
        _rollback(conn)
        failed = []
        for i in range(len(fns)):
            ok, value = outcomes[i] if i < len(outcomes) else (True, None)
            refused = not ok and not isinstance(value, StoreError)
            failed.append((False, value if refused else store_error(exc)))
        return failed


def read(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> Outcome:
    """Run a read queued in a batch (after its transaction); errors become outcomes."""
    try:
        return True, fn(conn)
    except Exception as exc:
        return False, store_error(exc)


def rebuild(tx: SqliteTx) -> None:
    """Recompute the ``workflows`` and ``steps`` tables from the log (inside a transaction)."""
    conn = tx.conn
    events = (_event(r) for r in conn.execute(f"SELECT {_EVENT_COLUMNS} FROM events ORDER BY seq"))
    rebuilt = replay(events)
    conn.execute("DELETE FROM steps")
    conn.execute("DELETE FROM workflows")
    for started_seq, rows in rebuilt:
        assert rows.workflow is not None
        tx.put_workflow(rows.workflow, started_seq)
        for index in sorted(rows.steps):
            tx.put_step(rows.steps[index], True)


# ---------------------------------------------------------------- reads


def get_workflow(conn: sqlite3.Connection, workflow_id: str) -> WorkflowRow | None:
    """Return one workflow's row, or None."""
    r = conn.execute(f"{_WORKFLOW_SELECT} WHERE w.workflow_id = ?", (workflow_id,)).fetchone()
    return None if r is None else workflow_row(r)


def workflows(conn: sqlite3.Connection, state: WorkflowState | None) -> list[WorkflowRow]:
    """Return workflows (optionally in `state`) in start order."""
    if state is None:
        cursor = conn.execute(f"{_WORKFLOW_SELECT} ORDER BY w.started_seq")
    else:
        cursor = conn.execute(
            f"{_WORKFLOW_SELECT} WHERE w.state = ? ORDER BY w.started_seq", (state.value,)
        )
    return [workflow_row(r) for r in cursor]


def step_rows(conn: sqlite3.Connection, workflow_id: str | None) -> list[StepRow]:
    """Return the step rows of one workflow, or of all in start order, by step index."""
    if workflow_id is not None:
        cursor = conn.execute(
            f"SELECT {_STEP_COLUMNS} FROM steps WHERE workflow_id = ? ORDER BY step_index",
            (workflow_id,),
        )
    else:
        columns = ", ".join(f"s.{c.strip()}" for c in _STEP_COLUMNS.split(","))
        cursor = conn.execute(
            f"SELECT {columns} FROM steps AS s JOIN workflows AS w USING (workflow_id) "
            "ORDER BY w.started_seq, s.step_index"
        )
    return [step_row(r) for r in cursor]


def expired_leases(conn: sqlite3.Connection, now: float) -> list[Execution]:
    """Return the leases with ``expires_at < now``, oldest first."""
    cursor = conn.execute(
        f"SELECT {_STEP_COLUMNS} FROM steps WHERE state = 'leased' AND lease_expires_at < ? "
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
    sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    if limit is not None:
        sql, params = f"{sql} LIMIT ?", (*params, limit)
    return [_event(r) for r in conn.execute(sql, params)]


def _kinds(kinds: frozenset[EventKind]) -> str:
    return ", ".join(f"'{k.value}'" for k in sorted(kinds))


# `->` (SQLite >= 3.38) returns a member as JSON text exactly as stored; json_extract would
# turn a top-level number into a REAL and print it back with 15 digits. ->> returns SQL text.
_EVENT_ROWS_SQL = (
    "SELECT seq, at, workflow_id, step_index, step_name, kind, attempt, worker_id, "
    f"CASE WHEN kind IN ({_kinds(REASON_KINDS)}) THEN data ->> '$.reason' END, "
    f"CASE WHEN kind = '{EventKind.STEP_COMPLETED.value}' THEN data -> '$.output' END, "
    f"CASE WHEN kind IN ({_kinds(INPUT_KINDS)}) THEN data -> '$.input' END "
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
    sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq"
    return [event_row(_event(r)) for r in conn.execute(sql, params)]


def last_seq(conn: sqlite3.Connection) -> int:
    """Return the highest sequence number (0 when the log is empty)."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
