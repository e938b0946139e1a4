"""Closing a queue: stop admission, drain or abandon, wait for bodies to stop, report."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from agentq.errors import DeadlockError
from agentq.queue.jobs import QUEUED, THREAD_BODY, _Record
from agentq.queue.nested import CLOSED
from agentq.queue.runner import CURRENT

if TYPE_CHECKING:
    from agentq.queue.core import _QueueCore as Queue
    from agentq.queue.lanes import _Lane
    from agentq.queue.queue import CloseReport

_GRACE_ROUNDS = 10  # loop iterations given to cancelled async bodies to unwind


async def close(queue: Queue, drain: bool, limit: float | None) -> CloseReport:
    """`Queue.close`: run the shutdown once; later calls get the same report."""
    loop = queue._bind()
    closer = queue._closer
    if closer is None or not closer.done():
        _refuse_from_inside(queue)
    if closer is not None:
        return await asyncio.shield(closer)
    closer = queue._closer = loop.create_future()
    try:
        report = await _shutdown(queue, drain, limit)
    except BaseException:
        queue._closer = None  # a later close() tries again
        closer.cancel()
        raise
    closer.set_result(report)
    return report


def _refuse_from_inside(queue: Queue) -> None:
    """Raise `DeadlockError` if the caller is a job of `queue` that close would wait for.

    That is a job body awaiting close in its own task (inline children share it), or a
    thread body, which blocks on the coroutine it submitted to the loop. A task that a job
    merely starts is not refused: it waits for the job like any other caller.
    """
    current = CURRENT.get()
    if (
        current is not None
        and current.queue is queue
        and current.in_body
        and (current.phase == THREAD_BODY or current.task is asyncio.current_task())
    ):
        raise DeadlockError(
            f"close() called from inside job {current.key!r} would wait for job "
            f"{current.key!r} itself to finish; schedule it instead "
            "(asyncio.get_running_loop().create_task(queue.close()))"
        )


async def _shutdown(queue: Queue, drain: bool, limit: float | None) -> CloseReport:
    from agentq.queue.queue import CloseReport

    queue._closing = True
    loop = queue._loop_or_raise()
    lanes = tuple(queue._lanes.values())
    timer = None if limit is None else loop.create_task(queue._clock.sleep(limit))
    dropped: list[str] = []
    cancelled: list[str] = []
    try:
        for lane in lanes:
            _refuse_room_waiters(queue, lane)
            for idle in lane.idle:
                if not idle.done():
                    idle.set_result(None)  # an idle worker exits
            lane.idle.clear()
        if drain:

            def drained() -> bool:
                return all(lane.queued == 0 and lane.running == 0 for lane in lanes)

            await _until(queue, drained, timer)
        for lane in lanes:
            for rec in tuple(lane.waiting):
                if rec.state == QUEUED and rec.outcome is None:
                    dropped.append(rec.key)
                    queue._abandon(rec, "the queue closed before it ran")
            lane.waiting.clear()
            for rec in tuple(lane.holders):
                if queue._cancel(rec):
                    cancelled.append(rec.key)

        def stopped() -> bool:
            return all(lane.running == 0 for lane in lanes)

        for _ in range(_GRACE_ROUNDS):
            if stopped():
                break
            await asyncio.sleep(0)
        await _until(queue, stopped, timer)
    finally:
        if timer is not None:
            timer.cancel()
        queue._watch = None
    unstopped = tuple(rec.key for lane in lanes for rec in lane.holders)
    return CloseReport(tuple(dropped), tuple(cancelled), unstopped)


async def _until(
    queue: Queue, done: Callable[[], bool], timer: asyncio.Task[None] | None
) -> None:
    """Wait until `done()` holds (re-checked whenever a permit is released) or `timer` ends."""
    loop = queue._loop_or_raise()
    while not done():
        if timer is not None and timer.done():
            return
        watch: asyncio.Future[None] = loop.create_future()
        queue._watch = watch
        waits: Iterable[asyncio.Future[Any]] = (watch,) if timer is None else (watch, timer)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)


def _refuse_room_waiters(queue: Queue, lane: _Lane) -> None:
    space = lane.space
    while space:
        rec, fut = space.popleft()
        if fut.done():
            continue
        queue._abandon(rec, "the queue closed")
        fut.set_result(CLOSED)


def worker_cancelled(lane: _Lane, idle: asyncio.Future[_Record | None]) -> None:
    """An idle worker was cancelled from outside: leave the lane consistent."""
    if idle in lane.idle:
        lane.idle.remove(idle)
    elif idle.done() and not idle.cancelled():
        rec = idle.result()
        if rec is not None:  # handed a record just before: put it back, first in line
            requeue(lane, rec)


def requeue(lane: _Lane, rec: _Record) -> None:
    """Give back the permit of a record a cancelled worker had not started."""
    lane.running -= 1
    lane.holders.discard(rec)
    if rec.outcome is None:
        rec.state = QUEUED
        lane.waiting.appendleft(rec)
        lane.queued += 1
