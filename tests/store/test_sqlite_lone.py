"""A group-commit leader with nothing else ready on the loop leads at once (`LONE_LEADS`)."""

from __future__ import annotations

import asyncio
import collections
import types
from pathlib import Path
from typing import Any, cast

import pytest

import agentq.store.sqlite.batch as sqlite_batch
from agentq.store import SqliteStore, WorkflowState

from .conftest import kinds, run_step, start
from .test_sqlite import spy_batches

pytestmark = pytest.mark.timeout(30)


def spy_lingers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record each time a leader yields to the loop before taking its batch."""
    lingers: list[int] = []
    linger = sqlite_batch.GroupCommit._linger

    async def spied(self: sqlite_batch.GroupCommit) -> None:
        lingers.append(len(self._waiting))
        await linger(self)

    monkeypatch.setattr(sqlite_batch.GroupCommit, "_linger", spied)
    return lingers


async def test_nothing_ready_reads_asyncios_ready_queue() -> None:
    # The one private name it reads: fail loudly if asyncio changes it.
    loop = asyncio.get_running_loop()
    assert isinstance(getattr(loop, "_ready", None), collections.deque)
    handle = loop.call_soon(lambda: None)
    assert not sqlite_batch.nothing_ready(loop)
    handle.cancel()  # still queued until the loop pops it: still "something ready"
    assert not sqlite_batch.nothing_ready(loop)
    await asyncio.sleep(0)
    assert sqlite_batch.nothing_ready(loop)
    other = cast(asyncio.AbstractEventLoop, types.SimpleNamespace())  # uvloop: no `_ready`
    assert not sqlite_batch.nothing_ready(other)


async def test_a_lone_verb_commits_without_a_loop_turn(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        lingers = spy_lingers(monkeypatch)
        ran: list[bool] = []
        asyncio.get_running_loop().call_later(0, ran.append, True)  # runs at the next turn
        await start(store, steps=["a"])
        assert lingers == []
        assert ran == []  # the loop never turned
        await asyncio.sleep(0)  # a turn: this task runs first, the timer after it
        await asyncio.sleep(0)
        assert ran == [True]
        assert await kinds(store) == ["WorkflowStarted"]


async def test_verb_after_verb_the_loop_still_turns_every_lone_leads_plus_one(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        lingers = spy_lingers(monkeypatch)
        rounds = sqlite_batch.LONE_LEADS + 1
        for i in range(2 * rounds):
            await start(store, f"wf{i}", steps=["a"])
        assert lingers == [1, 1]  # the 17th and the 34th leader yielded, alone
        assert len(await store.workflows()) == 2 * rounds


async def test_a_leader_with_something_ready_lingers(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        lingers = spy_lingers(monkeypatch)
        asyncio.get_running_loop().call_soon(lambda: None)
        await start(store, steps=["a"])
        assert lingers == [1]


async def test_concurrent_callers_still_share_a_transaction(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first caller of each round has the others ready behind it, so it lingers and they
    # all ride in its batch, as before.
    async with SqliteStore(db_path) as store:
        await store.last_seq()  # opened
        sizes = spy_batches(monkeypatch)

        async def flow(i: int) -> Any:
            await start(store, f"wf{i}", ["a"])
            await run_step(store, f"wf{i}", 0)

        await asyncio.gather(*(flow(i) for i in range(4)))
        assert sizes == [4, 4, 4]
        assert {w.state for w in await store.workflows()} == {WorkflowState.COMPLETED}
