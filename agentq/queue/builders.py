"""Which plain callables only build an awaitable: the code objects a queue has seen doing so.

A job's fn that is not an ``async def`` runs in a worker thread, so that a plain ``def`` that
blocks never blocks the event loop. Many such callables only *build* an awaitable, though:
``lambda: fetch(url)`` returns a coroutine at once, and sending it to a thread costs a round
trip (about 100-250 µs here) for a call that takes a microsecond. `Builders` remembers, per
queue, the code object of every plain callable that returned an awaitable from its thread;
later callables with that code object are called on the loop (which only builds the
awaitable) and the awaitable is awaited there. The rule:

- the first call of a plain callable with a given code object always runs in a thread;
- it is remembered if that call returned an awaitable (a coroutine, a future, any object
  with ``__await__``) within `BLOCKING` seconds (a ``def`` that blocks, then returns an
  awaitable, stays in threads);
- a remembered callable that later returns a plain value (not an awaitable), or takes
  longer than `BLOCKING` on the loop, has run on the loop that once; its code object is
  forgotten, so its next call runs in a thread again: a callable that sometimes blocks
  costs the loop at most that one call before it is sent back to threads;
- an exception raised by a remembered callable on the loop fails the attempt as it would
  in a thread (the code object stays remembered).

The code object is the function's own (``fn.__code__``), the wrapped function's for a
`functools.partial` or a bound method; other callables (objects with ``__call__``, builtins)
are never remembered and always run in a thread. The table is bounded (`LIMIT` code objects,
emptied when full) and owned by one queue: nothing is global.
"""

from __future__ import annotations

import functools
from types import CodeType, FunctionType, MethodType
from typing import Any

__all__ = ["BLOCKING", "LIMIT", "Builders", "code_of"]

LIMIT = 1024
"""Most code objects one queue remembers; the table is emptied when it is full."""

BLOCKING = 0.02
"""Seconds of the call itself (real time, `time.perf_counter`: what the loop would be held
for, not the queue's clock) beyond which a callable counts as blocking: not remembered from
its thread, and forgotten if it took that long on the loop. Building a coroutine takes
microseconds; 20 ms leaves room for a thread or the loop being descheduled on a busy
machine (a false alarm only costs one thread hop)."""


def code_of(fn: Any) -> CodeType | None:
    """The code object that decides what calling `fn` does, or None for other callables."""
    kind = type(fn)
    if kind is FunctionType:
        return fn.__code__  # type: ignore[no-any-return]
    if kind is functools.partial:
        fn = fn.func
        kind = type(fn)
        if kind is FunctionType:
            return fn.__code__  # type: ignore[no-any-return]
    if kind is MethodType and type(fn.__func__) is FunctionType:
        return fn.__func__.__code__
    return None


class Builders:
    """The code objects of plain callables that returned an awaitable (see the module)."""

    __slots__ = ("_codes", "blocking")

    def __init__(self, blocking: float = BLOCKING) -> None:
        self.blocking = blocking
        """Seconds beyond which a call counts as blocking (`BLOCKING` by default)."""
        # By the id of the code object (hashing a code object hashes its bytecode); each
        # entry keeps its code object alive, so an id is never reused while it is listed.
        self._codes: dict[int, CodeType] = {}

    def __contains__(self, code: object) -> bool:
        return self._codes.get(id(code)) is code

    def __len__(self) -> int:
        return len(self._codes)

    def remember(self, code: CodeType) -> None:
        """Call callables with `code` on the loop from now on."""
        codes = self._codes
        if len(codes) >= LIMIT:
            codes.clear()
        codes[id(code)] = code

    def forget(self, code: CodeType) -> None:
        """Run callables with `code` in a thread again (one returned a plain value)."""
        if self._codes.get(id(code)) is code:
            del self._codes[id(code)]
