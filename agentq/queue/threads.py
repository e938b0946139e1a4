"""Running a plain callable in a thread of the loop's default executor, for a job's body.

`in_thread` runs the callable with the caller's context variables in a worker thread and
returns its result, or `Raised` carrying what it raised (a future cannot carry every
exception: ``StopIteration`` is refused, and a thread's ``KeyboardInterrupt`` is no Ctrl-C).
A thread cannot be cancelled: if the waiting task is cancelled from outside, the record is
settled cancelled at once and the task keeps waiting for the thread before re-raising, so
the job's permit is held until the thread has really returned (BH-26).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable
from typing import Any

from agentq.queue.ledger import Ledger, cancelled_outcome
from agentq.queue.records import Record

__all__ = ["Raised", "discard", "in_thread"]


def discard(value: Any) -> None:
    if inspect.iscoroutine(value):
        value.close()  # a coroutine nobody will await: close it so no warning is raised


class Raised:
    """What a thread raised, passed back as a value: a future cannot carry every exception
    (``StopIteration`` is refused), and a ``KeyboardInterrupt`` from a thread is no Ctrl-C."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def in_thread(ledger: Ledger, record: Record, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a worker thread: its result, or `Raised` with what it raised.

    If cancelled from outside, wait for the thread, then re-raise.
    """
    loop = ledger.running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    loop.run_in_executor(None, _thread_main, loop, done, contextvars.copy_context(), fn)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError as exc:
        # Interrupts never cancel a thread phase, so this comes from outside. The thread
        # cannot be stopped: record the cancel now, keep the permit until it has returned.
        ledger.settle(record, cancelled_outcome(f"{record.title} was cancelled", exc))
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                continue
        if not done.cancelled():
            discard(done.result())
        raise


def _thread_main(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    ctx: contextvars.Context,
    fn: Callable[[], Any],
) -> None:
    try:
        result = ctx.run(fn)
    except BaseException as exc:
        result = Raised(exc)
    try:
        loop.call_soon_threadsafe(_resolve, done, result)
    except RuntimeError:  # the loop is closed: nobody waits for this thread any more
        discard(result)


def _resolve(done: asyncio.Future[Any], result: Any) -> None:
    if done.done():
        discard(result)
    else:
        done.set_result(result)
