"""Shared fixtures: a fake clock, a queue on it, and a store per kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentq.clock import FakeClock
from agentq.store import DurableStore
from agentq.store.memory import MemoryStore
from agentq.store.sqlite import SqliteStore


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
