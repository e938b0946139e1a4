"""SqliteStore's batches on the event loop's own thread (`agentq.store.sqlite.inline`)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

import agentq.store.sqlite.batch as sqlite_batch
import agentq.store.sqlite.inline as sqlite_inline
from agentq.store import SqliteStore, StepState

from .conftest import T0, claim, kinds, run_step, start
from .test_sqlite import hold_thread, raw, settle

pytestmark = pytest.mark.timeout(30)


async def test_light_verbs_commit_on_the_loops_thread_while_the_connection_thread_is_held(
    db_path: Path,
) -> None:
    async with SqliteStore(db_path) as store:
        gate, blocker = await hold_thread(store)
        try:
            async with asyncio.timeout(5):  # no hop: nothing waits for the held thread
                await start(store, steps=["a"])
                await run_step(store)
        finally:
            gate.set()
            await blocker
        other = raw(db_path)  # committed: another connection reads it
        try:
            stored = [r[0] for r in other.execute("SELECT kind FROM events ORDER BY seq")]
        finally:
            other.close()
        assert stored == ["WorkflowStarted", "StepStarted", "StepCompleted", "WorkflowCompleted"]


async def test_a_held_write_lock_is_waited_for_on_the_thread_never_on_the_loop(
    db_path: Path,
) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        other = raw(db_path)
        other.execute("BEGIN IMMEDIATE")
        try:
            loop = asyncio.get_running_loop()
            began = loop.time()
            claiming = asyncio.ensure_future(claim(store))
            await settle()  # the loop turns: the claim waits for the lock on the thread ...
            assert not claiming.done()
            assert loop.time() - began < 2.0  # ... not on the loop (the busy timeout is 5 s)
            other.execute("COMMIT")
            async with asyncio.timeout(5):
                assert (await claiming).lease_token == 1
        finally:
            other.close()


async def test_heavy_verbs_run_on_the_connection_thread(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        gate, blocker = await hold_thread(store)
        rebuilding = asyncio.ensure_future(store.rebuild_projection())
        await settle()
        assert not rebuilding.done()  # queued behind the held thread
        gate.set()
        await blocker
        async with asyncio.timeout(5):
            await rebuilding
        assert await kinds(store) == ["WorkflowStarted"]


async def test_the_wal_is_checkpointed_on_the_thread_not_by_the_loops_commits(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_inline, "CHECKPOINT_CHANGES", 10)
    threads: list[int] = []
    real = sqlite_batch.checkpoint

    def spy(conn: sqlite3.Connection) -> None:
        threads.append(threading.get_ident())
        real(conn)

    monkeypatch.setattr(sqlite_batch, "checkpoint", spy)
    async with SqliteStore(db_path) as store:
        inline = store._inline
        assert inline is not None
        assert inline.conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        for i in range(6):
            await start(store, f"wf{i}", ["a", "b"])
            await run_step(store, f"wf{i}", 0)
            await run_step(store, f"wf{i}", 1)
        assert len(threads) >= 2
        assert threading.get_ident() not in threads
        assert len(await store.load_events()) == 6 * 6  # the checkpointing batches committed


async def test_which_stores_get_a_connection_for_the_loop(db_path: Path, tmp_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        inline = store._inline
        assert inline is not None  # WAL and synchronous=NORMAL
        assert inline.conn.execute("PRAGMA busy_timeout").fetchone() == (0,)
    assert store._inline is None
    with pytest.raises(sqlite3.ProgrammingError):  # closed with the store
        inline.conn.execute("SELECT 1")
    async with SqliteStore(tmp_path / "full.db", synchronous="FULL") as full:
        await start(full, steps=["a"])
        assert full._inline is None  # each commit syncs: never on the loop
    async with SqliteStore(":memory:") as memory:
        await start(memory, steps=["a"])
        assert memory._inline is None  # a second connection would be another database
        assert await kinds(memory) == ["WorkflowStarted"]


async def test_a_refused_verb_on_the_loops_thread_leaves_no_trace(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        ex = await claim(store)
        await store.complete_step(ex, {"x": 1}, T0)
        with pytest.raises(Exception, match="completed"):
            await store.complete_step(ex, {"x": 2}, T0)
        assert await kinds(store) == [
            "WorkflowStarted", "StepStarted", "StepCompleted", "WorkflowCompleted"
        ]
        inline = store._inline
        assert inline is not None and not inline.conn.in_transaction


async def test_reads_of_one_workflow_run_on_the_loops_thread(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        ex = await claim(store)
        await store.start_call(ex, "k", fingerprint=None, lane=None, label=None, now=T0)
        gate, blocker = await hold_thread(store)
        try:
            async with asyncio.timeout(5):  # no hop: nothing waits for the held thread
                row = await store.get_workflow("wf")
                steps = await store.step_rows("wf")
                calls = await store.calls("wf")
                assert await store.last_seq() == 3
                assert await store.load_job("nope", T0) is None
            every = asyncio.ensure_future(store.step_rows())  # every workflow's: the thread
            await settle()
            assert not every.done()
        finally:
            gate.set()
            await blocker
        assert row is not None and row.workflow_id == "wf"
        assert [s.state for s in steps] == [StepState.LEASED]
        assert [c.key for c in calls] == ["k"]
        assert len(await every) == 1


async def test_a_read_after_a_write_on_the_thread_waits_for_it(db_path: Path) -> None:
    async with SqliteStore(db_path) as store:
        await start(store, steps=["a"])
        other = raw(db_path)
        other.execute("BEGIN IMMEDIATE")  # the claim's batch goes to the thread and waits
        try:
            claiming = asyncio.ensure_future(claim(store))
            await settle()
            reading = asyncio.ensure_future(store.step_rows("wf"))
            await settle()
            assert not reading.done()  # not on the loop's connection: it would miss the claim
            other.execute("COMMIT")
            async with asyncio.timeout(5):
                await claiming
                assert [s.state for s in await reading] == [StepState.LEASED]
        finally:
            other.close()
