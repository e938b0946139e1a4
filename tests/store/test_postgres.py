"""What only `PostgresStore` has: connecting, a server that goes away, concurrency across
pools and processes, migrations, its schema. The contract suite covers the verbs.

Every test runs against a real server (`pg_cluster`); the restart tests start a cluster of
their own so that the session's is never stopped.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, Target

from agentq import StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.clock import FakeClock
from agentq.errors import LeaseLostError, SchemaError, StoreError
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import (
    HANDED_BACK_REASON,
    Claimed,
    HeldByOther,
    PostgresStore,
    WorkflowState,
)
from agentq.store.postgres.connection import Connections
from agentq.store.postgres.schema import SCHEMA_VERSION, migrations
from agentq.store.postgres.tx import PostgresTx

from .conftest import T0, claim, run_step, start

pytestmark = [pytest.mark.timeout(120)]

OPENER = Path(__file__).with_name("pg_opener.py")


@pytest.fixture
async def pg(pg_target: Target) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        yield store


# ---------------------------------------------------------------- arguments and connecting


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"schema": "Bad-Name"}, ValueError),
        ({"schema": ""}, ValueError),
        ({"min_size": -1}, ValueError),
        ({"max_size": 0}, ValueError),
        ({"min_size": 5, "max_size": 2}, ValueError),
        ({"connect_timeout": 0}, ValueError),
        ({"connect_timeout": True}, ValueError),
    ],
)
def test_bad_arguments_are_refused_at_once(kwargs: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        PostgresStore("host=127.0.0.1", **kwargs)  # type: ignore[arg-type]


def test_a_dsn_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="dsn must be a str"):
        PostgresStore(b"host=x")  # type: ignore[arg-type]


async def test_an_unparsable_dsn_raises_store_error() -> None:
    with pytest.raises(StoreError, match="cannot open PostgreSQL database"):
        await PostgresStore.open("host=127.0.0.1 port=notaport")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_refused_connection_raises_store_error_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot open PostgreSQL database") as info:
        await PostgresStore.open(f"host=127.0.0.1 port={_closed_port()} user=x dbname=x")
    assert time.monotonic() - started < 5
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a hung server)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


async def test_a_server_that_never_answers_times_out_with_store_error(silent_server: int) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot open PostgreSQL database"):
        async with asyncio.timeout(30):
            await PostgresStore.open(
                f"host=127.0.0.1 port={silent_server} user=x dbname=x", connect_timeout=2
            )
    assert time.monotonic() - started < 15


async def test_an_unknown_database_names_it(pg_cluster: Cluster) -> None:
    with pytest.raises(StoreError, match="no_such_db"):
        await PostgresStore.open(pg_cluster.dsn("no_such_db"))


async def test_the_password_is_never_shown(pg_cluster: Cluster) -> None:
    dsn = f"postgresql://nobody:s3cret@127.0.0.1:{pg_cluster.port}/nowhere"
    with pytest.raises(StoreError) as info:
        await PostgresStore.open(dsn)
    assert "s3cret" not in str(info.value)
    assert "s3cret" not in repr(PostgresStore(dsn))


async def test_a_closed_store_raises_store_error(pg_target: Target) -> None:
    store = await PostgresStore.open(pg_target.dsn, schema=pg_target.schema)
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.last_seq()
    with pytest.raises(StoreError, match="closed"):
        await store.start_workflow("wf", ["a"], None, T0)


# ---------------------------------------------------------------- schema and migrations


async def test_the_tables_live_in_their_schema_with_the_version(pg: PostgresStore) -> None:
    await start(pg)
    with psycopg.connect(pg.dsn) as conn:
        version = conn.execute(f"SELECT version FROM {pg.schema}.agentq_schema").fetchone()
        assert version == (SCHEMA_VERSION,)
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute(f"UPDATE {pg.schema}.events SET kind = 'x'")
        conn.rollback()
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            conn.execute(f"DELETE FROM {pg.schema}.events")


async def test_a_newer_schema_version_is_refused(pg_target: Target) -> None:
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        await start(store)
    with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {pg_target.schema}.agentq_schema SET version = 99")
    try:
        with pytest.raises(SchemaError, match="version 99"):
            await PostgresStore.open(pg_target.dsn, schema=pg_target.schema)
    finally:
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {pg_target.schema}.agentq_schema SET version = {SCHEMA_VERSION}")


def downgrade(dsn: str, schema: str, version: int) -> None:
    """Undo the migrations after `version` (the tables and columns they add), newest first."""
    made = re.compile(
        r"(?:CREATE TABLE (?:IF NOT EXISTS )?|ALTER TABLE )(\w+)(?: ADD COLUMN (\w+))?"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statements in reversed(migrations()[version:]):
            for statement in reversed(statements):
                found = made.match(statement)
                if found and found[2]:
                    conn.execute(f"ALTER TABLE {schema}.{found[1]} DROP COLUMN {found[2]}")
                elif found:
                    conn.execute(f"DROP TABLE IF EXISTS {schema}.{found[1]} CASCADE")
        conn.execute(f"UPDATE {schema}.agentq_schema SET version = {version}")


async def test_a_schema_before_schedules_gets_them_on_open(pg_target: Target) -> None:
    """A database of the release before schedules migrates: its workflows are kept, it gains
    the schedules table (empty), and a schedule stored now reads back."""
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        await start(store, steps=["a"])
    before = next(
        i for i, m in enumerate(migrations()) if any("CREATE TABLE schedules" in s for s in m)
    )
    downgrade(pg_target.dsn, pg_target.schema, before)
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        assert await store.schedules() == []
        await store.put_schedule("n", "d", cron=None, every=1.0, input=None, next_tick=T0, now=T0)
        assert [r.name for r in await store.schedules()] == ["n"]
        assert await store.get_workflow("wf") is not None


async def test_a_schema_before_end_hooks_gets_the_outbox_on_open(pg_target: Target) -> None:
    """Ends after the upgrade get their outbox row; the workflows that ended before do not."""
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        await start(store, steps=["a"])
        await run_step(store)
        await start(store, "open", steps=["a"])
    before = next(
        i for i, m in enumerate(migrations()) if any("CREATE TABLE end_hooks" in s for s in m)
    )
    downgrade(pg_target.dsn, pg_target.schema, before)
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        assert await store.hooks("wf") == []
        await run_step(store, "open", now=T0 + 1)
        [row] = await store.hooks("open")
        assert (row.state, row.delivered) == ("completed", False)


async def test_a_version_3_schema_gets_deadlines_on_open(pg_target: Target) -> None:
    """A database of the release before workflow deadlines (schema 3) migrates to 4: its
    workflows have no deadline; new ones store theirs."""
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        await start(store)
    downgrade(pg_target.dsn, pg_target.schema, 3)
    async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
        row = await store.get_workflow("wf")
        assert row is not None and row.deadline is None
        made, _ = await store.start_workflow("new", ["x"], None, T0, deadline=T0 + 60)
        assert made.deadline == T0 + 60 == (await store.get_workflow("new")).deadline  # type: ignore[union-attr]
    with psycopg.connect(pg_target.dsn) as conn:
        version = conn.execute(f"SELECT version FROM {pg_target.schema}.agentq_schema")
        assert version.fetchone() == (SCHEMA_VERSION,) and SCHEMA_VERSION >= 4


async def test_a_schema_with_foreign_tables_is_refused(pg_target: Target) -> None:
    schema = f"{pg_target.schema}_shop"
    with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.orders (id int)")
    try:
        with pytest.raises(SchemaError, match=r"orders.*refusing"):
            await PostgresStore.open(pg_target.dsn, schema=schema)
    finally:
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_several_processes_migrate_one_new_database_at_once(pg_dsn: str) -> None:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(OPENER), pg_dsn, str(i), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for i in range(4)
    ]
    try:
        for proc in procs:  # every process has imported agentq and psycopg: now go together
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                assert (await proc.stdout.readline()).strip() == b"ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = [await proc.communicate() for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    assert sorted(out.split()[-1] for out, _ in outputs) == [b"wf0", b"wf1", b"wf2", b"wf3"]
    async with PostgresStore(pg_dsn) as store:
        assert len(await store.workflows()) == 4
        assert [e.seq for e in await store.load_events()] == [1, 2, 3, 4]


# ---------------------------------------------------------------- concurrency


async def test_two_pools_claiming_500_ready_steps_make_500_distinct_claims(
    pg_target: Target,
) -> None:
    n = 500
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema, max_size=8) as a,
        PostgresStore(pg_target.dsn, schema=pg_target.schema, max_size=8) as b,
    ):
        for i in range(n):
            await a.start_workflow(f"wf{i}", ["s"], None, T0)

        async def claim_all(store: PostgresStore, worker: str) -> list[tuple[str, int]]:
            results = await asyncio.gather(
                *(store.claim_step(f"wf{i}", 0, worker, 60.0, T0) for i in range(n))
            )
            return [
                (r.execution.workflow_id, r.execution.lease_token)
                for r in results
                if isinstance(r, Claimed)
            ]

        won_a, won_b = await asyncio.gather(claim_all(a, "A"), claim_all(b, "B"))
        won = won_a + won_b
        assert len(won) == n and len({wid for wid, _ in won}) == n
        assert {token for _, token in won} == {1}
        assert won_a and won_b, "one pool won everything: no race"
        events = await a.load_events()
        assert [e.seq for e in events] == list(range(1, 2 * n + 1))
        assert Counter(str(e.kind) for e in events) == {"WorkflowStarted": n, "StepStarted": n}
        loser = await b.claim_step("wf0", 0, "C", 60.0, T0)
        assert isinstance(loser, HeldByOther)


async def test_two_stores_starting_one_workflow_create_it_once(pg_target: Target) -> None:
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as a,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as b,
    ):
        results = await asyncio.gather(
            *(s.start_workflow(f"wf{i}", ["x", "y"], i, T0) for i in range(50) for s in (a, b))
        )
        assert sum(created for _, created in results) == 50
        events = await b.load_events()
        assert [e.seq for e in events] == list(range(1, 51))


# ---------------------------------------------------------------- the server goes away


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    """A cluster of this test's own, to restart and stop."""
    cluster = Cluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_a_restarted_server_is_reconnected_and_nothing_is_lost(
    own_cluster: Cluster,
) -> None:
    async with PostgresStore(own_cluster.dsn(), min_size=2, max_size=4) as store:
        await start(store)
        await run_step(store)
        before = await store.load_events()
        own_cluster.restart()  # every pooled connection dies
        assert await store.load_events() == before  # a read reconnects
        ex = await claim(store, index=1)
        await store.complete_step(ex, "b", T0)
        await run_step(store, index=2)
        row = await store.get_workflow("wf")
        assert row is not None and row.state is WorkflowState.COMPLETED
        events = await store.load_events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [str(e.kind) for e in events].count("StepCompleted") == 3


