"""Shared fixtures: a fake clock, a queue on it, and a store per kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore
from agentq.store.memory import MemoryStore
from agentq.store.sqlite import SqliteStore
from agentq.workflows import WorkflowEngine


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agentq.db"


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DurableStore]:
    """A fresh store of each kind (SQLite on a file in `tmp_path`), closed afterwards."""
    if request.param == "memory":
        s: DurableStore = MemoryStore()
    else:
        s = await SqliteStore.open(tmp_path / "engine.db")
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
