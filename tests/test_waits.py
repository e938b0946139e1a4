"""The run's waits (agentq.workflows.waits): `until` is cut short by a waker and by nothing
else; an outside cancel always propagates; `finish` runs its work to the end; `committed` work
outlives a cancel of its awaiter."""

from __future__ import annotations

import asyncio

import pytest

from agentq.workflows.waits import committed, finish, until


async def test_until_returns_true_when_the_wait_ends() -> None:
    waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert await until(waker, asyncio.sleep(0)) is True
    waker.set_result(None)  # resolving it afterwards cancels nothing
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # still running: no stray cancel was delivered


async def test_until_is_cut_short_by_the_waker_and_cancels_the_wait() -> None:
    loop = asyncio.get_running_loop()
    waker: asyncio.Future[None] = loop.create_future()
    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    loop.call_soon(waker.set_result, None)
    assert await until(waker, forever()) is False
    assert cancelled == [True]
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert await until(waker, forever()) is False  # an already woken waker: at once
    assert cancelled == [True]  # the coroutine was closed without running


async def test_a_shielded_future_is_left_running() -> None:
    loop = asyncio.get_running_loop()
    waker: asyncio.Future[None] = loop.create_future()
    body: asyncio.Future[None] = loop.create_future()
    loop.call_soon(waker.set_result, None)
    assert await until(waker, asyncio.shield(body)) is False
    assert not body.done()
    body.set_result(None)


async def test_an_outside_cancel_always_propagates() -> None:
    loop = asyncio.get_running_loop()
    waker: asyncio.Future[None] = loop.create_future()

    async def waiter() -> bool:
        return await until(waker, loop.create_future())

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0)
    task.cancel()
    waker.set_result(None)  # woken in the same turn: the outside cancel still wins
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_finish_runs_its_work_to_the_end_then_raises_the_cancel() -> None:
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    done: list[str] = []

    async def work() -> None:
        await gate
        done.append("work")

    task = asyncio.ensure_future(finish(work()))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()  # twice: still waits
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["work"]


async def test_committed_work_outlives_a_cancel_of_its_awaiter() -> None:
    """A cancel of the awaiter waits for the work, then raises at the await; the answer is
    in the task, and the task itself refuses every cancel."""
    loop = asyncio.get_running_loop()
    gate: asyncio.Future[None] = loop.create_future()
    seen: list[object] = []

    async def work() -> str:
        await gate
        return "answer"

    async def caller() -> None:
        running = committed(work())
        try:
            await running
        except asyncio.CancelledError:
            seen.append(running.result())
            raise

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()  # it waits for the work's answer
    gate.set_result(None)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["answer"]
    assert task.cancelled()


async def test_committed_work_refuses_a_cancel_and_passes_its_error() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad")

    running = committed(failing())
    assert running.cancel() is False
    with pytest.raises(ValueError, match="bad"):
        await running