async def test_a_stopped_server_fails_with_store_error_then_recovers(
    own_cluster: Cluster,
) -> None:
    async with PostgresStore(own_cluster.dsn(), connect_timeout=2) as store:
        await start(store)
        own_cluster.stop_server()
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"no connection within|connection lost"):
            async with asyncio.timeout(30):
                await store.claim_step("wf", 0, "w1", 10.0, T0)
        assert time.monotonic() - started < 20
        own_cluster.start_server()
        ex = await claim(store)  # the refused claim recorded nothing: the step is pending
        assert ex.lease_token == 1
        assert [str(e.kind) for e in await store.load_events()] == [
            "WorkflowStarted", "StepStarted"]


# ---------------------------------------------------------------- wake-ups (LISTEN/NOTIFY)


async def test_wait_for_work_wakes_when_another_store_starts_a_workflow(
    pg_target: Target,
) -> None:
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as waiter,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as writer,
    ):
        assert await waiter.wait_for_work(0.01) is False  # listening from now on
        waiting = asyncio.ensure_future(waiter.wait_for_work(30))
        await asyncio.sleep(0)
        started = time.monotonic()
        await writer.start_workflow("wf", ["a"], None, T0)
        async with asyncio.timeout(10):
            assert await waiting is True
        assert time.monotonic() - started < 5


