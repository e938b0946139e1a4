"""The fingerprint of a call over plain values, taken in a fraction of the time.

`agentq.queue.fingerprint.derive_fingerprint` walks any callable and wraps every value it
meets; that costs 4-8 µs a push, paid by every job that claims a key and by every push of a
completed key with a new `Job` (a cache hit). Most calls are simpler: a lambda or a
`functools.partial` over a few str, int, bytes or bool values, reading module-level
functions and modules. `fast_fingerprint` takes those in one tight pass and returns
a tuple that compares like the derived fingerprint would:

- the same layers and parts as `derive_fingerprint` (a partial's arguments, then its
  function; a function's module, qualified name, code object, defaults, keyword-only
  defaults, its closure cells and the module-level names its code reads, not those it
  assigns itself);
- str, int and None as themselves (no other kind kept here equals an int); bool and bytes
  with their type (``1`` and ``True`` differ, as in the derived form);
- a module-level module as its name, its type's name and its qualified name (a class read
  gives None: the derived form compares a class by its content);
- a function among the values by its own fast fingerprint only (the same function object
  reading another global now is another call: the rule of the derived form);
- a function met again while it is being taken as ``("cycle",)``.

So two fast fingerprints are equal exactly when the derived ones are. Anything else (a
bound method, a callable object, a float, a container, any other object, a function that
rebinds a closure variable (``nonlocal``: its state, see `agentq.queue.fingerprint`), a value nested
more than `MAX_DEPTH` functions deep, more than `MAX_VALUES` values) gives None, and the
caller derives the fingerprint as before. A fast fingerprint starts with a marker no derived
fingerprint or explicit ``Job(fingerprint=...)`` can hold, so it never equals one: and a
call over plain values never has the same derived fingerprint as one that is not (some
value or layer of the second has a kind the first has not), so nothing is lost.
"""

from __future__ import annotations

import functools
from types import CodeType, FunctionType, ModuleType
from typing import Any

from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_cache import code_info

__all__ = [
    "MAX_DEPTH",
    "MAX_VALUES",
    "Shared",
    "call_fingerprint",
    "describe",
    "fast_fingerprint",
]

MAX_DEPTH = 4
"""Functions nested deeper than this among a call's values: no fast fingerprint."""

MAX_VALUES = 64
"""Values one fast fingerprint may hold; beyond: no fast fingerprint."""

_TAGGED = frozenset({bool, bytes})  # int is kept as itself: no other kind here equals an int
_MARK: Any = object()  # the first part of every fast fingerprint
_CYCLE = ("cycle",)


class _Fn:
    """A function among a call's values: equal to another by its fast fingerprint alone (the
    same function object reading other values now is another call)."""

    __slots__ = ("fn", "parts")

    def __init__(self, fn: object, parts: Any) -> None:
        self.fn = fn
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        if type(other) is not _Fn:
            return NotImplemented
        return bool(self.parts == other.parts)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<function {getattr(self.fn, '__qualname__', '?')}>"


class _Fast:
    """One pass: the functions being entered (to tell a cycle) and the values left."""

    __slots__ = ("budget", "shared", "stack")

    def __init__(self, shared: Shared | None) -> None:
        self.stack: list[int] = []
        self.budget = MAX_VALUES
        self.shared = shared

    def value(self, value: Any, depth: int) -> Any:
        """The comparable form of one value, or `_MARK` when it has no fast form."""
        kind = type(value)
        if kind is str or value is None:
            return value
        self.budget -= 1
        if self.budget < 0:
            return _MARK
        if kind is int:
            return value
        if kind in _TAGGED:
            return (kind, value)
        if kind is FunctionType:
            code = value.__code__
            simple = _SIMPLE.get(id(code))
            if (
                simple is not None
                and simple[0] is code
                and not value.__defaults__
                and not value.__kwdefaults__
            ):  # reads no value: its parts are its names and code (see `call`)
                only: tuple[Any, ...] = (
                    ("function", value.__module__, value.__qualname__, code, (), (), (), ()),
                )
                return _Fn(value, only) if self.shared is None else self.shared.function(
                    value, only
                )
            if id(value) in self.stack:
                return _Fn(value, _CYCLE)
            if depth >= MAX_DEPTH:
                return _MARK
            parts = self.call(value, depth + 1)
            if parts is None:
                return _MARK
            shared = self.shared
            if shared is None:
                return _Fn(value, parts)
            return shared.function(value, parts)
        return _MARK

    def call(self, fn: Any, depth: int) -> tuple[Any, ...] | None:
        """The parts of the call ``fn()``, or None (see the module)."""
        parts: list[Any] = []
        stack = self.stack
        entered = len(stack)
        try:
            while type(fn) is functools.partial or isinstance(fn, functools.partial):
                stack.append(id(fn))
                args: list[Any] = []
                for arg in fn.args:
                    form = self.value(arg, depth)
                    if form is _MARK:
                        return None
                    args.append(form)
                kwargs: list[Any] = []
                if fn.keywords:
                    for name, arg in sorted(fn.keywords.items()):
                        form = self.value(arg, depth)
                        if form is _MARK:
                            return None
                        kwargs.append((name, form))
                parts.append(("partial", tuple(args), tuple(kwargs)))
                fn = fn.func
            if type(fn) is not FunctionType:
                return None
            stack.append(id(fn))
            function = self.function(fn, depth)
            if function is None:
                return None
            _remember_simple(function)
            parts.append(function)
            return tuple(parts)
        finally:
            del stack[entered:]

    def function(self, fn: FunctionType, depth: int) -> tuple[Any, ...] | None:
        code = fn.__code__
        _, rebound, _, names = code_info(code)
        if rebound and not rebound.isdisjoint(code.co_freevars):
            return None  # a closure variable it rebinds (its state): derived (see `_Value`)
        values = self.value
        defaults: list[Any] = []
        for item in fn.__defaults__ or ():
            form = values(item, depth)
            if form is _MARK:
                return None
            defaults.append(form)
        kwdefaults: list[Any] = []
        if fn.__kwdefaults__:
            for name, item in sorted(fn.__kwdefaults__.items()):
                form = values(item, depth)
                if form is _MARK:
                    return None
                kwdefaults.append((name, form))
        cells: list[Any] = []
        closure = fn.__closure__
        if closure:
            for name, cell in zip(code.co_freevars, closure, strict=False):
                try:
                    item = cell.cell_contents
                except ValueError:  # an empty cell: the derived form's text for it
                    cells.append((name, "<empty>"))
                    continue
                form = values(item, depth)
                if form is _MARK:
                    return None
                cells.append((name, form))
        reads: list[Any] = []
        if names:
            namespace = fn.__globals__
            for name in names:
                if name not in namespace:
                    continue
                item = namespace[name]
                kind = type(item)
                if kind is ModuleType:
                    reads.append((name, "builtins.module", getattr(item, "__qualname__", name)))
                elif isinstance(item, type):
                    return None  # a class counts by its content: derived
                else:
                    form = values(item, depth)
                    if form is _MARK:
                        return None
                    reads.append((name, form))
        read = tuple(reads)
        if read and self.shared is not None:
            read = self.shared.reads(code, read)
        return (
            "function",
            fn.__module__,
            fn.__qualname__,
            code,
            tuple(defaults),
            tuple(kwdefaults),
            tuple(cells),
            read,
        )


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
        self._functions: dict[int, _Fn] = {}
        self._reads: dict[int, tuple[Any, tuple[Any, ...]]] = {}

    def function(self, fn: object, parts: Any) -> _Fn:
        """The `_Fn` of `fn` with `parts`: the kept one if equal, else a new one kept."""
        kept = self._functions.get(id(fn))
        if kept is not None and kept.fn is fn and kept.parts == parts:
            return kept
        made = _Fn(fn, parts)
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


