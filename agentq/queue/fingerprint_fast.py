"""The fingerprint of a call over plain values, taken in a fraction of the time.

`agentq.queue.fingerprint.derive_fingerprint` walks any callable and wraps every value it
meets; that costs 4-8 µs a push, paid by every job that claims a key and by every push of a
completed key with a new `Job` (a cache hit). Most calls are simpler: a lambda or a
`functools.partial` over a few str, int, bytes or bool values, reading module-level
functions, modules and classes. `fast_fingerprint` takes those in one tight pass and returns
a tuple that compares like the derived fingerprint would:

- the same layers and parts as `derive_fingerprint` (a partial's arguments, then its
  function; a function's module, qualified name, code object, defaults, keyword-only
  defaults, the closure cells it does not rebind and the module-level names its code reads);
- str and None as themselves; bool, int and bytes with their type (``1`` and ``True``
  differ), as the derived form does;
- a module-level module or class as its name, its type's name and its qualified name;
- a function among the values by its own fast fingerprint, or by identity (the same object
  is the same value, however its state changed since: the rule of the derived form);
- a function met again while it is being taken as ``("cycle",)``.

So two fast fingerprints are equal exactly when the derived ones are. Anything else (a
bound method, a callable object, a float, a container, any other object, a value nested
more than `MAX_DEPTH` functions deep, more than `MAX_VALUES` values) gives None, and the
caller derives the fingerprint as before. A fast fingerprint starts with a marker no derived
fingerprint or explicit ``Job(fingerprint=...)`` can hold, so it never equals one: and a
call over plain values never has the same derived fingerprint as one that is not (some
value or layer of the second has a kind the first has not), so nothing is lost.
"""

from __future__ import annotations

import functools
from types import FunctionType, ModuleType
from typing import Any

from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_cache import code_info

__all__ = ["MAX_DEPTH", "MAX_VALUES", "call_fingerprint", "fast_fingerprint"]

MAX_DEPTH = 4
"""Functions nested deeper than this among a call's values: no fast fingerprint."""

MAX_VALUES = 64
"""Values one fast fingerprint may hold; beyond: no fast fingerprint."""

_TAGGED = frozenset({int, bool, bytes})
_MARK: Any = object()  # the first part of every fast fingerprint
_CYCLE = ("cycle",)


class _Fn:
    """A function among a call's values: the same object, or an equal fast fingerprint."""

    __slots__ = ("fn", "parts")

    def __init__(self, fn: object, parts: Any) -> None:
        self.fn = fn
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        if type(other) is not _Fn:
            return NotImplemented
        return self.fn is other.fn or self.parts == other.parts

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<function {getattr(self.fn, '__qualname__', '?')}>"


class _Fast:
    """One pass: the functions being entered (to tell a cycle) and the values left."""

    __slots__ = ("budget", "stack")

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.budget = MAX_VALUES

    def value(self, value: Any, depth: int) -> Any:
        """The comparable form of one value, or `_MARK` when it has no fast form."""
        kind = type(value)
        if kind is str or value is None:
            return value
        self.budget -= 1
        if self.budget < 0:
            return _MARK
        if kind in _TAGGED:
            return (kind, value)
        if kind is FunctionType:
            if id(value) in self.stack:
                return _Fn(value, _CYCLE)
            if depth >= MAX_DEPTH:
                return _MARK
            parts = self.call(value, depth + 1)
            return _MARK if parts is None else _Fn(value, parts)
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
            parts.append(function)
            return tuple(parts)
        finally:
            del stack[entered:]

    def function(self, fn: FunctionType, depth: int) -> tuple[Any, ...] | None:
        code = fn.__code__
        _, rebound, names = code_info(code)
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
                if name in rebound:
                    continue
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
                    reads.append(
                        (name, f"{kind.__module__}.{kind.__qualname__}", item.__qualname__)
                    )
                else:
                    form = values(item, depth)
                    if form is _MARK:
                        return None
                    reads.append((name, form))
        return (
            "function",
            fn.__module__,
            fn.__qualname__,
            code,
            tuple(defaults),
            tuple(kwdefaults),
            tuple(cells),
            tuple(reads),
        )


def fast_fingerprint(fn: Any) -> tuple[Any, ...] | None:
    """The fast fingerprint of the call ``fn()``, or None when it has none (see the module).

    Returns:
        A tuple, equal to another call's fast fingerprint exactly when their derived
        fingerprints are equal, and never equal to a derived or explicit fingerprint; or
        None for a call that is not over plain values only.
    """
    parts = _Fast().call(fn, 0)
    return None if parts is None else (_MARK, *parts)


def call_fingerprint(fn: Any) -> Any:
    """The fingerprint of ``fn()`` to compare with ``==``: the fast one, else the derived one."""
    fast = fast_fingerprint(fn)
    return derive_fingerprint(fn) if fast is None else fast