async def test_a_claim_alone_wakes_nobody_and_a_completed_step_does(pg_target: Target) -> None:
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as waiter,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as writer,
    ):
        await writer.start_workflow("wf", ["a", "b"], None, T0)
        assert await waiter.wait_for_work(0.01) is False  # listening from now on
        assert await waiter.wait_for_work(0.01) is False  # the start came before: not seen
        ex = await claim(writer)
        assert await waiter.wait_for_work(0.2) is False
        await writer.complete_step(ex, "a", T0)
        async with asyncio.timeout(10):
            assert await waiter.wait_for_work(30) is True


async def test_a_version_1_schema_is_migrated_and_a_lease_released_wakes_workers(
    pg_target: Target,
) -> None:
    """Migration 2: `LeaseReleased` (a fence lifted: the step may be claimed at once) wakes
    serving engines too, in a schema written at version 1 as in a new one."""
    schema = f"{pg_target.schema}_v1"
    with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute("\n".join(migrations()[0]))
        conn.execute("UPDATE agentq_schema SET version = 1")
    try:
        async with (
            PostgresStore(pg_target.dsn, schema=schema) as waiter,
            PostgresStore(pg_target.dsn, schema=schema) as writer,
        ):
            await writer.start_workflow("wf", ["a"], None, T0)
            ex = await claim(writer)
            await writer.cancel_workflow("wf", "stop", T0 + 1)
            await writer.retry_workflow("wf", None, T0 + 2)
            assert await waiter.wait_for_work(0.01) is False  # listening from now on
            assert await waiter.wait_for_work(0.01) is False  # the retry came before
            assert await writer.release_dead(ex, T0 + 3, HANDED_BACK_REASON)
            async with asyncio.timeout(10):
                assert await waiter.wait_for_work(30) is True
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            version = conn.execute(f"SELECT version FROM {schema}.agentq_schema").fetchone()
        assert version == (SCHEMA_VERSION,) and SCHEMA_VERSION >= 2
    finally:
        with psycopg.connect(pg_target.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_the_listener_is_reestablished_after_its_connection_drops(
    pg_target: Target,
) -> None:
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as waiter,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as writer,
    ):
        assert await waiter.wait_for_work(0.01) is False
        with psycopg.connect(pg_target.dsn, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
            ).fetchall()
        assert cut == [(True,)]
        async with asyncio.timeout(10):
            assert await waiter.wait_for_work(30) is True  # dropped: poll now
        assert await waiter.wait_for_work(0.01) is False  # listening again, new connection
        waiting = asyncio.ensure_future(waiter.wait_for_work(30))
        await asyncio.sleep(0)
        await writer.start_workflow("wf", ["a"], None, T0)
        async with asyncio.timeout(10):
            assert await waiting is True
        assert waiter._listener.connects == 2


