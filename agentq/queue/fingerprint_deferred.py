"""Claim fingerprints kept unbuilt: what a claimed key holds until a second push compares.

A key claimed by a push keeps the fingerprint of its call as it was then (`agentq.queue.
keytable.KeyTable.claim`), but most keys are never pushed again with another `Job`: the
tuple is built for nothing, and, holding the kept reads of the code's globals, it stays
tracked by the garbage collector as long as the key lives (an ablation under callgrind put
the lambda form's claim fingerprint, building and collecting, at about 21,000 of its
85,000 instructions a job). For the two forms whose fast fingerprint
(`agentq.queue.fingerprint_fast`) is, but for the function's defaults, the same for every
function of one code object, `defer` gives that shared part instead, a `Deferred`, and the
key keeps it with the function's defaults tuple; `Deferred.expand` builds the very tuple
`fast_fingerprint` would have given at the claim, when a comparison needs it:

- a function of a code that reads no value at all (`agentq.queue.fingerprint_parts.SIMPLE`),
  with no defaults: an ``async def`` pushed as itself;
- a closure-less function whose code's reads were kept (`Shared.last`) and would be taken
  again equal (`agentq.queue.fingerprint_parts.same_reads`: every global it reads holds the
  very same object, its defaults are str, int or None): ``lambda i=i: work(i)``;
- a `functools.partial` without keywords, of such a function that reads no value and has
  no defaults, over str, int or None arguments (`defer_partial`): ``partial(work, i)``,
  kept with the partial's arguments tuple.

Exact: everything the expanded tuple holds is read at the claim (the code, the module and
qualified names, the defaults tuple, the kept reads, checked then as `fast_fingerprint`
checks them) and none of it can change afterwards (tuples of str, int and None, strings,
code objects; the kept reads are built once and never changed). Anything else gives None,
and the caller takes the fingerprint as before.
"""

from __future__ import annotations

import functools
from types import CodeType, FunctionType
from typing import Any

from agentq.queue.fingerprint_parts import MARK, SIMPLE, Shared, same_reads

__all__ = ["Deferred", "DeferredPartial", "defer", "defer_partial"]

_MAX_ARGS = 64  # `agentq.queue.fingerprint_fast.MAX_VALUES`: more take the general pass


class Deferred:
    """The part of a fast fingerprint shared by the functions of one code object (all but
    the defaults), kept per queue in its `Shared` table."""

    __slots__ = ("code", "last", "module", "qualname", "reads")

    def __init__(
        self,
        code: CodeType,
        module: str,
        qualname: str,
        reads: tuple[Any, ...],
        last: tuple[Any, ...] | None = None,
    ) -> None:
        self.code = code
        self.module = module
        self.qualname = qualname
        self.reads = reads
        # The `Shared.last` entry `reads` was checked against (None: the code reads no
        # value): a later function of the code whose reads are the same objects as this
        # entry's gets this very part, with one lookup (`defer`).
        self.last = last

    def expand(self, defaults: tuple[Any, ...] | None) -> tuple[Any, ...]:
        """The fast fingerprint of a function of this part with `defaults` (its
        ``__defaults__`` when `defer` gave this part)."""
        return (
            MARK,
            ("function", self.module, self.qualname, self.code,
             () if defaults is None else defaults, (), (), self.reads),
        )

    def __repr__(self) -> str:
        return f"<Deferred fingerprint of {self.module}.{self.qualname}>"


