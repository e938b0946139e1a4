"""The ``job_outcomes`` table: the `JobOutcomeStore` verbs of `PostgresStore` as SQL.

Synchronous, on one of the store's worker threads: `save` and `forget` run inside a
transaction (`agentq.store.postgres.connection.Connections.transact`), `load` is a read. The
table is not part of the event log. Two processes saving one key at once: ``ON CONFLICT DO
NOTHING`` keeps the first committed, the other gets False.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentq.queue import StoredJob
from agentq.store.contract.checks import check_job_save
from agentq.store.postgres.tx import key as as_key

if TYPE_CHECKING:
    import psycopg

__all__ = ["forget", "load", "save"]


def load(conn: psycopg.Connection[Any], key: str, now: float) -> StoredJob | None:
    """Return the outcome stored for `key` that is live at `now`, or None."""
    row = conn.execute(
        "SELECT fingerprint, output, completed_at, expires_at FROM job_outcomes "
        "WHERE key = %s AND (expires_at IS NULL OR expires_at > %s)",
        (as_key(key), now),
    ).fetchone()
    if row is None:
        return None
    return StoredJob(key, row[0], json.loads(row[1]), row[2], row[3])


def save(
    conn: psycopg.Connection[Any],
    key: str,
    fingerprint: str,
    output: Any,
    completed_at: float,
    expires_at: float | None,
) -> bool:
    """Insert the outcome unless a live one is stored (see `JobOutcomeStore.save_job`).

    The outcomes expired by `completed_at` are deleted first, so a row still there for the
    key is live and is kept.
    """
    key, fingerprint, _, text, done, expires = check_job_save(
        key, fingerprint, output, completed_at, expires_at
    )
    conn.execute("DELETE FROM job_outcomes WHERE expires_at <= %s", (done,))
    inserted = conn.execute(
        "INSERT INTO job_outcomes (key, fingerprint, output, completed_at, expires_at) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
        (as_key(key), as_key(fingerprint), text, done, expires),
    ).rowcount
    return inserted == 1


def forget(conn: psycopg.Connection[Any], key: str) -> bool:
    """Delete the outcome stored for `key`, live or expired; True if there was one."""
    return conn.execute("DELETE FROM job_outcomes WHERE key = %s", (as_key(key),)).rowcount > 0
