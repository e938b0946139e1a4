"""What building a `Job` checks beyond its fields' types: that its callable can be called
with no arguments and is not an async generator function, and that seconds are seconds.

Also `short_repr`, how error messages show a value. Split from `agentq.queue.jobs` (whose
`Job` calls these when its common form does not apply) to keep that module short.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable
from inspect import CO_ASYNC_GENERATOR, CO_VARARGS
from types import FunctionType, MethodType
from typing import Any

__all__ = [
    "check_no_arguments",
    "check_seconds",
    "is_async_generator",
    "positive_seconds",
    "short_repr",
]


def positive_seconds(value: object) -> bool:
    """Whether `value` is a positive, finite int or float (ints too large for a float: no)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an int beyond the float range
        return False


def check_seconds(name: str, value: object) -> None:
    """Check that `value` is a finite number of seconds >= 0, or None.

    Raises:
        TypeError: Not a number (bools are not accepted).
        ValueError: Negative, infinite or NaN; the message names `name`.
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds or None, got {value!r}")
    try:
        valid = math.isfinite(value) and value >= 0
    except OverflowError:  # an int beyond the float range
        valid = False
    if not valid:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


def check_no_arguments(key: str, fn: Callable[..., Any]) -> None:
    """Raise `TypeError` if ``fn()`` would fail for want (or excess) of arguments.

    Checked when the `Job` is built, so that a wrong callable fails at once, naming the job,
    instead of failing every attempt when it runs. A callable without a signature (some
    builtins) is not checked.
    """
    if not _needs_arguments(fn):
        return
    try:
        signature = str(inspect.signature(fn))
    except (TypeError, ValueError):  # a partial binding too many arguments, say
        signature = "(...)"
        if type(fn) is functools.partial:
            with contextlib.suppress(TypeError, ValueError):
                signature = (
                    f"{inspect.signature(fn.func)} with {len(fn.args)} positional "
                    "argument(s) bound"
                )
    raise TypeError(
        f"job {key!r}: fn must be callable with no arguments, but {short_repr(fn, 80)} has "
        f"the signature {signature}; bind the arguments, e.g. functools.partial(fn, ...) or "
        "lambda: fn(...)"
    )


def _needs_arguments(fn: Callable[..., Any]) -> bool:
    """Whether calling `fn` with no arguments fails for its signature (False if unknown)."""
    func: Any = fn
    given = 0  # positional arguments already bound
    if type(fn) is functools.partial and not fn.keywords:
        func, given = fn.func, len(fn.args)
    elif type(fn) is MethodType:
        func, given = fn.__func__, 1
    if type(func) is FunctionType:  # read the code object: no inspect needed
        code = func.__code__
        positional = code.co_argcount
        if given > positional and not code.co_flags & CO_VARARGS:
            return True  # too many
        defaults = func.__defaults__
        if positional - (len(defaults) if defaults else 0) > given:
            return True  # a required positional parameter is missing
        keyword_only = code.co_varnames[positional : positional + code.co_kwonlyargcount]
        kwdefaults = func.__kwdefaults__ or {}
        return any(name not in kwdefaults for name in keyword_only)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature available: not checked
        return False
    try:
        signature.bind()
    except TypeError:
        return True
    return False


def is_async_generator(fn: object) -> bool:
    """Whether calling `fn` returns an async generator (through partials, methods, __call__)."""
    while type(fn) is functools.partial:
        fn = fn.func
    if type(fn) is MethodType:
        fn = fn.__func__
    if type(fn) is FunctionType:  # the common case, without inspect's unwrapping
        return bool(fn.__code__.co_flags & CO_ASYNC_GENERATOR)
    return inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects
    )


def short_repr(value: object, limit: int = 120) -> str:
    """`repr(value)`, cut to `limit` characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