def defer(fn: FunctionType, shared: Shared) -> Deferred | None:
    """The shared part of `fn`'s fast fingerprint, if ``part.expand(fn.__defaults__)`` equals
    ``fast_fingerprint(fn, shared)`` now (the forms of the module); else None.

    Args:
        fn: A plain function (``type(fn) is FunctionType``).
        shared: The queue's table of kept parts (the `Deferred` parts are kept there too).
    """
    # The common push: a function of a code whose part is kept, with the same names, over
    # the same reads (this runs on every push of a ``lambda i=i: work(i)``).
    code = fn.__code__
    kept = shared.recent
    if kept is None or kept.code is not code:
        kept = shared.deferred.get(id(code))
    if (
        kept is not None
        and kept.code is code
        and fn.__closure__ is None
        and not fn.__kwdefaults__
        and fn.__module__ is kept.module
        and fn.__qualname__ is kept.qualname
    ):
        last = kept.last
        if last is None:  # the code reads no value
            if not fn.__defaults__:
                shared.recent = kept
                return kept  # type: ignore[no-any-return]
        elif last[1] is fn.__globals__ and same_reads(last, fn.__defaults__) is kept.reads:
            shared.recent = kept
            return kept  # type: ignore[no-any-return]
    made = _defer(fn, shared)
    if made is not None:
        shared.recent = made
    return made


def _defer(fn: FunctionType, shared: Shared) -> Deferred | None:
    """`defer` without its kept part: found, checked as `fast_fingerprint` checks, and kept."""
    if fn.__kwdefaults__:
        return None
    code = fn.__code__
    defaults = fn.__defaults__
    simple = SIMPLE.get(id(code))
    reads: tuple[Any, ...] | None
    last: tuple[Any, ...] | None = None
    if simple is not None and simple[0] is code and not defaults:  # reads no value at all
        reads = ()
    elif fn.__closure__ is None:
        last = shared.last.get(id(code))
        if last is None or last[0] is not code or last[1] is not fn.__globals__:
            return None
        reads = same_reads(last, defaults)
        if reads is None:
            return None
    else:
        return None
    kept = shared.deferred.get(id(code))
    module = fn.__module__
    qualname = fn.__qualname__
    if (
        kept is not None
        and kept.code is code
        and kept.reads is reads
        and kept.last is last
        and kept.module is module
        and kept.qualname is qualname
    ):
        return kept  # type: ignore[no-any-return]
    made = Deferred(code, module, qualname, reads, last)
    shared.keep_deferred(code, made)
    return made


class DeferredPartial:
    """The part of a partial's fast fingerprint shared by the partials of one function's
    code (all but the arguments), kept per queue in its `Shared` table."""

    __slots__ = ("function",)

    def __init__(self, code: CodeType, module: str, qualname: str) -> None:
        self.function = ("function", module, qualname, code, (), (), (), ())

    def expand(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The fast fingerprint of a partial of this part's function over `args` (its
        ``args`` when `defer_partial` gave this part)."""
        return (MARK, ("partial", args, ()), self.function)

    def __repr__(self) -> str:
        return f"<Deferred fingerprint of partial({self.function[1]}.{self.function[2]}, ...)>"


def defer_partial(fn: functools.partial[Any], shared: Shared) -> DeferredPartial | None:
    """The shared part of the partial `fn`'s fast fingerprint, if ``part.expand(fn.args)``
    equals ``fast_fingerprint(fn, shared)`` now (the form of the module); else None."""
    if fn.keywords:
        return None
    func = fn.func
    if type(func) is not FunctionType or func.__defaults__ or func.__kwdefaults__:
        return None
    code = func.__code__
    simple = SIMPLE.get(id(code))
    if simple is None or simple[0] is not code:  # reads a value: not this form
        return None
    args = fn.args
    if len(args) >= _MAX_ARGS:
        return None
    for arg in args:
        kind = type(arg)
        if not (kind is str or arg is None or kind is int):
            return None
    kept = shared.deferred_partials.get(id(code))
    module = func.__module__
    qualname = func.__qualname__
    if kept is not None:
        function = kept.function
        if function[3] is code and function[1] is module and function[2] is qualname:
            return kept  # type: ignore[no-any-return]
    made = DeferredPartial(code, module, qualname)
    shared.keep_deferred(code, made, partial=True)
    return made