async def test_wait_for_work_refuses_bad_timeouts_and_a_closed_store(pg_target: Target) -> None:
    store = await PostgresStore.open(pg_target.dsn, schema=pg_target.schema)
    with pytest.raises(ValueError, match="timeout"):
        await store.wait_for_work(-1)
    with pytest.raises(TypeError):
        await store.wait_for_work("1")  # type: ignore[arg-type]
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.wait_for_work(1)


async def test_a_store_never_closed_closes_its_pool_and_warns(pg_target: Target) -> None:
    store = await PostgresStore.open(pg_target.dsn, schema=pg_target.schema)
    await start(store)
    pool = store._connections.pool
    assert pool is not None
    with pytest.warns(ResourceWarning, match="never closed"):
        store.__del__()
    assert pool.closed
    await store.close()  # closing it later is harmless


async def test_a_step_write_is_a_compare_and_swap_on_the_token_read(pg: PostgresStore) -> None:
    """Belt and braces under the row lock: a step row whose token changed between the read
    and the write (impossible through agentq's verbs) makes the write refuse."""
    await start(pg)
    await claim(pg)
    conn = psycopg.connect(pg.dsn)
    try:
        Connections(pg.dsn, pg.schema, 1, 1, 5.0)._configure(conn)  # as the pool's
        tx = PostgresTx(conn)
        _, steps = tx.load("wf", 0, 0)
        assert steps[0].lease_token == 1
        conn.execute("UPDATE steps SET lease_token = 7 WHERE step_index = 0")  # behind its back
        with pytest.raises(LeaseLostError, match="no longer #1"):
            tx.put_step(steps[0], False)
    finally:
        conn.rollback()
        conn.close()
    rows = await pg.step_rows("wf")
    assert rows[0].lease_token == 1


async def test_ready_workflows_skips_a_workflow_another_transaction_holds(
    pg: PostgresStore,
) -> None:
    for i in range(3):
        await pg.start_workflow(f"wf{i}", ["a"], None, T0, definition="d")
    with psycopg.connect(pg.dsn) as other:  # a claim in flight elsewhere holds wf1's row
        other.execute(
            f"SELECT 1 FROM {pg.schema}.workflows WHERE workflow_id = %s FOR UPDATE", (b"wf1",)
        )
        ready = await pg.ready_workflows(T0, {"d": ["a"]}, 10)
        assert [r.workflow.workflow_id for r in ready] == ["wf0", "wf2"]
        other.rollback()
    ready = await pg.ready_workflows(T0, {"d": ["a"]}, 10)
    assert [(r.workflow.workflow_id, r.workflow.definition) for r in ready] == [
        ("wf0", "d"), ("wf1", "d"), ("wf2", "d")]


