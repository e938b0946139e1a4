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
  closure captured, except a variable the function rebinds itself (``nonlocal`` state such
  as a counter), and each module-level value its code reads (a notebook cell's global
  ``user``);
- any other callable object: the object itself, as a value.

Each value is compared by a canonical form:

- JSON-like values (None, bool, int, float, str, and lists, tuples and dicts of them; also
  bytes, complex, enum members, sets and frozensets) by value, type included (``1``,
  ``1.0`` and ``True`` differ), with dict keys and set items in a canonical order;
- functions, partials and bound methods by their own fingerprint;
- any other object by its ``repr`` when its class gives a meaningful one (a dataclass, a
  pydantic model, a class), otherwise (the default ``<… object at 0x…>``, a ``repr`` that
  elides contents with ``...``, or a ``repr`` that fails) by identity: only the same object
  is the same value. Arrays and data frames (a class with ``__array__`` or
  ``__dataframe__``: numpy, pandas, polars, arrow) compare by identity without their
  ``repr`` being built, since it elides their contents and costs milliseconds.

And the same object is always the same value, however its contents changed in between: a
job that fills a shared cache or bumps a counter on its client stays "the same call". So
``partial(send_mail, "alice")`` and ``partial(send_mail, "bob")`` differ, as do
``lambda: send(user)`` built for two users, while a re-created ``partial(send_mail,
"alice")`` or ``lambda: send(params)`` over an equal dict does not. Give
``Job(fingerprint=…)`` explicitly when this is not what you want (for example for objects
with the default repr that are re-created for every push).

