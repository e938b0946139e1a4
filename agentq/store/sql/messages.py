"""The ``messages`` table of the SQL stores: its columns, row decoding, and its statements.

Both SQL stores keep the same ``messages`` table (see their ``schema.sql``); the functions
here are the `Tx` half (`next_message`, `keyed_message`, `put_message`, run inside a
store's open transaction) and the read (`messages`), written once with ``?`` placeholders
and run through a `Dialect` (keys as the store passes them: text in SQLite, UTF-8 ``bytea``
in PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentq.codec import dumps
from agentq.store.contract.messages import MessageRow
from agentq.store.sql.reads import Connection, Dialect

__all__ = [
    "MESSAGE_COLUMNS",
    "keyed_message",
    "message_row",
    "messages",
    "next_message",
    "put_message",
]

MESSAGE_COLUMNS = "workflow_id, seq, topic, msg_key, payload, sent_at, consumed_by, consumed_at"
"""The ``messages`` columns, in `MessageRow` order."""



def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8")  # a bytea key (PostgreSQL)


def message_row(r: Sequence[Any]) -> MessageRow:
    """Build a `MessageRow` from a row of `MESSAGE_COLUMNS`."""
    return MessageRow(
        str(_text(r[0])),
        int(r[1]),
        _text(r[2]),
        _text(r[3]),
        json.loads(r[4]),
        float(r[5]),
        _text(r[6]),
        None if r[7] is None else float(r[7]),
    )


def next_message(conn: Connection, d: Dialect, workflow_id: str, topic: str) -> MessageRow | None:
    """The oldest message on `topic` not consumed yet, or None (`Tx.next_message`)."""
    sql = d.sql(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE workflow_id = ? AND topic = ? "
        "AND consumed_by IS NULL ORDER BY seq LIMIT 1"
    )
    r = conn.execute(sql, (d.key(workflow_id), d.key(topic))).fetchone()
    return None if r is None else message_row(r)


def keyed_message(
    conn: Connection, d: Dialect, workflow_id: str, key: str, inputs: bool
) -> MessageRow | None:
    """The message with `key` among the kept inputs or the messages (`Tx.keyed_message`)."""
    topic = "topic IS NULL" if inputs else "topic IS NOT NULL"
    sql = d.sql(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE workflow_id = ? AND msg_key = ? "
        f"AND {topic} ORDER BY seq LIMIT 1"
    )
    r = conn.execute(sql, (d.key(workflow_id), d.key(key))).fetchone()
    return None if r is None else message_row(r)


def put_message(conn: Connection, d: Dialect, row: MessageRow, new: bool) -> None:
    """Insert (`new`) or update the message row (`Tx.put_message`)."""
    if new:
        sql = d.sql(f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        conn.execute(
            sql,
            (
                d.key(row.workflow_id),
                row.seq,
                d.key(row.topic),
                d.key(row.key),
                dumps(row.payload),
                row.sent_at,
                d.key(row.consumed_by),
                row.consumed_at,
            ),
        )
    else:
        sql = d.sql("UPDATE messages SET consumed_by = ?, consumed_at = ? WHERE seq = ?")
        conn.execute(sql, (d.key(row.consumed_by), row.consumed_at, row.seq))


def messages(conn: Connection, d: Dialect, workflow_id: str) -> list[MessageRow]:
    """The messages of one workflow, by seq (`DurableStore.messages`)."""
    sql = d.sql(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE workflow_id = ? ORDER BY seq")
    return [message_row(r) for r in conn.execute(sql, (d.key(workflow_id),))]
