"""SqliteStore only: opening and migrations, group commit, cancel safety, locking, errors."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

import agentq.store.sqlite.batch as sqlite_batch
import agentq.store.sqlite.tx as sqlite_tx
from agentq.errors import (
    PayloadError,
    SchemaError,
    StoreError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.store import Claimed, SqliteStore, StepState, WorkflowState
from agentq.store.sqlite.schema import SCHEMA_VERSION, migrations, rebuilds

from .conftest import T0, claim, kinds, run_step, start

pytestmark = pytest.mark.timeout(30)


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def user_version(path: Path) -> int:
    conn = raw(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


# ---------------------------------------------------------------- aiosqlite's private API


async def test_aiosqlite_private_api(db_path: Path) -> None:
    """SqliteStore._on_thread relies on aiosqlite's Connection._execute and ._conn.

    If this fails, aiosqlite changed its internals: adapt SqliteStore._on_thread (the one
    place agentq uses them) before anything else.
    """
    assert inspect.iscoroutinefunction(aiosqlite.Connection._execute), (
        "aiosqlite.Connection._execute is gone or no longer a coroutine function"
    )
    async with SqliteStore(db_path) as store:
        db = store._db
        assert db is not None
        assert isinstance(db._conn, sqlite3.Connection), "aiosqlite.Connection._conn changed"

        def probe(conn: sqlite3.Connection, extra: int = 0) -> tuple[int, bool, int]:
            return threading.get_ident(), conn is db._conn, extra

        ident, same, _ = await store._on_thread(db, probe)
        assert ident == db._thread.ident and ident != threading.get_ident() and same
        assert await db._execute(probe, db._conn, extra=7) == (ident, True, 7)  # type: ignore[no-untyped-call]
        # What an unclosed store relies on (agentq.store.sqlite.connection: daemonize and release).
        assert isinstance(db._thread, threading.Thread) and db._thread.daemon
        assert db._connection is db._conn and db._running is True
        assert hasattr(db._tx, "put_nowait"), "aiosqlite.Connection._tx changed"
        assert hasattr(aiosqlite.core, "_STOP_RUNNING_SENTINEL"), "the stop sentinel is gone"


# ---------------------------------------------------------------- opening


async def test_open_sets_wal_and_normal_sync(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        assert store.journal_mode == "wal"
        db = store._db
        assert db is not None
        pragmas = await store._on_thread(
            db,
            lambda c: [c.execute(f"PRAGMA {p}").fetchone()[0]
                       for p in ("synchronous", "busy_timeout", "user_version")],
        )
        assert pragmas == [1, 5000, SCHEMA_VERSION]  # 1 = NORMAL


async def test_an_in_memory_database() -> None:
    async with SqliteStore(":memory:") as store:
        assert store.journal_mode == "memory"
        await start(store, steps=["a"])
        await run_step(store)
        assert (await kinds(store))[-1] == "WorkflowCompleted"


async def test_three_ways_to_open(db_path: Path) -> None:
    lazy = SqliteStore(db_path)
    assert "not open yet" in repr(lazy)
    await start(lazy)  # opens on first use
    await lazy.close()
    store = await SqliteStore.open(db_path, synchronous="FULL")
    assert await kinds(store) == ["WorkflowStarted"]
    await store.close()
    async with SqliteStore(db_path) as again:
        assert await again.last_seq() == 1
    assert "closed" in repr(again)
    with pytest.raises(ValueError):
        SqliteStore(db_path, synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SqliteStore(db_path, busy_timeout=-1)


_CREATED = re.compile(r"CREATE (?:UNIQUE )?(TABLE|INDEX|TRIGGER) (?:IF NOT EXISTS )?(\w+)")
_ADDED = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")
_RENAMED = re.compile(r"ALTER TABLE (\w+) RENAME TO (\w+)")


def _unbuild(conn: sqlite3.Connection, rebuilt: str, table: str, before: list[list[str]]) -> None:
    """Undo a table rebuilt as `rebuilt` and renamed `table`: the table as the migrations
    `before` made it (its indexes and triggers too), its rows kept."""
    conn.execute(f"ALTER TABLE {table} RENAME TO {rebuilt}")
    on_table = re.compile(
        rf"CREATE (TABLE {table} |(UNIQUE )?INDEX \w+ ON {table} |TRIGGER \w+ \w+ \w+ ON {table}\b)"
    )
    made = [s for statements in before for s in statements if on_table.match(s)]
    conn.execute(made[0])
    conn.execute(f"INSERT INTO {table} SELECT * FROM {rebuilt}")
    conn.execute(f"DROP TABLE {rebuilt}")
    for statement in made[1:]:
        if _CREATED.match(statement)[2] in {  # type: ignore[index]
            r[0] for r in conn.execute("SELECT name FROM sqlite_master")
        }:
            continue
        conn.execute(statement)


def downgrade(path: Path, version: int) -> None:
    """Undo the migrations after `version` (what they create, add or rebuild), newest first."""
    conn = raw(path)
    try:
        every = migrations()
        for number in reversed(range(version, len(every))):
            for statement in reversed(every[number]):
                if renamed := _RENAMED.match(statement):
                    _unbuild(conn, renamed[1], renamed[2], every[:number])
                elif statement.startswith(("INSERT INTO", "DROP TABLE")):
                    continue  # a table rebuilt: undone with its rename
                elif created := _CREATED.match(statement):
                    conn.execute(f"DROP {created[1]} IF EXISTS {created[2]}")
                elif added := _ADDED.match(statement):
                    conn.execute(f"ALTER TABLE {added[1]} DROP COLUMN {added[2]}")
                else:  # pragma: no cover - a migration this helper cannot undo
                    raise AssertionError(f"cannot undo {statement[:60]!r}")
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()


async def test_an_older_file_is_migrated_on_open(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        await run_step(store, output={"kept": True})
    # Turn the file back into a version-1 file, as the first agentq release wrote it.
    downgrade(db_path, 1)
    conn = raw(db_path)
    conn.execute("UPDATE events SET kind = kind")  # version 1 had no append-only trigger
    conn.close()
    assert user_version(db_path) == 1

    async with SqliteStore(db_path) as store:
        assert await kinds(store) == [
            "WorkflowStarted", "StepStarted", "StepCompleted", "WorkflowCompleted"]
        assert (await store.step_rows())[0].output == {"kept": True}
        await start(store, "new")
    assert user_version(db_path) == SCHEMA_VERSION
    conn = raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("UPDATE events SET kind = kind")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
    finally:
        conn.close()


def _version_2_file(path: Path) -> None:
    """Write a file exactly as the release with schema version 2 left it after a crash.

    "released": step a completed, then b's worker died and `recover` released its lease (that
    release wrote WorkerRecovered without a reason, and kept b's attempt at 1). "leased": its
    worker died holding the lease, which expired at T0 + 5.
    """
    conn = raw(path)
    for statements in migrations()[:2]:
        for statement in statements:
            conn.execute(statement)
    events = [
        ("released", None, None, "WorkflowStarted", None, None, '{"steps":["a","b"],"input":1}'),
        ("released", 0, "a", "StepStarted", 1, "w1", '{"lease_token":1,"expires_at":%r}'
         % (T0 + 5)),
        ("released", 0, "a", "StepCompleted", 1, "w1", '{"output":"A"}'),
        ("released", 1, "b", "StepStarted", 1, "w1", '{"lease_token":1,"expires_at":%r}'
         % (T0 + 5)),
        ("released", 1, "b", "WorkerRecovered", 1, None,
         '{"previous_worker":"w1","lease_token":1,"expired_at":%r}' % (T0 + 5)),
        ("leased", None, None, "WorkflowStarted", None, None, '{"steps":["a"],"input":null}'),
        ("leased", 0, "a", "StepStarted", 1, "w1", '{"lease_token":1,"expires_at":%r}'
         % (T0 + 5)),
    ]
    for seq, (wid, index, name, kind, attempt, worker, data) in enumerate(events, 1):
        conn.execute(
            "INSERT INTO events (seq, at, workflow_id, step_index, step_name, kind, attempt, "
            "worker_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, T0, wid, index, name, kind, attempt, worker, data),
        )
    conn.executemany(
        "INSERT INTO workflows (workflow_id, started_seq, state, step_names, input, reason, "
        "created_at) VALUES (?, ?, 'running', ?, ?, NULL, ?)",
        [("released", 1, '["a","b"]', "1", T0), ("leased", 6, '["a"]', "null", T0)],
    )
    conn.executemany(
        "INSERT INTO steps (workflow_id, step_index, step_name, state, attempt, worker_id, "
        "lease_token, lease_expires_at, output, reason, error, resume_input, resumed, "
        "retry_at, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, "
        "NULL, 0, NULL, ?, ?)",
        [
            ("released", 0, "a", "completed", 1, "w1", 1, None, '"A"', T0, T0),
            ("released", 1, "b", "pending", 1, "w1", 1, None, None, T0, None),
            ("leased", 0, "a", "leased", 1, "w1", 1, T0 + 5, None, T0, None),
        ],
    )
    conn.execute("PRAGMA user_version = 2")
    conn.close()


async def test_a_version_2_file_is_migrated_and_its_workflows_continue(db_path: Path) -> None:
    """Schema 3 counts lost attempts (``recoveries``); a version-2 file gets the column and
    a projection rebuilt from its log, and its interrupted workflows carry on."""
    _version_2_file(db_path)
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION
        a, b = await store.step_rows("released")
        assert (a.state, a.output, a.recoveries) == (StepState.COMPLETED, "A", 0)
        # the released attempt was lost to a crash: counted apart, not as an attempt
        assert (b.state, b.attempt, b.recoveries, b.lease_token) == (StepState.PENDING, 0, 1, 1)
        [leased] = await store.step_rows("leased")
        assert (leased.state, leased.recoveries, leased.lease_expires_at) == (
            StepState.LEASED, 0, T0 + 5)
        resumed = await store.claim_step("released", 1, "w2", 10.0, T0 + 10)
        assert isinstance(resumed, Claimed)
        assert (resumed.execution.attempt, resumed.execution.lease_token) == (1, 2)
        assert resumed.recoveries == 1
        await store.complete_step(resumed.execution, "B", T0 + 10)
        taken = await store.claim_step("leased", 0, "w2", 10.0, T0 + 10)
        assert isinstance(taken, Claimed) and taken.recoveries == 1
        await store.complete_step(taken.execution, "A2", T0 + 10)
        assert [w.state.value for w in await store.workflows()] == ["completed", "completed"]
        old_recovery = (await store.load_events("released"))[4]
        assert (old_recovery.kind, old_recovery.reason) == ("WorkerRecovered", None)
    async with SqliteStore(db_path) as again:  # opening a migrated file changes nothing
        assert await again.last_seq() == 14
    assert user_version(db_path) == SCHEMA_VERSION


async def test_a_file_from_before_job_outcomes_gets_the_table_on_open(db_path: Path) -> None:
    """A file written by the release before `Queue(store=)` opens, migrates and keeps working."""
    steps = migrations()
    mine = next(
        i for i, statements in enumerate(steps)
        if any("CREATE TABLE job_outcomes" in s for s in statements)
    )
    conn = raw(db_path)
    for statements in steps[:mine]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {mine}")
    conn.close()
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        await run_step(store, output="step")
        assert await store.save_job(
            "k", fingerprint="fp", output={"sent": 1}, completed_at=T0, expires_at=None
        )
    assert user_version(db_path) == SCHEMA_VERSION
    async with SqliteStore(db_path) as store:  # and the outcome is on disk
        loaded = await store.load_job("k", T0)
        assert loaded is not None and loaded.output == {"sent": 1}
        assert (await store.step_rows("wf"))[0].output == "step"


async def test_a_version_4_file_gets_durable_calls_on_open(db_path: Path) -> None:
    """A file of the release before durable calls (schema 4) migrates to 5 and keeps working:
    its step-level wait is answered, its job outcomes stay, and its steps make calls."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a", "b"])
        await run_step(store, output="A")
        await store.wait_step(await claim(store, index=1), "ok?", T0)
        await store.save_job("job", fingerprint="fp", output=1, completed_at=T0, expires_at=None)
    downgrade(db_path, 4)
    conn = raw(db_path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        columns = {r[1] for r in conn.execute("PRAGMA table_info(steps)")}
    finally:
        conn.close()
    assert "calls" not in names and "job_outcomes" in names
    assert "wait_key" not in columns and "recoveries" in columns
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION
        b = (await store.step_rows("wf"))[1]
        assert (b.state, b.reason, b.wait_key) == (StepState.WAITING, "ok?", None)
        assert await store.calls() == [] and await store.load_job("job", T0) is not None
        await store.resume_step("wf", 1, "yes", T0 + 1)
        ex = await claim(store, index=1, now=T0 + 1)
        await store.start_call(ex, "k", fingerprint=None, lane=None, label=None, now=T0 + 1)
        [row] = await store.calls("wf")
        assert row.key == "k" and row.step_index == 1


async def test_a_version_7_file_gets_deadlines_on_open(db_path: Path) -> None:
    """A file of the release before workflow deadlines (schema 7) migrates to 8: its
    workflows have no deadline and keep running; new ones store theirs."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
    downgrade(db_path, 7)
    conn = raw(db_path)
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(workflows)")}
    finally:
        conn.close()
    assert "deadline" not in columns and user_version(db_path) == 7
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION >= 8
        row = await store.get_workflow("wf")
        assert row is not None and row.deadline is None
        await store.complete_step(await claim(store, index=0, now=T0 + 1), "A", T0 + 1)
        made, _ = await store.start_workflow("new", ["x"], None, T0 + 2, deadline=T0 + 60)
        assert made.deadline == T0 + 60
        assert await store.time_out_workflow("new", T0 + 60)
        before = await store.workflows()
        await store.rebuild_projection()
        assert await store.workflows() == before


def _version_before(table: str) -> int:
    """The schema version of the files made before the migration that creates `table`."""
    made = (f"CREATE TABLE IF NOT EXISTS {table} ", f"CREATE TABLE {table} ")
    return next(
        i for i, m in enumerate(migrations()) if any(s.startswith(made) for s in m)
    )


async def test_a_file_before_end_hooks_gets_the_outbox_on_open(db_path: Path) -> None:
    """A file of the release before end-of-run hooks migrates: its ended workflows have no
    outbox row (their hooks are not called), ends after the upgrade do."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        await run_step(store)
        await start(store, "open", steps=["a"])
    before = _version_before("end_hooks")
    downgrade(db_path, before)
    assert user_version(db_path) == before
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION
        assert await store.hooks("wf") == []
        await run_step(store, "open", now=T0 + 1)
        [row] = await store.hooks("open")
        assert (row.state, row.delivered) == ("completed", False)


async def test_a_file_before_schedules_gets_them_on_open(db_path: Path) -> None:
    """A file of the release before schedules migrates: its workflows are kept, it gains the
    schedules table (empty), and a schedule stored now reads back."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
    before = _version_before("schedules")
    downgrade(db_path, before)
    assert user_version(db_path) == before
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION
        assert await store.schedules() == []
        await store.put_schedule("n", "d", cron=None, every=1.0, input=None, next_tick=T0, now=T0)
        assert [r.name for r in await store.schedules()] == ["n"]
        assert await store.get_workflow("wf") is not None


async def test_a_file_before_messages_gets_them_on_open(db_path: Path) -> None:
    """A file of the release before messages migrates: it gains the messages table, its
    waiting workflow keeps waiting, and a message sent now reaches its wait."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        await store.wait_step(await claim(store), "ok?", T0, key="approve")
    before = _version_before("messages")
    downgrade(db_path, before)
    conn = raw(db_path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert "messages" not in tables and user_version(db_path) == before
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION
        assert await store.messages("wf") == []
        sent = await store.send_message("wf", "go", 1, T0 + 1)
        assert sent.sent and sent.delivered_to is None  # it waits on "approve", not a receive
        await store.rebuild_projection()
        [message] = await store.messages("wf")
        assert (message.topic, message.payload, message.consumed) == ("go", 1, False)


async def test_a_version_5_file_gets_definitions_on_open(db_path: Path) -> None:
    """A file of the release before workflow definitions (schema 5) migrates to 6: its
    workflows read as plain ones (definition None), they keep running, and new workflows
    record their definition."""
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a", "b"])
        await run_step(store, output="A")
        await store.wait_step(await claim(store, index=1), "ok?", T0, key="approve")
    downgrade(db_path, 5)
    conn = raw(db_path)
    try:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(workflows)")}
    finally:
        conn.close()
    assert "definition" not in columns and user_version(db_path) == 5
    async with SqliteStore(db_path) as store:
        assert user_version(db_path) == SCHEMA_VERSION >= 6
        row = await store.get_workflow("wf")
        assert row is not None and (row.state, row.definition) == (WorkflowState.WAITING, None)
        await store.resume_step("wf", 1, "yes", T0 + 1, key="approve")
        await store.complete_step(await claim(store, index=1, now=T0 + 1), "B", T0 + 1)
        made, created = await store.start_workflow("new", ["x"], None, T0 + 2, definition="d")
        assert created and made.definition == "d"
        before = await store.workflows()
        await store.rebuild_projection()
        assert await store.workflows() == before
    async with SqliteStore(db_path) as again:
        assert [(w.workflow_id, w.state, w.definition) for w in await again.workflows()] == [
            ("wf", WorkflowState.COMPLETED, None), ("new", WorkflowState.RUNNING, "d")]


async def test_a_newer_file_is_refused(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store)
    conn = raw(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}.*upgrade agentq"):
        await SqliteStore.open(db_path)
    assert user_version(db_path) == SCHEMA_VERSION + 1


async def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database file at all" * 100)
    with pytest.raises(StoreError, match="not a database") as info:
        await SqliteStore.open(path)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_migrations_parse() -> None:
    steps = migrations()
    assert len(steps) == SCHEMA_VERSION >= 3
    assert all(s.endswith(";") for m in steps for s in m)
    assert any("CREATE TRIGGER" in s and "END;" in s for s in steps[1])
    # migration 3 (recoveries) rebuilds the projection; 4 (job_outcomes), 5 (calls), 6
    # (definitions: none in an older log), 7 (reserved: empty), 8 (deadlines: none
    # either) and the later ones (the log made AUTOINCREMENT for retention, ...) need not
    assert [number for number, rebuild in enumerate(rebuilds(), 1) if rebuild] == [3]


# ---------------------------------------------------------------- group commit


def spy_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many verbs each group-commit transaction carries (on either thread)."""
    sizes: list[int] = []

    class Spied(sqlite_batch.Batch):
        __slots__ = ()

        def __init__(self, ops: list[sqlite_batch.Op]) -> None:
            super().__init__(ops)
            sizes.append(sum(not op.read for op in ops))

    monkeypatch.setattr(sqlite_batch, "Batch", Spied)
    return sizes


async def test_group_commit_gives_each_verb_its_own_result(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = spy_batches(monkeypatch)
    async with SqliteStore(db_path) as store:
        await start(store, "taken", ["a"])
        sizes.clear()

        def broken(tx: sqlite_tx.SqliteTx) -> None:
            tx.conn.execute("INSERT INTO events (seq) VALUES (NULL)")  # NOT NULL: fails

        results = await asyncio.gather(
            *(store.start_workflow(f"wf{i}", ["a", "b"], {"i": i}, T0) for i in range(10)),
            store.start_workflow("taken", ["other"], None, T0),
            store.start_workflow("bad", ["a"], {1, 2}, T0),
            store._write(broken),
            *(store.start_workflow(f"wf{i}", ["a", "b"], None, T0) for i in range(10, 20)),
            return_exceptions=True,
        )
        assert max(sizes) > 1 and sum(sizes) == 23
        assert isinstance(results[10], WorkflowMismatchError)
        assert isinstance(results[11], PayloadError)
        assert isinstance(results[12], StoreError)
        assert isinstance(results[12].__cause__, sqlite3.IntegrityError)
        created = [r for r in results if isinstance(r, tuple)]
        assert len(created) == 20 and all(c for _, c in created)
        events = await store.load_events()
        assert [e.seq for e in events] == list(range(1, 22))
        assert sorted(r.workflow_id for r, _ in created) == sorted(
            e.workflow_id for e in events[1:])
        assert {e.workflow_id: e.input for e in events}["wf3"] == {"i": 3}


async def test_group_commit_claims_are_still_compare_and_swap(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        results = await asyncio.gather(
            *(store.claim_step("wf", 0, f"w{i}", 10.0, T0) for i in range(8))
        )
        assert sum(isinstance(r, Claimed) for r in results) == 1
        assert (await kinds(store)).count("StepStarted") == 1


def threaded(path: Path) -> SqliteStore:
    """A store whose batches all run on the connection's thread: with ``synchronous=FULL``
    no batch runs on the loop's thread (`agentq.store.sqlite.inline`), so holding the thread
    (`hold_thread`) holds every batch behind it."""
    return SqliteStore(path, synchronous="FULL")


async def hold_thread(store: SqliteStore) -> tuple[threading.Event, asyncio.Task[Any]]:
    """Block the store's connection thread until the returned event is set."""
    gate, entered = threading.Event(), threading.Event()

    def block(conn: sqlite3.Connection) -> None:
        entered.set()
        gate.wait(10)

    db = store._db
    assert db is not None
    task = asyncio.ensure_future(store._on_thread(db, block))
    await asyncio.to_thread(entered.wait, 10)
    return gate, task


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_verb_cancelled_before_it_was_taken_is_withdrawn(db_path: Path) -> None:
    async with threaded(db_path) as store:
        gate, blocker = await hold_thread(store)
        first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
        await settle()  # `first` leads; its batch is queued behind the blocker
        second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
        third = asyncio.ensure_future(store.start_workflow("third", ["a"], None, T0))
        await settle()
        second.cancel()
        await settle()
        gate.set()
        await blocker
        async with asyncio.timeout(5):
            assert (await first)[1] and (await third)[1]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert [w.workflow_id for w in await store.workflows()] == ["first", "third"]


async def test_a_cancelled_leader_still_delivers_to_its_batch(db_path: Path) -> None:
    async with threaded(db_path) as store:
        gate, blocker = await hold_thread(store)
        first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
        await settle()  # `first` leads; its batch is queued behind the blocker
        second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
        await settle()
        first.cancel()
        await settle()
        assert first.cancelled()
        gate.set()
        await blocker
        async with asyncio.timeout(5):
            assert (await second)[1]  # led the next batch after `first`'s was delivered
        assert [w.workflow_id for w in await store.workflows()] == ["first", "second"]


async def test_a_verb_cancelled_after_it_was_taken_still_commits(db_path: Path) -> None:
    async with threaded(db_path) as store:
        gate, blocker = await hold_thread(store)
        first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
        await settle()
        db = store._db
        assert db is not None
        gate2 = threading.Event()
        blocker2 = asyncio.ensure_future(store._on_thread(db, lambda conn: gate2.wait(10)))
        second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
        third = asyncio.ensure_future(store.start_workflow("third", ["a"], None, T0))
        await settle()
        gate.set()
        await blocker
        assert (await first)[1]
        await settle()  # `second` leads [second, third], queued behind blocker2
        third.cancel()
        gate2.set()
        await blocker2
        async with asyncio.timeout(5):
            assert (await second)[1]
        with pytest.raises(asyncio.CancelledError):
            await third
        assert [w.workflow_id for w in await store.workflows()] == ["first", "second", "third"]


async def test_a_next_leader_cancelled_before_it_leads_passes_the_turn_on(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with threaded(db_path) as store:
        gate, blocker = await hold_thread(store)
        first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
        await settle()
        second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
        third = asyncio.ensure_future(store.start_workflow("third", ["a"], None, T0))
        await settle()
        handoff, cancelled = store._commit._handoff, list[bool]()

        def handoff_then_cancel() -> None:
            handoff()  # `second` is told to lead ...
            if not cancelled:
                cancelled.append(second.cancel())  # ... and cancelled before it runs

        monkeypatch.setattr(store._commit, "_handoff", handoff_then_cancel)
        gate.set()
        await blocker
        async with asyncio.timeout(5):
            assert (await first)[1] and (await third)[1]
        assert cancelled == [True]
        with pytest.raises(asyncio.CancelledError):
            await second
        assert [w.workflow_id for w in await store.workflows()] == ["first", "third"]


async def test_a_leader_waits_a_loop_turn_for_concurrent_verbs(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four workflows driven in lockstep: each verb's caller submits its next verb as soon as
    # the last batch's outcome wakes it; the leader's linger lets all four ride together.
    async with SqliteStore(db_path) as store:
        sizes = spy_batches(monkeypatch)

        async def flow(i: int) -> None:
            await start(store, f"wf{i}", ["a", "b"])
            await run_step(store, f"wf{i}", 0)
            await run_step(store, f"wf{i}", 1)

        await asyncio.gather(*(flow(i) for i in range(4)))
        assert sizes == [4] * 5
        assert {w.state for w in await store.workflows()} == {WorkflowState.COMPLETED}


async def test_an_idle_store_leads_after_one_loop_turn(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        sizes = spy_batches(monkeypatch)
        write = asyncio.ensure_future(store.start_workflow("wf", ["a"], None, T0))
        await asyncio.sleep(0)  # the verb leads and lingers one turn ...
        assert store._commit.pending
        await asyncio.sleep(0)  # ... nothing came: its batch was taken
        assert not store._commit.pending
        assert (await write)[1]
        assert sizes == [1]


async def test_a_leader_cancelled_while_it_lingers_passes_the_turn_on(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
        await asyncio.sleep(0)  # `first` is told to lead and lingers a loop turn
        second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
        first.cancel()
        async with asyncio.timeout(5):
            assert (await second)[1]
        with pytest.raises(asyncio.CancelledError):
            await first
        assert [w.workflow_id for w in await store.workflows()] == ["second"]


async def test_a_verb_that_raises_after_writing_is_rolled_back_alone(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch runs without savepoints; a verb that wrote and then raised makes it run again
    # with one per verb, so that only that verb's writes are undone.
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        sizes = spy_batches(monkeypatch)
        runs: list[str] = []

        def write_then_raise(tx: sqlite_tx.SqliteTx) -> None:
            runs.append("half")
            tx.conn.execute(
                "INSERT INTO job_outcomes (key, fingerprint, output, completed_at) "
                "VALUES ('half', 'f', 'null', 0)"
            )
            raise ValueError("after writing")

        results = await asyncio.gather(
            store.start_workflow("a", ["x"], None, T0),
            store._write(write_then_raise),
            store.claim_step("nope", 0, "w", 10.0, T0),  # refused before writing
            store.start_workflow("b", ["x"], None, T0),
            return_exceptions=True,
        )
        assert sizes == [4]
        assert runs == ["half", "half"]  # once without savepoints, once with
        assert isinstance(results[1], ValueError)
        assert isinstance(results[2], UnknownWorkflowError)
        assert results[0][1] and results[3][1]  # type: ignore[index]
        assert await store.load_job("half", T0) is None
        assert [w.workflow_id for w in await store.workflows()] == ["a", "b"]
        assert await kinds(store) == ["WorkflowStarted", "WorkflowStarted"]


async def test_close_with_waiting_verbs(db_path: Path) -> None:
    store = await SqliteStore.open(db_path, synchronous="FULL")  # threaded
    gate, blocker = await hold_thread(store)
    first = asyncio.ensure_future(store.start_workflow("first", ["a"], None, T0))
    await settle()
    second = asyncio.ensure_future(store.start_workflow("second", ["a"], None, T0))
    await settle()
    closing = asyncio.ensure_future(store.close())
    await settle()
    gate.set()
    await blocker
    await closing
    assert (await first)[1]  # in flight: completed
    with pytest.raises(StoreError, match="closed"):
        await second
    async with SqliteStore(db_path) as again:
        assert [w.workflow_id for w in await again.workflows()] == ["first"]


# ---------------------------------------------------------------- locks and errors


async def test_a_writer_in_another_connection_is_waited_for(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        other = raw(db_path)
        other.execute("BEGIN IMMEDIATE")
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, other.execute, "COMMIT")
        ex = await claim(store)  # waits for the lock; no "database is locked"
        assert ex.lease_token == 1
        other.close()


async def test_a_lock_held_too_long_is_a_store_error(db_path: Path) -> None:
    async with SqliteStore(db_path, busy_timeout=0.05) as store:
        await start(store, steps=["a"])
        other = raw(db_path)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreError, match="locked") as info:
                await store.claim_step("wf", 0, "w1", 10.0, T0)
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await store.step_rows())[0].state is StepState.PENDING
        await claim(store)


async def test_event_rows_without_json_arrows(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"], input=[0.1, {"é": None}])
        await run_step(store, output=0.30000000000000004)
        rows = await store.event_rows()
        plain = dataclasses.replace(store.sql.dialect, json_arrows=False)
        monkeypatch.setattr(store, "sql", store.sql._replace(dialect=plain))
        assert await store.event_rows() == rows


async def test_reads_see_committed_writes(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        async def writer(i: int) -> None:
            await start(store, f"wf{i}", ["a"])
            await run_step(store, f"wf{i}")

        seen: list[int] = []

        async def reader() -> None:
            for _ in range(20):
                seen.append(await store.last_seq())
                await asyncio.sleep(0)

        await asyncio.gather(*(writer(i) for i in range(10)), reader())
        assert seen == sorted(seen)
        assert await store.last_seq() == 40


async def test_a_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
        conn.commit()
    with pytest.raises(SchemaError, match="not an agentq database"):
        await SqliteStore.open(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert tables == {"invoices"} and version == 0


@pytest.mark.parametrize(
    "why",
    [
        "another program's tables",
        "a newer agentq's version",
        "another program's version and an events table",  # review A #2
        "a blank file with a version",
        "a negative version",
    ],
)
async def test_a_refused_file_keeps_its_journal_mode_and_its_bytes(
    tmp_path: Path, why: str
) -> None:
    """Issue 20 item 13: the refusal comes before WAL is switched on (which persists in the
    file): the file stays in its rollback journal mode, byte for byte, its mtime unchanged.
    Review A #2: so does another program's file whose user_version is one agentq knows."""
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
        if why == "another program's version and an events table":
            conn.execute("PRAGMA user_version = 3")
            conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT)")
        elif why == "a blank file with a version":
            conn.execute("PRAGMA user_version = 1")
        elif why == "a negative version":
            conn.execute("PRAGMA user_version = -1")
        else:
            conn.execute("CREATE TABLE invoices (id INTEGER, total REAL)")
            conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
        if why == "a newer agentq's version":
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.commit()
    before, stat = path.read_bytes(), path.stat()
    refusal = "upgrade agentq" if why == "a newer agentq's version" else "not an agentq database"
    with pytest.raises(SchemaError, match=refusal):
        await SqliteStore.open(path)
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert os.listdir(tmp_path) == ["app.db"]  # no -wal, no -shm
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)


async def test_a_new_empty_file_is_taken_and_switched_to_wal(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    path.touch()
    async with SqliteStore(path) as store:
        await start(store, steps=["a"])
        assert store.journal_mode == "wal"


def test_an_empty_path_is_refused() -> None:
    with pytest.raises(ValueError, match="empty path"):
        SqliteStore("")


async def test_a_workflows_calls_are_read_in_one_indexed_query(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        ex = await claim(store, ttl=3600.0)
        for i in range(50):
            await store.start_call(ex, f"k{i}", fingerprint=None, lane=None, label=None, now=T0)
        inline = store._inline  # one workflow's calls are read on the loop's connection
        assert inline is not None
        statements: list[str] = []
        inline.conn.set_trace_callback(statements.append)
        rows = await store.calls("wf")
        inline.conn.set_trace_callback(None)
        assert len(rows) == 50 and len(statements) == 1, statements
        plan = inline.conn.execute(f"EXPLAIN QUERY PLAN {statements[0]}").fetchall()
        assert [r[3] for r in plan] == [  # its rows by the table's key, sorted by first_seq
            "SEARCH calls USING PRIMARY KEY (workflow_id=?)", "USE TEMP B-TREE FOR ORDER BY"]


# ---------------------------------------------------------------- a store never closed

UNCLOSED = """
import asyncio, sys
from agentq.store import SqliteStore

kept = []

async def main(path: str, keep: bool) -> None:
    store = SqliteStore(path)
    if keep:
        kept.append(store)  # alive until the interpreter exits
    await store.start_workflow("left-open", ["a", "b"], {"n": 1}, 1.0)
    print("written", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2] == "keep"))
"""


@pytest.mark.parametrize("keep", ["keep", "drop"])
def test_issue9_a_store_never_closed_never_keeps_the_process_alive(
    db_path: Path, keep: str
) -> None:
    """Issue 9 item 10: a script that writes through a store and exits without closing it
    exits at once (it used to hang for ever on aiosqlite's thread), and what it committed
    is in the file. A store garbage-collected unclosed says so with a ResourceWarning."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", UNCLOSED, str(db_path), keep],
        capture_output=True, text=True, timeout=20, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "written"
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    if keep == "drop":
        assert "ResourceWarning" in done.stderr and "was never closed" in done.stderr
    conn = raw(db_path)
    try:
        rows = conn.execute("SELECT workflow_id, state FROM workflows").fetchall()
    finally:
        conn.close()
    assert rows == [("left-open", "running")]


async def test_a_store_collected_unclosed_warns_closes_its_file_and_ends_its_thread(
    db_path: Path,
) -> None:
    import gc
    import weakref

    store: SqliteStore | None = SqliteStore(db_path)
    assert store is not None
    await start(store, "wf")
    assert store._db is not None
    thread = store._db._thread
    collected = weakref.ref(store)
    with pytest.warns(ResourceWarning, match="was never closed"):
        store = None
        gc.collect()
    assert collected() is None
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive()
    async with SqliteStore(db_path) as again:
        row = await again.get_workflow("wf")
        assert row is not None


async def test_a_closed_store_is_collected_without_a_warning(db_path: Path) -> None:
    import gc

    store: SqliteStore | None = await SqliteStore.open(db_path)
    assert store is not None
    await store.close()
    store = None
    gc.collect()  # filterwarnings = error: a ResourceWarning here would fail the test
    never_opened = SqliteStore(db_path)
    del never_opened
    gc.collect()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
async def test_an_agentq_file_of_every_older_version_still_opens(
    tmp_path: Path, version: int
) -> None:
    """The check of an agentq file's tables (review A #2) passes every version agentq wrote."""
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        for statements in migrations()[:version]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    async with SqliteStore(path) as store:
        await start(store, steps=["a"])
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
