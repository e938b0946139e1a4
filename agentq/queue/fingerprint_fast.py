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

With a queue's `Shared` table, a closure-less function whose code was taken before reuses
the kept reads of that code when every name it reads still holds the very same object and
each function among them is unchanged (`agentq.queue.fingerprint_parts.same_reads`): taking
them again would give an equal tuple, so only the per-call parts (the defaults) are read.

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
from types import FunctionType, ModuleType
from typing import Any

from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_cache import code_info
from agentq.queue.fingerprint_parts import ABSENT as _ABSENT
from agentq.queue.fingerprint_parts import CYCLE as _CYCLE
from agentq.queue.fingerprint_parts import MARK as _MARK
from agentq.queue.fingerprint_parts import SIMPLE as _SIMPLE
from agentq.queue.fingerprint_parts import TAGGED as _TAGGED
from agentq.queue.fingerprint_parts import Fn as _Fn
from agentq.queue.fingerprint_parts import Shared as Shared
from agentq.queue.fingerprint_parts import describe as describe
from agentq.queue.fingerprint_parts import remember_simple as _remember_simple
from agentq.queue.fingerprint_parts import same_reads as _same_reads

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
    elif type(fn) is FunctionType:
        quick = _plain_function(fn, shared)
        if quick is not None:
            return quick
    parts = _Fast(shared).call(fn, 0)
    return None if parts is None else (_MARK, *parts)


_PLAIN = frozenset({str, int, type(None)})  # values kept as themselves


def _plain_function(fn: FunctionType, shared: Shared | None) -> tuple[Any, ...] | None:
    """`fast_fingerprint` of the commonest function in one flat pass, or None: take the
    general pass (which gives the same tuple when this one gives one).

    Covers a function (``lambda i=i: work(i)``, ``lambda: fetch(url)``, an ``async def``)
    without keyword-only defaults whose defaults and closure cells hold str, int or None,
    reading module-level str, int or None values, modules, and functions that read no value
    (`_SIMPLE`, no defaults): the forms of `_Fast.function` and `_Fast.value`, built from the
    same values in the same order.
    """
    code = fn.__code__
    defaults = fn.__defaults__
    if fn.__kwdefaults__:
        return None
    simple = _SIMPLE.get(id(code))
    if simple is not None and simple[0] is code and not defaults:  # reads no value at all
        return (_MARK, ("function", fn.__module__, fn.__qualname__, code, (), (), (), ()))
    closure = fn.__closure__
    if shared is not None and closure is None:
        last = shared.last.get(id(code))
        if last is not None and last[0] is code and last[1] is fn.__globals__:
            kept = _same_reads(last, defaults)
            if kept is not None:
                return (_MARK, ("function", fn.__module__, fn.__qualname__, code,
                                () if defaults is None else defaults, (), (), kept))
    _, rebound, _, names = code_info(code)
    if len(defaults or ()) + len(closure or ()) + len(names) > MAX_VALUES // 2:
        return None
    if defaults is None:
        defaults = ()
    else:
        for item in defaults:
            if type(item) not in _PLAIN:
                return None
    cells: tuple[Any, ...] = ()
    if closure:
        if rebound and not rebound.isdisjoint(code.co_freevars):
            return None
        forms: list[Any] = []
        for name, cell in zip(code.co_freevars, closure, strict=False):
            try:
                item = cell.cell_contents
            except ValueError:  # an empty cell
                return None
            if type(item) not in _PLAIN:
                return None
            forms.append((name, item))
        cells = tuple(forms)
    reads: tuple[Any, ...] = ()
    if names:
        namespace = fn.__globals__
        forms = []
        raw: list[Any] = []  # what each name holds (`_same_reads`)
        functions: list[tuple[Any, ...]] = []
        for name in names:
            item = namespace.get(name, _ABSENT)
            raw.append(item)
            if item is _ABSENT:
                continue
            kind = type(item)
            if kind in _PLAIN:
                forms.append((name, item))
            elif kind is FunctionType:
                inner = item.__code__
                simple = _SIMPLE.get(id(inner))
                if (
                    simple is None
                    or simple[0] is not inner
                    or item.__defaults__
                    or item.__kwdefaults__
                ):
                    return None
                module, qualname = item.__module__, item.__qualname__
                only = (("function", module, qualname, inner, (), (), (), ()),)
                forms.append(
                    (name, _Fn(item, only) if shared is None else shared.function(item, only))
                )
                functions.append((item, inner, module, qualname))
            elif kind is ModuleType:
                forms.append((name, "builtins.module", getattr(item, "__qualname__", name)))
                functions.append(())  # a module: never taken from `last`
            else:
                return None
        if forms:
            reads = tuple(forms)
            if shared is not None:
                reads = shared.reads(code, reads)
                if closure is None and () not in functions:
                    shared.keep_last(
                        code,
                        (code, namespace, names, tuple(raw), tuple(functions), reads,
                         MAX_VALUES // 2 - len(names)),
                    )
    function = ("function", fn.__module__, fn.__qualname__, code, defaults, (), cells, reads)
    if not reads and not cells and not defaults:
        _remember_simple(function)
    return (_MARK, function)


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
