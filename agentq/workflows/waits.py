"""The waits of a workflow's run, and what cuts them short: a `cancel` wakes them all at once.

A run waits in three places: a retry's backoff, a poll while another worker holds the step,
and the wait for an interrupted body to stop before the next attempt may start. Each waits
through `until`, together with the run's *waker*, a future that `Wakers.wake` resolves when
the workflow is cancelled: the wait then returns at once, whatever the backoff (an hour) or
the clock.

A cancel can end a run while a body that could not be interrupted (a thread) still runs.
`Wakers.linger` remembers that body until it stops and the durable calls it started are
recorded, so that a later run of the workflow in this engine starts its next attempt only after
it (one body per step at a time), and the engine's close waits for it (`Wakers.drain`): a
call that started keeps its outcome even when the workflow was cancelled.

Private to `agentq.workflows.driver`; ``until``, ``stop``, ``finish`` and ``committed`` (a
task no cancel stops: the cancel-safe claims) are the small asyncio helpers the driver's
waits and shutdown are built from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Wakers", "committed", "finish", "retrieve", "stop", "until"]

T = TypeVar("T")


class Wakers:
    """The wakers of the runs in progress, and the bodies cancels left running, by workflow.

    Entries live only as long as their run (or body): a long-lived engine keeps none for
    workflows that have ended.
    """

    def __init__(self) -> None:
        self._wakers: dict[str, set[asyncio.Future[None]]] = {}
        self._lingering: dict[str, asyncio.Task[None]] = {}

    def open(self, workflow_id: str) -> asyncio.Future[None]:
        """A new waker for a run of `workflow_id`; `close` it when the run ends."""
        waker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wakers.setdefault(workflow_id, set()).add(waker)
        return waker

    def close(self, workflow_id: str, waker: asyncio.Future[None]) -> None:
        """Forget a waker made by `open`."""
        wakers = self._wakers[workflow_id]
        wakers.discard(waker)
        if not wakers:
            del self._wakers[workflow_id]

    def wake(self, workflow_id: str) -> None:
        """End every wait of the runs of `workflow_id`, now and until they end."""
        for waker in self._wakers.get(workflow_id, ()):
            if not waker.done():
                waker.set_result(None)

    def linger(self, workflow_id: str, stopped: Coroutine[Any, Any, None]) -> None:
        """Remember a body that still runs after its run returned, until `stopped` (its body
        has returned and its durable calls are recorded) ends; `drain` waits for it."""
        task = asyncio.get_running_loop().create_task(
            stopped, name=f"agentq.lingering:{workflow_id}"
        )
        self._lingering[workflow_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._lingering.get(workflow_id) is done:
                del self._lingering[workflow_id]
            retrieve(done)

        task.add_done_callback(forget)

    async def after_lingering(self, workflow_id: str, waker: asyncio.Future[None]) -> None:
        """Wait until a body of `workflow_id` that a cancel left running has stopped."""
        lingering = self._lingering.get(workflow_id)
        if lingering is not None:
            await until(waker, asyncio.shield(lingering))

    def lingering(self) -> set[str]:
        """The workflows with a body a cancel left running."""
        return set(self._lingering)

    async def drain(self) -> None:
        """Wait until every body a cancel left running has stopped and the durable calls it
        started have been recorded (an engine's close: the store must outlive them)."""
        while self._lingering:
            await asyncio.wait(set(self._lingering.values()))

    def sizes(self) -> dict[str, int]:
        """How many workflows have wakers and lingering bodies (for tests)."""
        return {"wakers": len(self._wakers), "lingering": len(self._lingering)}


async def until(
    waker: asyncio.Future[None],
    waiting: Coroutine[Any, Any, None] | asyncio.Future[None],
) -> bool:
    """Await `waiting` in the current task unless `waker` is resolved first.

    No task is created: resolving `waker` cancels the current task while it awaits
    `waiting`, and that one cancel is undone (``Task.uncancel``) before returning, so a
    cancel that comes from outside is told apart and always propagates. A `waiting` that
    ends without suspending costs nothing more than awaiting it.

    Returns:
        True if `waiting` ended, False if the wait was cut short (`waiting` was cancelled; a
        shielded future is left running).

    Raises:
        Whatever `waiting` raised; `asyncio.CancelledError` if the caller is cancelled.
    """
    if waker.done():
        if asyncio.iscoroutine(waiting):
            waiting.close()
        return False
    task = asyncio.current_task()
    assert task is not None
    base = task.cancelling()
    waiting_now = True
    woke = False

    def wake(_: asyncio.Future[None]) -> None:
        nonlocal woke
        if waiting_now:  # never cancel the task once it has left this wait
            woke = True
            task.cancel()

    waker.add_done_callback(wake)
    try:
        await waiting
    except asyncio.CancelledError:
        if woke:
            task.uncancel()
            if task.cancelling() <= base:
                return False
        raise
    finally:
        waiting_now = False
        waker.remove_done_callback(wake)
    return True


class _Committed(asyncio.Task[T]):
    """A task that refuses every cancel (`committed`)."""

    def cancel(self, msg: Any | None = None) -> bool:
        """Refuse: the work runs to its end; an awaiter's cancel waits for it."""
        return False


def committed(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Start `work` in a task of its own that no cancel stops; await it at once.

    A cancel of the task that awaits it does not reach `work`: asyncio lets the awaiter's
    cancel wait until the awaited task has ended (it refused the cancel), then raises
    `asyncio.CancelledError` at the ``await``, where the caller still finds `work`'s answer
    in the task (``result()``). So a store verb awaited this way is cancel-safe as under
    `asyncio.shield`, for one task and two loop callbacks: no outer future, no relaying
    callbacks, one loop turn fewer. Not even the loop's shutdown cancels `work` (its
    ``gather`` of the tasks left waits for it): give it only work that ends by itself.
    """
    return _Committed(work, loop=asyncio.get_running_loop())


def retrieve(task: asyncio.Future[Any]) -> None:
    """A done callback: mark the task's exception as retrieved, so that a task nobody awaits
    any more (its awaiter was cancelled) never logs "Task exception was never retrieved"."""
    if not task.cancelled():
        task.exception()


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel `task` and wait until it has ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def finish(work: Coroutine[Any, Any, object]) -> None:
    """Run `work` to its end even if the caller is cancelled meanwhile.

    Raises:
        asyncio.CancelledError: The caller was cancelled meanwhile (raised once `work` has
            ended), or `work` itself was cancelled (the loop is shutting down).
        Whatever `work` raised.
    """
    task = asyncio.get_running_loop().create_task(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    if task.cancelled():
        raise asyncio.CancelledError
    task.result()
    if cancelled:
        raise asyncio.CancelledError
