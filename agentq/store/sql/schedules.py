"""The ``schedules`` table as SQL, shared by both SQL stores: load, upsert, delete, list.

Synchronous, given a connection (inside a transaction for the writes) and the store's
`Dialect`: `SqliteTx` and `PostgresTx` answer the `Tx` schedule methods with these, and
`SqlStore.schedules` reads with `all_schedules`. PostgreSQL locks the row it loads
(``FOR UPDATE``), so that a tick's compare-and-swap waits for a racing one and then sees its
result; SQLite's ``BEGIN IMMEDIATE`` already serializes every write.
"""

from __future__ import annotations

from typing import Any

from agentq.codec import decode, encode
from agentq.store.contract.schedules import ScheduleRow
from agentq.store.sql.reads import Connection, Dialect

__all__ = ["all_schedules", "delete_schedule", "load_schedule", "put_schedule"]

_COLUMNS = (
    "name, definition, cron, every, input, next_tick, updated_at, last_tick, last_instance"
)
_SELECT = f"SELECT {_COLUMNS} FROM schedules"
_UPSERT = (
    f"INSERT INTO schedules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c.strip()} = excluded.{c.strip()}" for c in _COLUMNS.split(",")[1:])
)


def _text(value: Any) -> Any:
    """A key as read: PostgreSQL's ``bytea`` comes back as bytes (or a memoryview)."""
    return bytes(value).decode("utf-8") if isinstance(value, bytes | memoryview) else value


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(
        _text(r[0]), _text(r[1]), r[2], r[3], decode(r[4]), r[5], r[6], r[7], _text(r[8])
    )


def load_schedule(conn: Connection, d: Dialect, name: str, lock: str = "") -> ScheduleRow | None:
    """Return schedule `name`, or None; `lock` is appended to the query (``FOR UPDATE``)."""
    r = conn.execute(d.sql(f"{_SELECT} WHERE name = ?{lock}"), (d.key(name),)).fetchone()
    return None if r is None else _row(r)


def put_schedule(conn: Connection, d: Dialect, row: ScheduleRow) -> None:
    """Insert the schedule row, or replace the one stored under its name."""
    conn.execute(
        d.sql(_UPSERT),
        (
            d.key(row.name), d.key(row.definition), row.cron, row.every,
            encode(row.input, "input"), row.next_tick, row.updated_at, row.last_tick,
            d.key(row.last_instance),
        ),
    )


def delete_schedule(conn: Connection, d: Dialect, name: str) -> bool:
    """Delete schedule `name`; True if it was stored."""
    cur = conn.execute(d.sql("DELETE FROM schedules WHERE name = ?"), (d.key(name),))
    return bool(cur.rowcount > 0)


def all_schedules(conn: Connection, d: Dialect) -> list[ScheduleRow]:
    """Every stored schedule, by name."""
    return [_row(r) for r in conn.execute(d.sql(f"{_SELECT} ORDER BY name"), ())]
