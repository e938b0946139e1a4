"""Whether a call has a kept fast fingerprint, decided without taking it (`matches_fast`).

A push of a known key compares its call with the one kept for the key. Taking the fast
fingerprint (`agentq.queue.fingerprint_fast`) to compare costs building tuples; for the
commonest calls (a plain function, or a keyword-less `functools.partial` of one, over str,
int and None values) this module reads the callable against the kept parts instead, in
C-level steps, and says True exactly when `fast_fingerprint` would give an equal tuple.
False only means "not decided here": the caller takes the fingerprint and compares.
"""

from __future__ import annotations

import functools
from types import FunctionType
from typing import Any

from agentq.queue.fingerprint_cache import code_info
from agentq.queue.fingerprint_parts import MARK as _MARK
from agentq.queue.fingerprint_parts import SIMPLE as _SIMPLE
from agentq.queue.fingerprint_parts import Fn as _Fn

__all__ = ["matches_fast"]

_PLAIN = frozenset({str, int, type(None)})  # kept as themselves in a fast fingerprint


def _same_value(value: Any, form: Any) -> bool:
    """Whether `value` has the kept fast `form`, decided without building anything: a str,
    int or None equal to it (the form has the same type: a kept int is never a bool, a
    kept str never an int), or the very function a kept `_Fn` holds. False means only "not
    decided here"."""
    kind = type(value)
    if kind in _PLAIN:
        return type(form) is kind and value == form
    if kind is not FunctionType or type(form) is not _Fn or form.fn is not value:
        return False
    fn: FunctionType = value  # type: ignore[assignment]  # checked just above
    code = fn.__code__  # the same function reading no value, with the kept code
    simple = _SIMPLE.get(id(code))
    parts = form.parts
    return (
        simple is not None
        and simple[0] is code
        and not fn.__defaults__
        and not fn.__kwdefaults__
        and len(parts) == 1
        and parts[0][3] is code
    )


def _same_function(fn: FunctionType, part: Any) -> bool:
    """Whether the kept function `part` is what `_Fast.function` would take of `fn` now."""
    code = fn.__code__
    if (
        part[3] is not code
        or fn.__qualname__ != part[2]
        or fn.__module__ != part[1]
        or fn.__kwdefaults__
        or part[5]
    ):
        return False
    defaults = fn.__defaults__ or ()
    kept = part[4]
    if len(defaults) != len(kept):
        return False
    for i in range(len(kept)):
        if not _same_value(defaults[i], kept[i]):
            return False
    simple = _SIMPLE.get(id(code))
    if simple is not None and simple[0] is code:  # no closure cell, no global name read
        return not part[6] and not part[7]
    names = code_info(code)[3]
    kept = part[6]
    i = 0
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        if i >= len(kept):
            return False
        entry = kept[i]
        i += 1
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: not decided here
            return False
        if entry[0] != name or not _same_value(value, entry[1]):
            return False
    if i != len(kept):
        return False
    kept = part[7]
    i = 0
    namespace = fn.__globals__
    for name in names:
        if name not in namespace:
            continue
        if i >= len(kept):
            return False
        entry = kept[i]
        i += 1
        if len(entry) != 2 or entry[0] != name or not _same_value(namespace[name], entry[1]):
            return False  # a module or a class read (kept with its type), or another value
    return i == len(kept)


def matches_fast(fn: Any, fp: Any) -> bool:
    """Whether ``fn()`` has the fast fingerprint `fp`, checked without taking it (cheaper).

    Covers a plain function and a `functools.partial` (no keywords) of one whose values are
    str, int, None or functions (the same object as the kept one, reading no value); a
    module or class read, a value of another kind, a nested partial: False, which only means
    "not decided here" (take the fingerprint and compare). True exactly when
    `fast_fingerprint(fn)` would equal `fp` (a function value that is the same object and
    reads no value, no default and the kept code has an equal fast form).
    """
    if type(fp) is not tuple or fp[0] is not _MARK:
        return False
    kind = type(fn)
    if kind is functools.partial:
        # The common partial, in C-level steps: arguments that are all str, int or None
        # (so ``==`` with the kept forms is exact: a kept bool or bytes is a tagged tuple,
        # which no str, int or None equals) of a function that reads no value at all.
        if len(fp) != 3 or fn.keywords:
            return False
        func = fn.func
        part = fp[2]
        args = fn.args
        if type(func) is not FunctionType or func.__code__ is not part[3]:
            return False
        simple = _SIMPLE.get(id(part[3]))
        return (
            simple is not None
            and simple[0] is part[3]
            and _PLAIN.issuperset(map(type, args))
            and args == fp[1][1]
            and not fp[1][2]
            and func.__defaults__ is None
            and func.__kwdefaults__ is None
            and part[4:] == _NO_VALUES
            and func.__qualname__ == part[2]
            and func.__module__ == part[1]
        )
    if kind is FunctionType and len(fp) == 2:
        return _same_function(fn, fp[1])
    return False


_NO_VALUES = ((), (), (), ())
