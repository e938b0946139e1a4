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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from agentq.extras import require

__all__ = ["run"]

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
    try:
        nest = require("nest_asyncio2", "notebook")
    except ImportError:
        _close(awaitable)
        raise
    nest.apply(loop)
    task = loop.create_task(_as_task(awaitable, timeout), name="agentq.sync.run")
    return loop.run_until_complete(task)


def _close(awaitable: Awaitable[object]) -> None:
    """Close a coroutine that will not run (no "never awaited" warning)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
