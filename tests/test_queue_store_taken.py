"""Queue(store=...): the call a stored outcome describes, and a store closed under the queue.

- F8: the stored fingerprint is the call's as the push claimed its key (what memory
  compares), not as its globals are when the body returns.
- F6: a store closed while jobs are in flight costs one log line, not a traceback a job.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import pytest

from agentq.errors import KeyConflictError
from agentq.outcomes import Completed
from agentq.queue import Cached, Job, JobOutcomeStore, Queue, Queued
from agentq.store import DurableStore, MemoryStore

pytestmark = pytest.mark.timeout(30)

user = "alice"  # the global the jobs below read; their bodies rebind it while they run


async def send(to: str) -> str:
    global user
    user = "bob"  # rebound while the job runs, after its push
    return f"sent to {to}"


def greet() -> Job:
    return Job("greet", lambda: send(user))  # one code object for every push


@pytest.fixture(autouse=True)
def _reset_user() -> None:
    global user
    user = "alice"


@pytest.mark.parametrize("nowait", [False, True])
async def test_the_stored_call_is_the_one_pushed_not_the_globals_at_completion(
    nowait: bool,
) -> None:
    global user
    store = MemoryStore()
    async with Queue(store=store) as first:
        if nowait:
            accepted = first.push_nowait(greet())
            assert isinstance(accepted, Queued)
            assert await accepted.handle == Completed("sent to alice")
        else:
            assert await first.push_and_wait(greet()) == "sent to alice"
        assert user == "bob"
        user = "alice"
        assert await first.push(greet()) == Cached("sent to alice")  # memory: same call
    async with Queue(store=store) as restarted:  # the store agrees with memory
        user = "bob"
        with pytest.raises(KeyConflictError, match="stored outcome"):
            await restarted.push(greet())  # another call: never alice's answer
        user = "alice"
        assert await restarted.push(greet()) == Cached("sent to alice")


async def test_a_store_closed_under_the_queue_costs_one_line_and_waiters_get_outputs(
    store: DurableStore, caplog: pytest.LogCaptureFixture
) -> None:
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: reported.append(ctx))
    caplog.set_level(logging.DEBUG, logger="agentq")
    gate, all_running = asyncio.Event(), asyncio.Event()
    running: list[int] = []

    async def work(i: int) -> int:
        running.append(i)
        if len(running) == 3:
            all_running.set()
        await gate.wait()
        return i

    assert isinstance(store, JobOutcomeStore)
    async with Queue(store=store) as queue:
        pushes = [asyncio.ensure_future(queue.push_and_wait(Job(f"j{i}", functools.partial(
            work, i)))) for i in range(3)]
        await all_running.wait()  # every job is past its store read, in its body
        await store.close()  # a notebook cell closes the store under the queue
        gate.set()
        assert await asyncio.gather(*pushes) == [0, 1, 2]  # kept in memory
        assert await queue.push(Job("j0", functools.partial(work, 0))) == Cached(0)
    assert reported == []  # no traceback through the loop's exception handler
    lines = [r for r in caplog.records if "was not saved" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert all(r.exc_info is None and r.name == "agentq" for r in lines)
    assert "store was closed" in lines[0].getMessage()
