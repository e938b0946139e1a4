"""The ``end_hooks`` outbox of the SQL stores: its columns, row decoding, its statements.

Both SQL stores keep the same ``end_hooks`` table (see their ``schema.sql``); the functions
here are the `Tx` half (`put_hook`, `load_hook`, `due_hooks`, run inside a store's open
transaction) and the read (`hooks`), written once with ``?`` placeholders and run through a
`Dialect` (keys as the store passes them: text in SQLite, UTF-8 ``bytea`` in PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.store.contract.hooks import HookRow
from agentq.store.sql.reads import Connection, Dialect

__all__ = ["HOOK_COLUMNS", "due_hooks", "hook_row", "hooks", "load_hook", "put_hook"]

HOOK_COLUMNS = (
    "seq, workflow_id, definition, state, ended_at, attempts, due_at, worker_id, "
    "lease_expires_at, delivered_at, error"
)
"""The ``end_hooks`` columns, in `HookRow` order."""


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8")  # a bytea key (PostgreSQL)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def hook_row(r: Sequence[Any]) -> HookRow:
    """Build a `HookRow` from a row of `HOOK_COLUMNS`."""
    return HookRow(
        int(r[0]),
        str(_text(r[1])),
        _text(r[2]),
        str(r[3]),
        float(r[4]),
        int(r[5]),
        float(r[6]),
        _text(r[7]),
        _float(r[8]),
        _float(r[9]),
        r[10],
    )


def put_hook(conn: Connection, d: Dialect, row: HookRow, new: bool) -> None:
    """Insert (`new`) or update the outbox row (`Tx.put_hook`)."""
    if new:
        marks = ", ".join("?" * 11)
        sql = d.sql(f"INSERT INTO end_hooks ({HOOK_COLUMNS}) VALUES ({marks})")
        conn.execute(
            sql,
            (
                row.seq, d.key(row.workflow_id), d.key(row.definition), row.state, row.ended_at,
                row.attempts, row.due_at, d.key(row.worker_id), row.lease_expires_at,
                row.delivered_at, row.error,
            ),
        )
        return
    sql = d.sql(
        "UPDATE end_hooks SET attempts = ?, due_at = ?, worker_id = ?, lease_expires_at = ?, "
        "delivered_at = ?, error = ? WHERE seq = ?"
    )
    conn.execute(
        sql,
        (
            row.attempts, row.due_at, d.key(row.worker_id), row.lease_expires_at,
            row.delivered_at, row.error, row.seq,
        ),
    )


def load_hook(conn: Connection, d: Dialect, seq: int) -> HookRow | None:
    """The outbox row `seq`, or None (`Tx.load_hook`)."""
    sql = d.sql(f"SELECT {HOOK_COLUMNS} FROM end_hooks WHERE seq = ?")
    r = conn.execute(sql, (seq,)).fetchone()
    return None if r is None else hook_row(r)


def due_hooks(
    conn: Connection,
    d: Dialect,
    now: float,
    definitions: Sequence[str],
    plain: bool,
    workflow_id: str | None,
    limit: int,
    lock: str = "",
) -> list[HookRow]:
    """The rows `Tx.due_hooks` returns; `lock` is appended to the query (PostgreSQL: ``FOR
    UPDATE SKIP LOCKED``, so that engines claiming at once never wait for or share a row)."""
    kinds = []
    params: list[Any] = [now, now]
    if definitions:
        kinds.append(f"definition IN ({', '.join('?' for _ in definitions)})")
        params.extend(d.key(n) for n in definitions)
    if plain:
        kinds.append("definition IS NULL")
    only = ""
    if workflow_id is not None:
        only = " AND workflow_id = ?"
        params.append(d.key(workflow_id))
    params.append(limit)
    sql = (
        f"SELECT {HOOK_COLUMNS} FROM end_hooks WHERE delivered_at IS NULL AND due_at <= ? "
        "AND (lease_expires_at IS NULL OR lease_expires_at <= ?) "
        f"AND ({' OR '.join(kinds) or 'FALSE'}){only} ORDER BY seq LIMIT ?{lock}"
    )
    return [hook_row(r) for r in conn.execute(d.sql(sql), tuple(params))]


def hooks(conn: Connection, d: Dialect, workflow_id: str) -> list[HookRow]:
    """The outbox rows of one workflow, by seq (`DurableStore.hooks`)."""
    sql = d.sql(f"SELECT {HOOK_COLUMNS} FROM end_hooks WHERE workflow_id = ? ORDER BY seq")
    return [hook_row(r) for r in conn.execute(sql, (d.key(workflow_id),))]
