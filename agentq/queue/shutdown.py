"""Closing a queue: stop admission, drain or abandon, wait for bodies to stop, report.

`Shutdown` runs each close of one queue over the queue's `Dispatcher`: stop admission, refuse
the pushes waiting for room, wait for the lanes to drain (re-checked whenever a permit is
released), then drop what still waits and cancel what still runs, and wait, until the
deadline, for cancelled bodies to stop.

Every call does all of that on what is left, and its `CloseReport` says what *that call* did
and saw (issue 9 item 15): a second close is not handed the first one's report, which would
be stale (a thread it listed as unstopped may have returned since, and jobs still running may
have admitted nested children after the first close). A later call is marked
``already_closed``; it drops and cancels only what it finds, waits again, until its own
deadline, for the bodies still running, and lists those that still run when it returns.
Calls may overlap: each abandons a job at most once between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentq.errors import DeadlockError
from agentq.queue.dispatch import Dispatcher
from agentq.queue.lane import CLOSED, QUEUED
from agentq.queue.records import CURRENT, THREAD_BODY

__all__ = ["CloseReport"]

_GRACE_ROUNDS = 10  # loop iterations given to cancelled async bodies to unwind


@dataclass(frozen=True, slots=True)
class CloseReport:
    """What one call of `Queue.close` had to abandon, and what still ran when it returned.

    Attributes:
        dropped: Keys of admitted jobs that this call dropped before they ran. Their handles
            yield ``Failed(cancelled)`` whose exception is `JobLost`, and their keys were
            released.
        cancelled: Keys of running jobs that this call cancelled (``Failed(cancelled)``).
        unstopped: Keys of jobs whose body had still not stopped when this call returned (a
            thread, or a body that ignores cancellation, cancelled by this call or an earlier
            one); each keeps its permit until it does. Close again to wait for them.
        already_closed: Whether the queue was already closed (or closing) before this call:
            its report then covers only what this call found left.
    """

    dropped: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    unstopped: tuple[str, ...] = ()
    already_closed: bool = field(default=False, kw_only=True)

    @property
    def abandoned(self) -> tuple[str, ...]:
        """Every job that did not finish on its own: ``dropped + cancelled``."""
        return self.dropped + self.cancelled

    @property
    def clean(self) -> bool:
        """Whether every admitted job finished on its own."""
        return not (self.dropped or self.cancelled or self.unstopped)


class Shutdown:
    """The closes of one queue.

    Args:
        dispatch: The queue's dispatcher (and through it, its ledger).
    """

    __slots__ = ("_dispatch",)

    def __init__(self, dispatch: Dispatcher) -> None:
        self._dispatch = dispatch

    async def close(self, drain: bool, limit: float | None) -> CloseReport:
        """`Queue.close`: shut down what is left and report what this call did."""
        self._dispatch.ledger.bind()
        self._refuse_from_inside()
        already_closed = self._dispatch.closing
        return await self._shutdown(drain, limit, already_closed)

    def _refuse_from_inside(self) -> None:
        """Raise `DeadlockError` if the caller is a job of this queue that close would wait for.

        That is a job body awaiting close in its own task (inline children share it), or a
        thread body, which blocks on the coroutine it submitted to the loop. A task that a job
        merely starts is not refused: it waits for the job like any other caller.
        """
        current = CURRENT.get()
        if (
            current is not None
            and current.owner is self._dispatch.ledger
            and current.in_body
            and (current.phase == THREAD_BODY or current.task is asyncio.current_task())
        ):
            raise DeadlockError(
                f"close() called from inside {current.title} would wait for "
                f"{current.title} itself to finish; schedule it instead "
                "(asyncio.get_running_loop().create_task(queue.close()))"
            )

    async def _shutdown(
        self, drain: bool, limit: float | None, already_closed: bool
    ) -> CloseReport:
        dispatch = self._dispatch
        ledger = dispatch.ledger
        dispatch.close_admission()
        loop = ledger.running_loop()
        lanes = tuple(ledger.lanes.values())
        timer = None if limit is None else loop.create_task(ledger.clock.sleep(limit))
        dropped: list[str] = []
        cancelled: list[str] = []
        try:
            for lane in lanes:
                while (waiter := lane.next_room_waiter()) is not None:
                    rec, fut = waiter
                    dispatch.abandon(rec, "the queue closed")
                    fut.set_result(CLOSED)
            if drain:

                def drained() -> bool:
                    return all(lane.queued == 0 and lane.running == 0 for lane in lanes)

                await self._until(drained, timer)
            for lane in lanes:
                for rec in tuple(lane.waiting):
                    if rec.state == QUEUED and rec.outcome is None:
                        dropped.append(rec.key)
                        dispatch.abandon(rec, "the queue closed before it ran")
                lane.clear_waiting()
                for rec in tuple(lane.holders):
                    if dispatch.cancel(rec):
                        cancelled.append(rec.key)

            def stopped() -> bool:
                return all(lane.running == 0 for lane in lanes)

            for _ in range(_GRACE_ROUNDS):
                if stopped():
                    break
                await asyncio.sleep(0)
            await self._until(stopped, timer)
            shared = dispatch.arbiter.shared
            if shared is not None and shared.tasks:  # its store writes (settles, pauses) end too
                idle = loop.create_task(shared.idle())
                waits = (idle,) if timer is None else (idle, timer)
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                idle.cancel()
        finally:
            if timer is not None:
                timer.cancel()
        unstopped = tuple(rec.key for lane in lanes for rec in lane.holders)
        return CloseReport(
            tuple(dropped), tuple(cancelled), unstopped, already_closed=already_closed
        )

    async def _until(self, done: Callable[[], bool], timer: asyncio.Task[None] | None) -> None:
        """Wait until `done()` holds (re-checked whenever a permit is released) or `timer` ends."""
        dispatch = self._dispatch
        while not done():
            if timer is not None and timer.done():
                return
            watch = dispatch.watch()
            waits: Iterable[asyncio.Future[Any]] = (watch,) if timer is None else (watch, timer)
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
