"""What makes two pushes of one idempotency key "the same call" (field report BH-25, issue 9).

A key pushed again with a different call must not silently get the first call's result. The
fingerprint of the push that claims a key is taken when it is pushed (claimed), so that it
describes the call as it was then; a later push of the key is compared against it with its own
fingerprint, taken at that later push. Only a push of the very `Job` object that claimed the
key skips the comparison (identity). Deriving one costs a few microseconds, once per executed
job (`derive_fingerprint`).

A derived fingerprint is made of what identifies a call, the function and the values it
uses, unwrapping the callable layer by layer:

- `functools.partial`: its positional and keyword arguments, then its func;
- a bound method: its ``self``, then the function;
- a Python function: module, qualified name, code object, its defaults, each value its
  closure captured, and each module-level value its code reads (a notebook cell's global
  ``user``). What the function writes is its state, not an input (issue 20): a global its
  own code assigns (``global n``) is left out, and a closure variable it rebinds
  (``nonlocal n; n += 1``) is equal to itself for the same function object whatever it
  holds, compared by value only between two function objects (a factory's closures);
- any other callable object: the object itself, as a value.

Each value is compared by a canonical form:

- JSON-like values (and bytes, complex, enum members, sets, frozensets) by value, type
  included (``1``, ``1.0`` and ``True`` differ), dict keys and set items in canonical order;
- functions, partials and bound methods by their own fingerprint only, never by identity
  (the same helper reading another global now is another call); one past the bounds below
  is refused (`_REFUSE`: equal to nothing, so a conflict, never another call's result);
- a class by its module, qualified name, bases' names and content (plain attributes by
  value, the code of its methods, static and class methods and property accessors), so a
  class redefined with another body is another value; a module by its name;
- an object whose class defines ``__agentq_fingerprint__()`` by what it returns
  (`agentq.queue.fingerprint_value.FINGERPRINT_HOOK`: a step's context returns a constant);
- any other object by its ``repr`` when its class gives a meaningful one (a dataclass, a
  pydantic model; one over `MAX_REPR` characters as its digest), otherwise (the default
  ``<… object at 0x…>``, a ``repr`` eliding with ``...``, a failing one) by identity. Arrays
  and data frames (``__array__`` / ``__dataframe__``) compare by identity, no ``repr`` built.

The same object (not a function) is always the same value, however its contents changed
(the identity rule: a job that bumps a counter on its client stays "the same call"). So
``partial(send_mail, "alice")`` and ``partial(send_mail, "bob")`` differ, while a re-created
``lambda: send(params)`` over an equal dict does not. Else give ``Job(fingerprint=…)``.

Deriving is bounded, so that a push never walks a huge value: a container of more than
`MAX_ITEMS` items, a value nested more than 32 levels deep, and every value past the first
`MAX_VALUES` of one fingerprint compare by identity (two such values that are not the same
object are two calls). Comparing a later push with the key's fingerprint (``kept``) never
walks what a value reaches when it is the very object kept, so a hit costs time bounded by
the number of values the call names. The fingerprint stored with a completed key, across
processes, is the same walk with the stored rules (`agentq.queue.fingerprint_stored`).
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
import weakref
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any

from agentq.queue.fingerprint_cache import code_info
from agentq.queue.fingerprint_value import (
    _IDENTITY,
    _REFUSE,
    _callable_kind,
    _is_call,
    _type_name,
    _Value,
    stand_in,
)

__all__ = ["MAX_ITEMS", "MAX_REPR", "MAX_VALUES", "derive_fingerprint"]

MAX_ITEMS = 1_000
"""A list, tuple, dict, set or frozenset of more items than this compares by identity."""

MAX_VALUES = 10_000
"""Values examined for one fingerprint; those past it compare by identity."""

MAX_REPR = 4_096
"""A repr longer than this is kept (in memory) as its SHA-256 digest, not whole."""

_MAX_DEPTH = 32  # values nested deeper compare by identity
_TAGGED = frozenset({bool, int, bytes})  # by value, with their type (1, 1.0 and True differ)
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr that shows identity, not contents
_CLASS_SKIP = frozenset({"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"})


class _Walk:
    """One derivation: the values being entered (to tell a cycle) and the budget left."""

    __slots__ = ("budget", "by_name", "portable", "stack", "stored")

    def __init__(
        self, *, by_name: bool = False, stored: bool = False, portable: bool = False
    ) -> None:
        self.stack: set[int] = set()
        self.budget = MAX_VALUES
        self.by_name = by_name  # a function the call only uses: its module and name only
        # the stored form v1 (kept as it was): a class by its name, a long repr whole, a
        # global the function writes still read
        self.stored = stored or by_name
        # any stored form (v1, v2): a closure variable the function rebinds left out, a
        # function past the bounds by identity (then by its type)
        self.portable = portable or self.stored

    def past_bounds(self, value: object) -> Any:
        """The form of a value past the bounds: refused if a callable (in memory)."""
        return _REFUSE if not self.portable and _callable_kind(value) else _IDENTITY

    def value(self, value: object, depth: int, kept: Any = None) -> Any:
        """The comparable form of one value: itself for str and None, else a `_Value`.

        `kept` is the form of this place in a fingerprint to compare with (or None): the
        very object it holds (not a function) is equal to it by the identity rule, so it is
        answered as `kept` itself, without walking what the object reaches; a function
        there is walked against the kept one's parts.
        """
        if type(value) is str or value is None:
            return value  # never equal to a _Value, nor to a value of another type
        if type(kept) is _Value and kept.form is not _REFUSE and kept.obj is value:
            if not _is_call(kept.form):
                return kept  # the same object: the same value (see `_Value`)
            if id(value) not in self.stack and depth < _MAX_DEPTH and self.budget > 0:
                self.budget -= 1  # as `form` would walk it, against the kept parts
                return _Value(value, ("call", self.derive(value, depth + 1, kept.form[1])))
        self.budget -= 1
        if self.budget < 0:
            return _Value(value, self.past_bounds(value))
        return _Value(value, self.form(value, depth))

    def form(self, value: object, depth: int) -> Any:
        """The canonical form of `value`, or `_IDENTITY` when only the object itself will do."""
        kind = type(value)
        if kind in _TAGGED:
            return (kind.__name__, value)
        if kind is float or kind is complex:
            return (kind.__name__, repr(value))  # so that nan equals nan
        if isinstance(value, enum.Enum):
            return ("enum", _type_name(value), value.name)
        if id(value) in self.stack:
            return ("cycle",)  # a value that contains itself, or a function that calls itself
        if depth >= _MAX_DEPTH:
            return self.past_bounds(value)
        if kind in _CONTAINERS:
            if len(value) > MAX_ITEMS:  # type: ignore[arg-type]
                return _IDENTITY
            return self.container(value, kind, depth + 1)
        if kind is FunctionType and self.by_name:
            return ("call", (("function", value.__module__, value.__qualname__),))  # type: ignore[attr-defined]
        if kind is FunctionType or kind is MethodType or isinstance(value, functools.partial):
            return ("call", self.derive(value, depth + 1))
        if isinstance(value, type) and not self.stored:  # v1: by its name
            return self.klass(value, depth + 1)
        hooked, stands_for = stand_in(value)  # the fingerprint protocol
        if hooked:
            return stands_for if stands_for is _IDENTITY else (
                "stands-for", _type_name(value), self.value(stands_for, depth + 1))
        if hasattr(kind, "__array__") or hasattr(kind, "__dataframe__"):
            return _IDENTITY  # numpy, pandas, polars, arrow: a summary repr, costly to build
        try:
            text = repr(value)
        except Exception:  # a broken __repr__ must not break a push
            return _IDENTITY
        if _ADDRESS.search(text) or "..." in text or "…" in text:
            return _IDENTITY  # identity, or a summary (numpy, pandas) that elides contents
        if len(text) > MAX_REPR and not self.stored:  # kept as a digest, not whole
            return ("repr-digest", _type_name(value), hashlib.sha256(text.encode()).digest())
        return ("repr", _type_name(value), text)

    def container(self, value: Any, kind: type, depth: int) -> Any:
        self.stack.add(id(value))
        try:
            if kind is dict:
                items = [(self.value(k, depth), self.value(v, depth)) for k, v in value.items()]
                items.sort(key=lambda item: repr(item[0]))
                return ("dict", tuple(items))
            forms = [self.value(item, depth) for item in value]
            if kind is set or kind is frozenset:
                forms.sort(key=repr)
            return (kind.__name__, tuple(forms))
        finally:
            self.stack.discard(id(value))

    def klass(self, cls: type, depth: int) -> Any:
        """A class by its module, qualified name, bases' names and own content: its plain
        attributes (not ``__x__`` ones) by value, each function's (method's, static or
        class method's, property accessor's) code, so that a class redefined with another
        body (a re-run notebook cell) is another value. Its methods' globals are not read."""
        namespace = vars(cls)
        if len(namespace) > MAX_ITEMS:
            return _IDENTITY
        self.stack.add(id(cls))
        try:
            items: list[Any] = []
            for name in sorted(namespace):
                if name in _CLASS_SKIP:
                    continue
                attr = namespace[name]
                if type(attr) is staticmethod or type(attr) is classmethod:
                    attr = attr.__func__
                if type(attr) is property:
                    codes = [getattr(f, "__code__", None) for f in (attr.fget, attr.fset)]
                    items.append((name, "property", tuple(codes)))
                elif type(attr) is FunctionType:
                    defaults = self.value(attr.__defaults__, depth)
                    items.append((name, "code", attr.__code__, defaults))
                elif not (name.startswith("__") and name.endswith("__")):
                    items.append((name, self.value(attr, depth)))
            bases = tuple(f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__)
            return ("class", cls.__module__, cls.__qualname__, bases, tuple(items))
        finally:
            self.stack.discard(id(cls))

    def derive(self, fn: Any, depth: int, kept: Any = None) -> tuple[Any, ...]:
        """The fingerprint of the call ``fn()``: one part per layer of the callable.

        `kept` is a fingerprint to compare the result with (or None): each value that is
        the very object kept at its place is answered by the kept form (see `value`), so
        that comparing the same call again never walks the data its values reach.
        """
        stack = self.stack
        parts: list[Any] = []
        entered: list[int] = []  # the layers being derived, to tell a cycle back to them
        try:
            while True:
                kind = type(fn)
                was = _layer(kept, len(parts))
                if kind is MethodType:
                    mine = was[1] if was is not None and was[0] == "self" else None
                    parts.append(("self", self.value(fn.__self__, depth, mine)))
                    fn = fn.__func__
                elif kind is functools.partial or isinstance(fn, functools.partial):
                    stack.add(id(fn))
                    entered.append(id(fn))
                    old = was if was is not None and was[0] == "partial" else _NO_PARTIAL
                    args = (
                        tuple([self.value(a, depth, _at(old[1], i)) for i, a in enumerate(fn.args)])
                        if fn.args
                        else ()
                    )
                    keywords = fn.keywords
                    named = dict(old[2]) if old[2] else {}
                    kwargs = (
                        tuple(sorted([
                            (k, self.value(v, depth, named.get(k))) for k, v in keywords.items()
                        ]))
                        if keywords
                        else ()
                    )
                    parts.append(("partial", args, kwargs))
                    fn = fn.func
                else:
                    break
            was = _layer(kept, len(parts))
            if type(fn) is FunctionType and self.by_name and (parts or depth > 0):
                # only used (a partial's or a method's function, one among the values):
                # its closure and globals are its own state, which changes as calls run
                parts.append(("function", fn.__module__, fn.__qualname__))
            elif type(fn) is FunctionType:
                stack.add(id(fn))
                entered.append(id(fn))
                same = was is not None and len(was) == 8 and was[0] == "function"
                parts.append(self.function(fn, depth, was if same else None))
            else:
                mine = was[1] if was is not None and was[0] == "callable" else None
                parts.append(("callable", self.value(fn, depth, mine)))
        finally:
            for ident in entered:
                stack.discard(ident)
        return tuple(parts)

    def function(self, fn: FunctionType, depth: int, kept: Any = None) -> tuple[Any, ...]:
        """A function's part; `kept` is the kept part to compare with, or None."""
        code = fn.__code__
        _, rebound, names, reads = code_info(code)
        if not self.stored:
            names = reads  # a global the function assigns is its state (v1 still read it)
        defaults = fn.__defaults__
        kwdefaults = fn.__kwdefaults__
        closure = fn.__closure__
        if kept is not None and (kept[3] is not code or kept[2] != fn.__qualname__):
            kept = None
        value = self.value
        return (
            "function", fn.__module__, fn.__qualname__, code,
            tuple([value(v, depth, kept and _at(kept[4], i)) for i, v in enumerate(defaults)])
            if defaults
            else (),
            tuple(sorted([
                (k, value(v, depth, kept and _named(kept[5], k))) for k, v in kwdefaults.items()
            ]))
            if kwdefaults
            else (),
            self.cells(fn, code, closure, rebound, depth, kept and kept[6]) if closure else (),
            self.globals(fn.__globals__, names, depth, kept and kept[7]) if names else (),
        )

    def cells(
        self,
        fn: FunctionType,
        code: CodeType,
        closure: tuple[Any, ...],
        rebound: frozenset[str],
        depth: int,
        kept: Any,
    ) -> tuple[Any, ...]:
        """The values of the closure's cells. A variable the function rebinds itself
        (``nonlocal x; x += 1``) is its state, not an input: stored forms leave it out; in
        memory, such values of one function object are equal whatever they hold (`_Value`'s
        ``owner``), and of two function objects compare as values (a factory's closure)."""
        values: list[Any] = []
        owner = None
        for name, cell in zip(code.co_freevars, closure, strict=False):
            written = name in rebound
            if written and self.portable:
                continue  # stored forms: a variable the function rebinds is left out
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a variable not bound yet)
                values.append((name, "<empty>"))
                continue
            was = _named(kept, name) if kept else None
            if not written:
                values.append((name, self.value(value, depth, was)))
                continue
            if owner is None:
                owner = weakref.ref(fn)
            if type(was) is _Value and was.owner is not None and was.owner() is fn:
                values.append((name, was))  # the same function's state: equal, not walked
                continue
            made = self.value(value, depth)
            if type(made) is not _Value:
                made = _Value(made, ("str", made) if type(made) is str else ("none",))
            made.owner = owner
            values.append((name, made))
        return tuple(values)

    def globals(
        self, namespace: dict[str, Any], names: tuple[str, ...], depth: int, kept: Any
    ) -> tuple[Any, ...]:
        """The module-level values the function reads: a notebook's ``lambda: send(user)``
        over a global ``user`` is another call once ``user`` is rebound."""
        values: list[Any] = []
        for name in names:
            if name in namespace:
                value = namespace[name]
                if isinstance(value, ModuleType) or (self.stored and isinstance(value, type)):
                    values.append((name, _type_name(value), getattr(value, "__qualname__", name)))
                else:
                    was = _named(kept, name) if kept else None
                    values.append((name, self.value(value, depth, was)))
        return tuple(values)


