"""Which plain callables only build a coroutine: ``lambda: fetch(url)`` with an ``async def`` fetch.

A job's fn that is not an ``async def`` runs in a worker thread, so that a plain ``def`` that
blocks never blocks the event loop. The form users write most, ``Job(key, lambda:
fetch(url))``, only *builds* a coroutine, though, and sending it to a thread costs a round
trip (about 100-250 µs here) for a call that takes a microsecond. Whether a lambda only
builds a coroutine is decided from its code, never from what it did before (a rule learnt
from behaviour would move a ``def`` that sometimes blocks, or that starts its own event loop,
onto the loop). The rule: a plain function is called on the loop when

- its whole body is one call returned at once (``return f(a, b, k=c)``, which a lambda
  is), and
- the called name and every argument are plain loads: constants, its own parameters (a job's
  fn is called with none, so they hold their defaults: ``lambda i=i: fetch(i)``), names of
  the enclosing function (closure cells) or module globals, never an attribute, a subscript or
  another call (nothing that could run code of its own), and
- the called name, looked up when the job runs, is an ``async def`` function (or a
  `functools.partial` of one): calling it only makes a coroutine object, which is then
  awaited on the loop.

Everything else runs in a thread, as before: a ``def`` (even one returning a coroutine),
``lambda: client.fetch(url)`` (an attribute lookup), ``lambda: call_tool(name, x)`` when
``call_tool`` is a plain ``def``. Both outcomes of the rule are exact: what runs on the loop
could not block, since no code of the user's runs before the coroutine is awaited.

`Builders` keeps, per queue, what it read from each code object (bounded, emptied when full);
reading it again would give the same answer, so nothing here changes behaviour.
"""

from __future__ import annotations

import dis
import functools
import inspect
from types import CodeType, FunctionType
from typing import Any

__all__ = ["LIMIT", "Builders", "callee_of"]

LIMIT = 1024
"""Most code objects one queue keeps the reading of; the table is emptied when it is full."""

_CO_COROUTINE = inspect.CO_COROUTINE
# Instructions that only set up a call (their names differ between Python versions).
_SETUP = frozenset({
    "RESUME", "COPY_FREE_VARS", "PUSH_NULL", "PRECALL", "CACHE", "NOP", "KW_NAMES",
    "EXTENDED_ARG",
})
_ARGUMENT = frozenset({
    "LOAD_CONST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_FAST", "LOAD_FAST_CHECK",
    "LOAD_FAST_LOAD_FAST",
})
_CALLEE = frozenset({"LOAD_DEREF", "LOAD_GLOBAL", "LOAD_FAST"})
_NOT_THE_FORM = ("", "")


def callee_of(code: CodeType) -> tuple[str, str]:
    """How the callee of a ``return f(<plain loads>)`` body is loaded, as (opname, name).

    Returns ``("LOAD_GLOBAL", "fetch")``, ``("LOAD_DEREF", "fetch")`` or ``("LOAD_FAST",
    "fetch")`` (a parameter) for the form the module describes, ``("", "")`` for any other
    code.
    """
    ops = [i for i in dis.get_instructions(code) if i.opname not in _SETUP]
    if len(ops) < 3 or ops[-1].opname != "RETURN_VALUE" or ops[-2].opname != "CALL":
        return _NOT_THE_FORM
    callee, *arguments = ops[:-2]
    if callee.opname not in _CALLEE or not all(a.opname in _ARGUMENT for a in arguments):
        return _NOT_THE_FORM
    return callee.opname, str(callee.argval)


def _is_coroutine_function(fn: Any) -> bool:
    """Whether calling `fn` only makes a coroutine: an ``async def`` or a partial of one."""
    if type(fn) is functools.partial:
        fn = fn.func
    return type(fn) is FunctionType and bool(fn.__code__.co_flags & _CO_COROUTINE)


class Builders:
    """Per queue: which plain functions only build a coroutine (see the module)."""

    __slots__ = ("_codes", "_recent")

    def __init__(self) -> None:
        # By the id of the code object (hashing a code object hashes its bytecode); each
        # entry keeps its code object alive, so an id is never reused while it is listed.
        self._codes: dict[int, tuple[CodeType, str, str]] = {}
        # The entry read last (a burst of jobs shares one code): found by identity, with
        # no ``id()`` call (an audited builtin) and no dict lookup.
        self._recent: tuple[CodeType, str, str] | None = None

    def __len__(self) -> int:
        return len(self._codes)

    def builds_coroutine(self, fn: FunctionType) -> bool:
        """Whether calling `fn` (a plain function) only builds a coroutine, right now.

        The callee is looked up at each call: a global rebound from an ``async def`` to a
        plain ``def`` sends the next job to a thread.
        """
        code = fn.__code__
        entry = self._recent
        if entry is None or entry[0] is not code:
            entry = self._codes.get(id(code))
            if entry is None or entry[0] is not code:
                codes = self._codes
                if len(codes) >= LIMIT:
                    codes.clear()
                entry = (code, *callee_of(code))
                codes[id(code)] = entry
            self._recent = entry
        _, opname, name = entry
        if opname == "LOAD_GLOBAL":
            callee = fn.__globals__.get(name)
            if callee is None:  # a builtin, or a NameError the thread will raise
                return False
        elif opname == "LOAD_FAST":  # a positional parameter: its default (no arguments given)
            defaults = fn.__defaults__ or ()
            first = code.co_argcount - len(defaults)  # the first parameter with a default
            index = code.co_varnames.index(name)
            if not first <= index < code.co_argcount:
                return False
            callee = defaults[index - first]
        elif opname == "LOAD_DEREF":
            try:
                cell = fn.__closure__[code.co_freevars.index(name)]  # type: ignore[index]
                callee = cell.cell_contents
            except (TypeError, ValueError):  # not a free variable, or an empty cell
                return False
        else:
            return False
        if type(callee) is functools.partial:  # `_is_coroutine_function`, inline: per job
            callee = callee.func
        return type(callee) is FunctionType and bool(callee.__code__.co_flags & _CO_COROUTINE)
