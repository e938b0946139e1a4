"""An opt-in way to run agentq's coroutines from code that cannot ``await``.

agentq is async, and in Jupyter you never need this module: the kernel runs an event loop and
top-level ``await`` works in every cell (``result = await engine.run(wf)``). `run` is for the
rare place that must stay synchronous, such as a callback or a library hook called from a cell:

    >>> from agentq import sync
    >>> result = sync.run(engine.run(wf))

How it works: with no event loop running in this thread, `run` is `asyncio.run`. With one
running (Jupyter's), the coroutine must run on *that* loop, because the queue, the engine and
the store belong to it; `run` then makes the loop re-entrant with ``nest_asyncio2`` (the
maintained fork of nest-asyncio that ipykernel itself depends on) and runs the coroutine as a
real task, so `asyncio.timeout` and step timeouts keep working inside it. The patch is applied
by the first call of `run` that needs it, never on import, and it stays for the life of the
process (it cannot be undone safely).

What `run` refuses: in a kernel, a blocking call holds the cell, and the kernel handles the
messages of the page (a click on Approve) only after the cell ends. Work that waits for a click
under `run` would wait forever, silently. So, while a widget that takes clicks (an
`ApprovalPanel`, a `Dashboard`) runs its refresher on this loop, `run` refuses up front, before
it blocks, with a `DeadlockError` that says to write ``await`` instead. Such widgets name their
refresher task with `CLICK_TASK_PREFIX`; that name is all `run` looks at (no global state).
A ``time.sleep`` polling loop in a cell blocks the same way and cannot be detected: poll with
``await asyncio.sleep(...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from agentq.errors import DeadlockError
from agentq.extras import require

__all__ = ["CLICK_TASK_PREFIX", "run"]

CLICK_TASK_PREFIX = "agentq.clicks:"
"""Name prefix of the refresher task of a widget that takes clicks (approvals, actions)."""

T = TypeVar("T")


async def _as_task(awaitable: Awaitable[T], seconds: float | None) -> T:
    if seconds is None:
        return await awaitable
    async with asyncio.timeout(seconds):
        return await awaitable


def run(awaitable: Awaitable[T], *, timeout: float | None = None) -> T:
    """Run `awaitable` to completion and return its result, from synchronous code.

    Args:
        awaitable: A coroutine (or any awaitable) of agentq, e.g. ``engine.run(wf)``.
        timeout: Seconds to wait before cancelling it and raising `TimeoutError`; None waits
            as long as it takes.

    Returns:
        What the awaitable returns.

    Raises:
        MissingExtraError: A loop is running and ``nest_asyncio2`` is not installed
            (``pip install 'agentq[notebook]'``); or just write ``await …`` instead.
        RuntimeError: A loop is running that cannot be made re-entrant (not an asyncio
            `BaseEventLoop`, e.g. uvloop): write ``await …`` instead.
        DeadlockError: A loop is running and a widget that takes clicks (`ApprovalPanel`,
            `Dashboard`) runs on it: a click could never reach the kernel while this call
            blocks the cell. Nothing has run; write ``await …`` instead.
        TimeoutError: `timeout` elapsed.
        Exception: Whatever the awaitable raises.

    Without a running loop each call uses a fresh loop (`asyncio.run`): create the queue, the
    store and the engine inside the coroutine then, or use ``asyncio.run`` yourself.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_task(awaitable, timeout))
    if not isinstance(loop, asyncio.BaseEventLoop):
        _close(awaitable)
        raise RuntimeError(
            f"agentq.sync.run cannot nest inside a running {type(loop).__name__}; "
            "write `await ...` instead (top-level await works in Jupyter)"
        )
    clickable = _click_widgets(loop)
    if clickable:
        _close(awaitable)
        raise DeadlockError(
            f"agentq.sync.run would block this cell while {' and '.join(clickable)} "
            f"{'wait' if len(clickable) > 1 else 'waits'} for clicks, and a click reaches the "
            "kernel only after the cell ends: it would wait "
            "forever. Write `await ...` instead (top-level await works in Jupyter)"
        )
    try:
        nest = require("nest_asyncio2", "notebook")
    except ImportError:
        _close(awaitable)
        raise
    nest.apply(loop)
    task = loop.create_task(_as_task(awaitable, timeout), name="agentq.sync.run")
    return loop.run_until_complete(task)


def _click_widgets(loop: asyncio.AbstractEventLoop) -> list[str]:
    """The kinds of widget that take clicks whose refresher runs on `loop` (by task name),
    each named once (two dashboards read "Dashboard", not "Dashboard, Dashboard")."""
    names = sorted({
        task.get_name().removeprefix(CLICK_TASK_PREFIX)
        for task in asyncio.all_tasks(loop)
        if task.get_name().startswith(CLICK_TASK_PREFIX)
        and not task.done()
        and not task.cancelling()  # being stopped (its cell ran again, say)
    })
    return names


def _close(awaitable: Awaitable[object]) -> None:
    """Close a coroutine that will not run (no "never awaited" warning)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