_NO_PARTIAL = ("partial", (), ())


def _layer(kept: Any, i: int) -> Any:
    """Layer `i` of the kept fingerprint `kept` if it is one (a tuple part), else None."""
    if type(kept) is tuple and i < len(kept):
        layer = kept[i]
        if type(layer) is tuple and layer and type(layer[0]) is str:
            return layer
    return None


def _at(kept: Any, i: int) -> Any:
    """Item `i` of a kept tuple of values, or None."""
    return kept[i] if type(kept) is tuple and i < len(kept) else None


def _named(kept: Any, name: str) -> Any:
    """The value kept under `name` in a tuple of ``(name, value)`` entries, or None."""
    if type(kept) is tuple:
        for entry in kept:
            if type(entry) is tuple and len(entry) == 2 and entry[0] == name:
                return entry[1]
    return None


def derive_fingerprint(fn: Any, kept: Any = None) -> tuple[Any, ...]:
    """Return the fingerprint of the call ``fn()``, as of now (see the module docstring).

    Args:
        fn: Any callable.
        kept: A fingerprint the result will be compared with (a key's), or None. A value
            that is the very object `kept` holds at its place is not walked again: the
            result then holds the kept form there, so ``result == kept`` is decided as
            without `kept`, in time that does not grow with the data the values reach.

    Returns:
        A tuple to compare with ``==`` against another call's fingerprint; it keeps references
        to the values the call uses (compared by identity where they have no canonical form).
    """
    return _Walk().derive(fn, 0, kept)
