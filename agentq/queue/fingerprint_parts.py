"""The parts fast fingerprints are made of, shared by the modules that take and read them.

`agentq.queue.fingerprint_fast` takes the fingerprint of a call over plain values; its
parts are defined here so that the readers (`agentq.queue.fingerprint_match`,
`agentq.queue.fingerprint_diff`) and the taker share one definition:

- `MARK`, the first part of every fast fingerprint (no derived or explicit one holds it);
- `Fn`, a function among a call's values, equal to another by its own fast parts;
- `Shared`, a queue's table of equal parts kept once;
- `SIMPLE`, the code objects whose functions read no value at all (`remember_simple`).
"""

from __future__ import annotations

from typing import Any

from agentq.queue.fingerprint_cache import code_info

__all__ = ["CYCLE", "MARK", "SIMPLE", "TAGGED", "Fn", "Shared", "remember_simple"]

TAGGED = frozenset({bool, bytes})  # int is kept as itself: no other kind here equals an int
MARK: Any = object()  # the first part of every fast fingerprint
CYCLE = ("cycle",)


class Fn:
    """A function among a call's values: equal to another by its fast fingerprint alone (the
    same function object reading other values now is another call)."""

    __slots__ = ("fn", "parts")

    def __init__(self, fn: object, parts: Any) -> None:
        self.fn = fn
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        if type(other) is not Fn:
            return NotImplemented
        return bool(self.parts == other.parts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<function {getattr(self.fn, '__qualname__', '?')}>"


class Shared:
    """Parts that many fingerprints of one queue hold equal, kept once (memory, per queue).

    A queue holds the fingerprint of every key it knows; thousands of ``lambda: work(i)``
    share the fast form of ``work`` and of the module-level names the lambda reads. Each
    part is computed for every call as before (so it is as of that call) and, when it equals
    the one kept, the kept one is used instead: equal parts, one object.

    Args:
        size: Entries kept per table; a table is emptied when it is full.
    """

    __slots__ = ("_functions", "_reads", "_size")

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._functions: dict[int, Fn] = {}
        self._reads: dict[int, tuple[Any, tuple[Any, ...]]] = {}

    def function(self, fn: object, parts: Any) -> Fn:
        """The `Fn` of `fn` with `parts`: the kept one if equal, else a new one kept."""
        kept = self._functions.get(id(fn))
        if kept is not None and kept.fn is fn and kept.parts == parts:
            return kept
        made = Fn(fn, parts)
        if len(self._functions) >= self._size:
            self._functions.clear()
        self._functions[id(fn)] = made
        return made

    def reads(self, code: object, read: tuple[Any, ...]) -> tuple[Any, ...]:
        """The module-level values read by `code`: the kept tuple if equal, else `read`."""
        kept = self._reads.get(id(code))
        if kept is not None and kept[0] is code and kept[1] == read:
            return kept[1]
        if len(self._reads) >= self._size:
            self._reads.clear()
        self._reads[id(code)] = (code, read)
        return read


# Code objects whose functions read no closure cell and no global name (the function part is
# then only its names and code, given no defaults), by id: the inline paths of
# `fast_fingerprint` and `_Fast.value`. Each entry keeps its code object, so an id is never
# reused while it is listed; it depends on the code object alone, like `code_info`'s table.
_SIMPLE_LIMIT = 1024
SIMPLE: dict[int, tuple[Any]] = {}


def remember_simple(function: tuple[Any, ...]) -> None:
    """Remember the code of `function` (a function part) if it reads no value at all."""
    code = function[3]
    if id(code) in SIMPLE:
        return
    if function[4:] == ((), (), (), ()) and not code.co_freevars and not code_info(code)[3]:
        if len(SIMPLE) >= _SIMPLE_LIMIT:
            SIMPLE.clear()
        SIMPLE[id(code)] = (code,)
