"""The ``job_outcomes`` table: the `JobOutcomeStore` verbs of `SqliteStore` as SQL.

Synchronous, on the connection's thread (the async half, `agentq.store.sqlite.store`, ships each
call there): `save` and `forget` run inside a group-commit transaction (given its `SqliteTx`),
`load` is a read. The table is not part of the event log: a job outcome belongs to a
`Queue`, not to a workflow, and nothing is appended to ``events``.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from agentq.queue import StoredJob
from agentq.store.contract.checks import check_job_save
from agentq.store.sqlite.tx import SqliteTx

__all__ = ["forget", "load", "save"]


def load(conn: sqlite3.Connection, key: str, now: float) -> StoredJob | None:
    """Return the outcome stored for `key` that is live at `now`, or None."""
    row = conn.execute(
        "SELECT fingerprint, output, completed_at, expires_at FROM job_outcomes "
        "WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)",
        (key, now),
    ).fetchone()
    if row is None:
        return None
    return StoredJob(key, row[0], json.loads(row[1]), row[2], row[3])


def save(
    tx: SqliteTx,
    key: str,
    fingerprint: str,
    output: Any,
    completed_at: float,
    expires_at: float | None,
) -> bool:
    """Insert the outcome unless a live one is stored (see `JobOutcomeStore.save_job`).

    The outcomes expired by `completed_at` are deleted first (through the partial index on
    ``expires_at``), so a row still there for the key is live and is kept.
    """
    key, fingerprint, _, text, done, expires = check_job_save(
        key, fingerprint, output, completed_at, expires_at
    )
    conn = tx.conn
    conn.execute("DELETE FROM job_outcomes WHERE expires_at <= ?", (done,))
    inserted = conn.execute(
        "INSERT INTO job_outcomes (key, fingerprint, output, completed_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
        (key, fingerprint, text, done, expires),
    ).rowcount
    return inserted == 1


def forget(tx: SqliteTx, key: str) -> bool:
    """Delete the outcome stored for `key`, live or expired; True if there was one."""
    return tx.conn.execute("DELETE FROM job_outcomes WHERE key = ?", (key,)).rowcount > 0