Deriving is bounded, so that a push never walks a huge value: a container of more than
`MAX_ITEMS` items, a value nested more than 32 levels deep, and every value past the first
`MAX_VALUES` of one fingerprint compare by identity (on the safe side: two such values that
are not the same object are two calls).
"""

from __future__ import annotations

import dis
import enum
import functools
import re
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any

__all__ = ["MAX_ITEMS", "MAX_VALUES", "derive_fingerprint"]

MAX_ITEMS = 1_000
"""A list, tuple, dict, set or frozenset of more items than this compares by identity."""

MAX_VALUES = 10_000
"""Values examined for one fingerprint; those past it compare by identity."""

_MAX_DEPTH = 32  # values nested deeper compare by identity
_TAGGED = frozenset({bool, int, bytes})  # by value, with their type (1, 1.0 and True differ)
_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr that shows identity, not contents
_IDENTITY: Any = object()


class _Value:
    """One value a call uses: equal to another if it is the same object, or if both have a
    canonical form and the forms are equal."""

    __slots__ = ("form", "obj")

    def __init__(self, obj: object, form: Any) -> None:
        self.obj = obj
        self.form = form

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Value):
            return NotImplemented
        return self.obj is other.obj or (
            self.form is not _IDENTITY and other.form is not _IDENTITY and self.form == other.form
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.form is _IDENTITY:
            return f"<the object {_type_name(self.obj)} at {id(self.obj):#x}>"
        return repr(self.form)


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


# What a code object reads, by the identity of the code object (a dict lookup by id is much
# cheaper than hashing a code object). Entries keep their code object, so an id is never
# reused while its entry lives; the table is emptied when it reaches _CODE_LIMIT entries.
_CODE_LIMIT = 1024
_CODE_INFO: dict[int, tuple[CodeType, frozenset[str], tuple[str, ...]]] = {}


def _code_info(code: CodeType) -> tuple[CodeType, frozenset[str], tuple[str, ...]]:
    """`code`, the closure variables it rebinds (``nonlocal`` state), the globals it may read."""
    info = _CODE_INFO.get(id(code))
    if info is None or info[0] is not code:
        rebound = frozenset(
            str(ins.argval)
            for ins in dis.get_instructions(code)
            if ins.opname in ("STORE_DEREF", "DELETE_DEREF")
        )
        names: set[str] = set()
        todo = [code]
        while todo:  # the function's code and the code of the functions defined inside it
            current = todo.pop()
            names.update(current.co_names)
            todo.extend(c for c in current.co_consts if isinstance(c, CodeType))
        info = (code, rebound, tuple(sorted(names)))
        if len(_CODE_INFO) >= _CODE_LIMIT:
            _CODE_INFO.clear()
        _CODE_INFO[id(code)] = info
    return info


class _Walk:
    """One derivation: the values being entered (to tell a cycle) and the budget left."""

    __slots__ = ("budget", "stack")

    def __init__(self) -> None:
        self.stack: set[int] = set()
        self.budget = MAX_VALUES

    def value(self, value: object, depth: int) -> Any:
        """The comparable form of one value: itself for str and None, else a `_Value`."""
        if type(value) is str or value is None:
            return value  # never equal to a _Value, nor to a value of another type
        self.budget -= 1
        if self.budget < 0:
            return _Value(value, _IDENTITY)
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
            return _IDENTITY
        if kind in _CONTAINERS:
            if len(value) > MAX_ITEMS:  # type: ignore[arg-type]
                return _IDENTITY
            return self.container(value, kind, depth + 1)
        if kind is FunctionType or kind is MethodType or isinstance(value, functools.partial):
            return ("call", self.derive(value, depth + 1))
        if hasattr(kind, "__array__") or hasattr(kind, "__dataframe__"):
            return _IDENTITY  # numpy, pandas, polars, arrow: a summary repr, costly to build
        try:
            text = repr(value)
        except Exception:  # a broken __repr__ must not break a push
            return _IDENTITY
        if _ADDRESS.search(text) or "..." in text or "…" in text:
            return _IDENTITY  # identity, or a summary (numpy, pandas) that elides contents
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

    def derive(self, fn: Any, depth: int) -> tuple[Any, ...]:
        """The fingerprint of the call ``fn()``: one part per layer of the callable."""
        stack = self.stack
        parts: list[Any] = []
        entered: list[int] = []  # the layers being derived, to tell a cycle back to them
        try:
            while True:
                kind = type(fn)
                if kind is MethodType:
                    parts.append(("self", self.value(fn.__self__, depth)))
                    fn = fn.__func__
                elif kind is functools.partial or isinstance(fn, functools.partial):
                    stack.add(id(fn))
                    entered.append(id(fn))
                    args = tuple([self.value(a, depth) for a in fn.args]) if fn.args else ()
                    keywords = fn.keywords
                    kwargs = (
                        tuple(sorted([(k, self.value(v, depth)) for k, v in keywords.items()]))
                        if keywords
                        else ()
                    )
                    parts.append(("partial", args, kwargs))
                    fn = fn.func
                else:
                    break
            if type(fn) is FunctionType:
                stack.add(id(fn))
                entered.append(id(fn))
                parts.append(self.function(fn, depth))
            else:
                parts.append(("callable", self.value(fn, depth)))
        finally:
            for ident in entered:
                stack.discard(ident)
        return tuple(parts)

    def function(self, fn: FunctionType, depth: int) -> tuple[Any, ...]:
        code = fn.__code__
        _, rebound, names = _code_info(code)
        defaults = fn.__defaults__
        kwdefaults = fn.__kwdefaults__
        closure = fn.__closure__
        return (
            "function",
            fn.__module__,
            fn.__qualname__,
            code,
            tuple([self.value(v, depth) for v in defaults]) if defaults else (),
            tuple(sorted([(k, self.value(v, depth)) for k, v in kwdefaults.items()]))
            if kwdefaults
            else (),
            self.cells(code, closure, rebound, depth) if closure else (),
            self.globals(fn.__globals__, names, depth) if names else (),
        )

    def cells(
        self,
        code: CodeType,
        closure: tuple[Any, ...],
        rebound: frozenset[str],
        depth: int,
    ) -> tuple[Any, ...]:
        values: list[Any] = []
        for name, cell in zip(code.co_freevars, closure, strict=False):
            if name in rebound:
                continue  # state the function keeps (a counter), not what it is called with
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a variable not bound yet)
                values.append((name, "<empty>"))
                continue
            values.append((name, self.value(value, depth)))
        return tuple(values)

    def globals(
        self, namespace: dict[str, Any], names: tuple[str, ...], depth: int
    ) -> tuple[Any, ...]:
        """The module-level values the function reads: a notebook's ``lambda: send(user)``
        over a global ``user`` is another call once ``user`` is rebound."""
        values: list[Any] = []
        for name in names:
            if name in namespace:
                value = namespace[name]
                if isinstance(value, ModuleType | type):
                    values.append((name, _type_name(value), getattr(value, "__qualname__", name)))
                else:
                    values.append((name, self.value(value, depth)))
        return tuple(values)


def derive_fingerprint(fn: Any) -> tuple[Any, ...]:
    """Return the fingerprint of the call ``fn()``, as of now (see the module docstring).

    Args:
        fn: Any callable.

    Returns:
        A tuple to compare with ``==`` against another call's fingerprint; it keeps references
        to the values the call uses (compared by identity where they have no canonical form).
    """
    return _Walk().derive(fn, 0)
