"""The contract suite's helpers over the verbs.

The `store` fixture is parametrised over every store (memory, SQLite, PostgreSQL); to run the
suite against another store, add its name to `STORES` and build it in `store`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import Target

from agentq.store import Claimed, DurableStore, Execution, MemoryStore, PostgresStore, SqliteStore

T0 = 1_767_225_600.0
"""The time the tests start at (Unix seconds)."""

STORES = ("memory", "sqlite", "postgres")


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DurableStore]:
    """A fresh store of every kind: SQLite on a file in `tmp_path`, PostgreSQL on this test's
    `pg_target`; closed afterwards."""
    if request.param == "postgres":
        target: Target = request.getfixturevalue("pg_target")
        s: DurableStore = await PostgresStore.open(target.dsn, schema=target.schema)
    else:
        s = await make_store(request.param, tmp_path)
    try:
        yield s
    finally:
        await s.close()



async def make_store(kind: str, tmp_path: Path) -> DurableStore:
    """Build a fresh MemoryStore or SqliteStore (on a file in `tmp_path`), for the state
    machines, which build their own stores outside fixtures."""
    if kind == "memory":
        return MemoryStore()
    return await SqliteStore.open(tmp_path / "store.db")


async def start(
    store: DurableStore, workflow_id: str = "wf", steps: Sequence[str] = ("a", "b", "c"),
    input: Any = None, now: float = T0,
) -> None:
    """Start a workflow, asserting it is new."""
    _, created = await store.start_workflow(workflow_id, steps, input, now)
    assert created


async def claim(
    store: DurableStore, workflow_id: str = "wf", index: int = 0, worker: str = "w1",
    ttl: float = 10.0, now: float = T0,
) -> Execution:
    """Claim a step, asserting the claim succeeds; return its execution."""
    result = await store.claim_step(workflow_id, index, worker, ttl, now)
    assert isinstance(result, Claimed), result
    return result.execution


async def run_step(
    store: DurableStore, workflow_id: str = "wf", index: int = 0, output: Any = None,
    now: float = T0,
) -> None:
    """Claim and complete a step."""
    await store.complete_step(await claim(store, workflow_id, index, now=now), output, now)


async def kinds(store: DurableStore, workflow_id: str | None = None) -> list[str]:
    """The kinds of the workflow's events (or all), in order."""
    return [str(e.kind) for e in await store.load_events(workflow_id)]