def fast_fingerprint(fn: Any, shared: Shared | None = None) -> tuple[Any, ...] | None:
    """The fast fingerprint of the call ``fn()``, or None when it has none (see the module).

    Args:
        fn: Any callable.
        shared: Where equal parts are kept once (a queue's), or None.

    Returns:
        A tuple, equal to another call's fast fingerprint exactly when their derived
        fingerprints are equal, and never equal to a derived or explicit fingerprint; or
        None for a call that is not over plain values only.
    """
    if type(fn) is functools.partial and not fn.keywords:  # the common partial: inline
        args: list[Any] = []
        for arg in fn.args:
            kind = type(arg)
            if kind is str or arg is None or kind is int:
                args.append(arg)
            elif kind in _TAGGED:
                args.append((kind, arg))
            else:
                break
        else:
            func = fn.func
            if type(func) is FunctionType and len(args) < MAX_VALUES:
                simple = _SIMPLE.get(id(func.__code__))
                if (
                    simple is not None
                    and simple[0] is func.__code__
                    and not func.__defaults__
                    and not func.__kwdefaults__
                ):  # no defaults, closure or globals read: only the function's names
                    return (
                        _MARK,
                        ("partial", tuple(args), ()),
                        ("function", func.__module__, func.__qualname__, simple[0],
                         (), (), (), ()),
                    )
    parts = _Fast(shared).call(fn, 0)
    return None if parts is None else (_MARK, *parts)


# Code objects whose functions read no closure cell and no global name (the function part is
# then only its names and code, given no defaults), by id: the inline paths of
# `fast_fingerprint` and `_Fast.value`. Each entry keeps its code object, so an id is never
# reused while it is listed; it depends on the code object alone, like `code_info`'s table.
_SIMPLE_LIMIT = 1024
_SIMPLE: dict[int, tuple[Any]] = {}


def _remember_simple(function: tuple[Any, ...]) -> None:
    """Remember the code of `function` (a function part) if it reads no value at all."""
    code = function[3]
    if id(code) in _SIMPLE:
        return
    if function[4:] == ((), (), (), ()) and not code.co_freevars and not code_info(code)[3]:
        if len(_SIMPLE) >= _SIMPLE_LIMIT:
            _SIMPLE.clear()
        _SIMPLE[id(code)] = (code,)


def call_fingerprint(fn: Any, shared: Shared | None = None, kept: Any = None) -> Any:
    """The fingerprint of ``fn()`` to compare with ``==``: the fast one, else the derived one.

    `kept` is the fingerprint it will be compared with (a key's), or None: a derived
    fingerprint then reuses the kept form of each value that is the very object kept there,
    so comparing the same call again costs time bounded by the number of values the call
    names, not by the data they reach (`derive_fingerprint`).
    """
    if type(kept) is tuple and kept and kept[0] is not _MARK:
        # a derived one is kept: a fast one would not equal it, and the derived one of a
        # call over plain values differs from it as well, so derive at once
        return derive_fingerprint(fn, kept)
    fast = fast_fingerprint(fn, shared)
    return derive_fingerprint(fn) if fast is None else fast




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
    parts = fp[1:] if fp and fp[0] is _MARK else fp
    args = ""
    for part in parts:
        if type(part) is not tuple or len(part) < 3:
            return fp
        if part[0] == "partial" and not args:
            args = f" with arguments {part[1]!r}"
        elif part[0] == "function" and len(part) > 3 and isinstance(part[3], CodeType):
            return _Described(f"a call of {part[1]}.{part[2]}{args}")
    return fp