async def test_several_waiters_on_one_store_share_its_listener(pg_target: Target) -> None:
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as waiter,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as writer,
    ):
        assert await waiter.wait_for_work(0.01) is False
        reader = asyncio.ensure_future(waiter.wait_for_work(30))  # the first one reads
        await asyncio.sleep(0.01)
        assert waiter._listener._reading
        second = asyncio.ensure_future(waiter.wait_for_work(30))
        third = asyncio.ensure_future(waiter.wait_for_work(30))
        short = asyncio.ensure_future(waiter.wait_for_work(0.05))
        async with asyncio.timeout(10):
            assert await short is False  # its own timeout, while another task reads
        reader.cancel()  # the reader leaves (serve cancels its wait): another takes over
        await asyncio.sleep(0.01)
        assert waiter._listener._reading
        await writer.start_workflow("wf", ["a"], None, T0)
        async with asyncio.timeout(10):
            assert await second is True and await third is True
        assert waiter._listener.connects == 1


async def test_a_serving_engine_notices_new_work_at_once_through_notify(
    pg_target: Target,
) -> None:
    """The serving engine polls once an hour on a clock that never moves: only NOTIFY can
    tell it that another process (here another store) started an instance."""
    clock = FakeClock()

    async def body(ctx: StepContext) -> str:
        return f"{ctx.step_name}:{ctx.input}"

    job = WorkflowDef("job", [StepDef("a", body), StepDef("b", body)])
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as served,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as elsewhere,
        Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
    ):
        engine = WorkflowEngine(queue, served, worker_id="server", clock=clock)
        engine.register(job)
        serving = asyncio.ensure_future(engine.serve(poll_interval=3600.0))
        try:
            async with asyncio.timeout(20):
                await clock.wait_for_sleepers(1)  # polled once, found nothing: asleep
            await elsewhere.start_workflow("wf", ["a", "b"], 7, clock.time(), definition="job")
            async with asyncio.timeout(20):  # the clock stays put: only NOTIFY can do it
                while True:
                    row = await elsewhere.get_workflow("wf")
                    if row is not None and row.state is WorkflowState.COMPLETED:
                        break
                    await asyncio.sleep(0.01)
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        assert [s.output for s in await elsewhere.step_rows("wf")] == ["a:7", "b:7"]


async def test_work_committed_during_the_first_poll_wakes_the_serving_engine_at_once(
    pg_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, fault 6: the engine listens before it polls. Here another process starts
    an instance while the first poll reads (after its query saw nothing): were LISTEN to
    start only after that poll, the notification would be lost and the instance would wait
    for the next poll, an hour away on a clock that never moves."""
    clock = FakeClock()

    async def body(ctx: StepContext) -> str:
        return f"{ctx.step_name}:{ctx.input}"

    job = WorkflowDef("job", [StepDef("a", body)])
    async with (
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as served,
        PostgresStore(pg_target.dsn, schema=pg_target.schema) as elsewhere,
        Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
    ):
        read = served.ready_workflows
        polls = 0

        async def first_poll_then_commit(*args: Any) -> Any:
            nonlocal polls
            found = await read(*args)
            polls += 1
            if polls == 1:  # between this poll's query and the engine's next wait
                await elsewhere.start_workflow("wf", ["a"], 7, clock.time(), definition="job")
            return found

        monkeypatch.setattr(served, "ready_workflows", first_poll_then_commit)
        engine = WorkflowEngine(queue, served, worker_id="server", clock=clock)
        engine.register(job)
        serving = asyncio.ensure_future(engine.serve(poll_interval=3600.0))
        try:
            async with asyncio.timeout(20):  # the clock stays put: only NOTIFY can do it
                while True:
                    row = await elsewhere.get_workflow("wf")
                    if row is not None and row.state is WorkflowState.COMPLETED:
                        break
                    await asyncio.sleep(0.01)
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
        assert polls >= 2


async def test_connections_use_tcp_keepalives_unless_the_dsn_sets_its_own(
    pg_target: Target,
) -> None:
    for dsn, idle in ((pg_target.dsn, "10"), (f"{pg_target.dsn} keepalives_idle=30", "30")):
        async with PostgresStore(dsn, schema=pg_target.schema) as store:
            pool = store._connections.pool
            assert pool is not None
            with pool.connection() as conn:
                params = conn.info.get_parameters()
            assert (params["keepalives_idle"], params["keepalives_count"]) == (idle, "3")
            assert store._listener.kwargs["keepalives_interval"] == 5
