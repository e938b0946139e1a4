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

from types import CodeType
from typing import Any

from agentq.queue.fingerprint_cache import code_info

__all__ = [
    "ABSENT", "CYCLE", "MARK", "SIMPLE", "TAGGED", "Fn", "Shared", "describe", "remember_simple",
    "same_reads",
]

TAGGED = frozenset({bool, bytes})  # int is kept as itself: no other kind here equals an int
MARK: Any = object()  # the first part of every fast fingerprint
CYCLE = ("cycle",)
ABSENT: Any = object()  # a name a function's globals do not hold
_PLAIN = frozenset({str, int, type(None)})  # values a fast fingerprint keeps as themselves


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

    __slots__ = (
        "_functions", "_reads", "_size", "deferred", "deferred_partials", "last", "recent",
    )

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._functions: dict[int, Fn] = {}
        self._reads: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        # By code: what the last fast fingerprint of a closure-less function of it read
        # (`agentq.queue.fingerprint_fast`): taken again from the very same objects, the
        # reads are equal, and the kept tuple is used without taking them.
        self.last: dict[int, tuple[Any, ...]] = {}
        # By code: the shared part of its functions' claim fingerprints
        # (`agentq.queue.fingerprint_deferred.Deferred`; each keeps its code object).
        self.deferred: dict[int, Any] = {}
        self.deferred_partials: dict[int, Any] = {}  # the same for partials of them
        # The `Deferred` part `defer` gave last (a burst of pushes shares one code): found
        # by identity, with no ``id()`` call (an audited builtin) and no dict lookup.
        self.recent: Any = None

    def keep_deferred(self, code: object, part: Any, *, partial: bool = False) -> None:
        """Keep `part` as the `Deferred` part of `code`'s functions (see `deferred`), or with
        `partial` as the `DeferredPartial` part of partials of them."""
        deferred = self.deferred_partials if partial else self.deferred
        if len(deferred) >= self._size:
            deferred.clear()
        deferred[id(code)] = part

    def keep_last(self, code: object, entry: tuple[Any, ...]) -> None:
        """Keep `entry` as what the last fast fingerprint of `code` read (see `last`)."""
        last = self.last
        if len(last) >= self._size:
            last.clear()
        last[id(code)] = entry

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


def same_reads(last: tuple[Any, ...], defaults: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The reads kept in `last` (`Shared.last`) for a closure-less function of its code over
    its globals with `defaults`, if taking them again would give an equal tuple: the
    defaults are plain values within the limit, each name still holds the very object it
    held, and each function among them still has the code, no defaults, module and
    qualified name its form was taken of (modules are never kept). Else None."""
    if defaults is not None:
        if len(defaults) > last[6]:
            return None
        for item in defaults:
            if type(item) not in _PLAIN:
                return None
    namespace = last[1]
    raw = last[3]
    i = 0
    for name in last[2]:  # no zip object: this runs on every push of such a lambda
        if namespace.get(name, ABSENT) is not raw[i]:
            return None
        i += 1  # noqa: SIM113
    for item, code, module, qualname in last[4]:
        if (
            item.__code__ is not code
            or item.__defaults__ is not None
            or item.__kwdefaults__ is not None
            or item.__module__ is not module
            or item.__qualname__ is not qualname
        ):
            return None
    return last[5]  # type: ignore[no-any-return]


class _Described:
    """A call named from its fingerprint, for messages (its repr is the text)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def describe(fp: Any) -> object:
    """Something whose ``repr`` names the call a fingerprint was taken of, for messages
    about a key whose job was released: ``a call of module.name with arguments (...)`` for
    a fast or derived fingerprint (its parts hold the function's names and code), else the
    fingerprint itself (an explicit one)."""
    if type(fp) is not tuple:
        return fp
    parts = fp[1:] if fp and fp[0] is MARK else fp
    args = ""
    for part in parts:
        if type(part) is not tuple or len(part) < 3:
            return fp
        if part[0] == "partial" and not args:
            args = f" with arguments {part[1]!r}"
        elif part[0] == "function" and len(part) > 3 and isinstance(part[3], CodeType):
            return _Described(f"a call of {part[1]}.{part[2]}{args}")
    return fp
