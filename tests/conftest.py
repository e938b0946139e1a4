"""Shared fixtures: a fake clock, a queue on it, a store per kind, a PostgreSQL cluster.

PostgreSQL: one throwaway cluster for the whole run (`pg_cluster`, started on first use by
`tests/pg_cluster.py`, which installs PostgreSQL with apt-get when it is missing), one database
of it for the run, and per test a schema whose tables are empty (`pg_target`: creating the
tables costs about 0.15 s, emptying them for the next test a few ms), or a whole new database
(`pg_dsn`, about 0.5 s). When PostgreSQL cannot be had, the PostgreSQL tests FAIL with
the reason; ``AGENTQ_SKIP_PG=1`` skips them instead, except under ``CI=true``, where it fails
them too (a CI run never skips them silently).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pg_cluster import Cluster, PostgresUnavailable, Schemas, Target

from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore
from agentq.store.memory.store import MemoryStore
from agentq.store.postgres.store import PostgresStore
from agentq.store.sqlite.store import SqliteStore
from agentq.workflows import WorkflowEngine


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agentq.db"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL cluster for the whole run (about 2 s to start)."""
    if os.environ.get("AGENTQ_SKIP_PG") == "1":
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("AGENTQ_SKIP_PG=1 is set under CI: the PostgreSQL tests must run there")
        pytest.skip("AGENTQ_SKIP_PG=1: PostgreSQL tests skipped on this machine")
    try:
        cluster = Cluster().start()
    except PostgresUnavailable as exc:
        pytest.fail(f"PostgreSQL is needed for these tests and is unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> Iterator[str]:
    """The DSN of a fresh, empty database of the session's cluster, dropped afterwards
    (``CREATE DATABASE``: about half a second; most tests want `pg_target`)."""
    dsn = pg_cluster.create_database()
    try:
        yield dsn
    finally:
        pg_cluster.drop_database(dsn)


@pytest.fixture(scope="session")
def pg_schemas(pg_cluster: Cluster) -> Iterator[Schemas]:
    """The session's database of test schemas (see `pg_cluster.Schemas`)."""
    yield Schemas(pg_cluster.create_database())


@pytest.fixture
def pg_target(pg_schemas: Schemas) -> Iterator[Target]:
    """A `Target` (DSN and schema) of PostgreSQL tables empty for this test: a schema of the
    session's database, emptied afterwards and handed to a later test."""
    target = pg_schemas.take()
    try:
        yield target
    finally:
        pg_schemas.give_back(target)


async def open_postgres(request: pytest.FixtureRequest) -> PostgresStore:
    """Open a `PostgresStore` on this test's `pg_target`."""
    target: Target = request.getfixturevalue("pg_target")
    return await PostgresStore.open(target.dsn, schema=target.schema)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DurableStore]:
    """A fresh store of each kind (SQLite on a file in `tmp_path`), closed afterwards.

    The engine suites run on these two; the contract suite (``tests/store``) adds
    PostgreSQL, and so does ``test_recovery.py``.
    """
    if request.param == "memory":
        s: DurableStore = MemoryStore()
    elif request.param == "sqlite":
        s = await SqliteStore.open(tmp_path / "engine.db")
    else:
        s = await open_postgres(request)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    """An engine (worker "w1", 30 s leases) on the fake clock, over a 4-permit MEDIUM lane."""
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()
