"""The migration that keys the ``calls`` table by (workflow_id, call_key), WITHOUT ROWID.

A file written just before it (its calls a rowid table keyed by ``first_seq``, with the
indexes ``calls_by_key`` and ``calls_by_workflow``) opens, keeps every call row as it was,
lists them in ``first_seq`` order, and its calls go on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentq.store import CallState, Execution, SqliteStore
from agentq.store.sqlite.schema import SCHEMA_VERSION, migrations

from .conftest import T0, claim, start

pytestmark = pytest.mark.timeout(30)

_INDEXES = "SELECT name FROM sqlite_master WHERE type = 'index'"
_COLUMNS = (
    "first_seq, workflow_id, call_key, kind, step_index, state, fingerprint, lane, attempt, "
    "label, usage, output, reason, error, details, deadline, started_at, finished_at, "
    "duration, runs, last_seq"
)


def _rekeying_migration() -> int:
    """The version a file has just before this migration (found by its text, not number)."""
    sections = migrations()
    return next(i for i, section in enumerate(sections) if "calls_by_key_table" in str(section))


def _back_to_before(path: Path) -> int:
    """Rewrite a current file's calls table as the version before the migration had it."""
    before = _rekeying_migration()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(f"CREATE TABLE old_calls AS SELECT {_COLUMNS} FROM calls")
        conn.execute("DROP TABLE calls")
        for statement in migrations()[4]:  # migration 5 made calls and its indexes
            if "calls" in statement and "CREATE" in statement:
                conn.execute(statement)
        conn.execute(f"INSERT INTO calls ({_COLUMNS}) SELECT {_COLUMNS} FROM old_calls")
        conn.execute("DROP TABLE old_calls")
        conn.execute(f"PRAGMA user_version = {before}")
        conn.execute("COMMIT")
        indexes = {r[0] for r in conn.execute(_INDEXES)}
        assert {"calls_by_key", "calls_by_workflow"} <= indexes
    finally:
        conn.close()
    return before


async def test_a_file_from_before_keeps_its_calls_in_order_and_goes_on(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, "wf", ["a"])
        await start(store, "other", ["a"])
        ex = await claim(store, "wf")
        ox = await claim(store, "other")
        for key in ("z", "m", "a"):  # first_seq order is not key order
            await store.start_call(ex, key, fingerprint="f", lane=None, label={"k": key}, now=T0)
        await store.start_call(ox, "b", fingerprint="f", lane=None, label=None, now=T0)
        await store.complete_call(
            ex, "m", output={"out": 1}, usage=None, duration=0.5, now=T0
        )
        rows = await store.calls()
        mine = await store.calls("wf")
    assert [r.key for r in mine] == ["z", "m", "a"]
    before = _back_to_before(db_path)
    assert before < SCHEMA_VERSION
    async with SqliteStore(db_path) as store:
        assert await store.calls() == rows
        assert await store.calls("wf") == mine
        assert [r.key for r in await store.calls("wf", step_index=0)] == ["z", "m", "a"]
        assert isinstance(ex, Execution)
        done = await store.complete_call(
            ex, "z", output=[1, 2], usage={"tokens": 3}, duration=0.1, now=T0
        )
        assert done.state is CallState.COMPLETED and done.first_seq == mine[0].first_seq
        again = await store.start_call(ex, "new", fingerprint="f", lane=None, label=None, now=T0)
        assert [r.key for r in await store.calls("wf")] == ["z", "m", "a", "new"]
        assert again.first_seq > max(r.first_seq for r in rows)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'calls'").fetchone()[0]
        assert "WITHOUT ROWID" in sql
        indexes = {r[0] for r in conn.execute(_INDEXES)}
        assert not {"calls_by_key", "calls_by_workflow"} & indexes
        plan = " ".join(
            str(r[3])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT state FROM calls WHERE workflow_id = ? AND call_key = ?",
                ("wf", "z"),
            )
        )
        assert "PRIMARY KEY" in plan
    finally:
        conn.close()


async def test_a_key_is_still_one_row_per_workflow(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, "wf", ["a"])
        await start(store, "other", ["a"])
        ex = await claim(store, "wf")
        ox = await claim(store, "other")
        first = await store.start_call(ex, "k", fingerprint="f", lane=None, label=None, now=T0)
        await store.fail_call(ex, "k", reason="boom", error=None, duration=0.1, now=T0)
        rerun = await store.start_call(  # a failed key starts again
            ex, "k", fingerprint="f", lane=None, label=None, now=T0
        )
        theirs = await store.start_call(  # the same key in another workflow
            ox, "k", fingerprint="f", lane=None, label=None, now=T0
        )
        assert (rerun.first_seq, rerun.runs) == (first.first_seq, 2)
        assert theirs.first_seq != first.first_seq
        assert [(r.workflow_id, r.key, r.runs) for r in await store.calls()] == [
            ("wf", "k", 2), ("other", "k", 1)
        ]
