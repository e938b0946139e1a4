"""What makes two pushes of one idempotency key "the same call" (field report BH-25).

A key pushed again with a different call must not silently get the first call's result. The
queue compares fingerprints only when a key is pushed while it is already known, and takes a
fast path when both pushes carry the same callable object: deriving one costs microseconds
and happens only then.

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
  elides contents with ``...`` as numpy arrays and DataFrames do, or a ``repr`` that fails)
  by identity: only the same object is the same value.

And the same object is always the same value, however its contents changed in between: a
job that fills a shared cache or bumps a counter on its client stays "the same call". So
``partial(send_mail, "alice")`` and ``partial(send_mail, "bob")`` differ, as do
``lambda: send(user)`` built for two users, while a re-created ``partial(send_mail,
"alice")`` or ``lambda: send(params)`` over an equal dict does not. Give
``Job(fingerprint=…)`` explicitly when this is not what you want (for example for objects
with the default repr that are re-created for every push).

A queue with a store (`Queue(store=...)`) keeps each completed key's fingerprint beside its
output, as text (`stored_fingerprint`): a SHA-256 digest of the fingerprint's portable form,
which keeps only what means the same thing in another process:

- every value that compares by value, exactly as above (type included);
- a value compared by identity (the default ``<… object at 0x…>`` repr, an elided repr)
  becomes its type only: no object outlives its process, so across processes two such values
  of one type count as the same value;
- a module-level list, dict, set or bytearray that a function reads becomes its type only:
  such a global is nearly always shared state (a log, a cache, a registry) whose contents
  when the job completed say nothing about the call, and within one process it is the same
  object anyway. Pass what identifies a call as an argument (a `functools.partial`) or give
  ``fingerprint=``;
- a function's code object becomes the names and the literal constants its code uses (with
  those of the functions defined inside it), not its bytecode, which changes between Python
  versions. An edited function body that reads the same names and constants is the same
  call across processes (it is another call within one process).

So a key completed with ``partial(send_mail, "alice")`` before a restart answers a push of
``partial(send_mail, "alice")`` after it, and refuses ``partial(send_mail, "bob")``. An
explicit ``Job(fingerprint=…)`` is stored by the portable form of its value (so ``1`` and
``1.0`` differ across processes, while they are equal under ``==``). The text starts with a
format version (``v1:``): a later format will not match it.
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import inspect
import json
import re
from types import CodeType
from typing import Any

__all__ = ["derive_fingerprint", "stored_fingerprint"]

_SCALARS = frozenset({type(None), bool, int, str, bytes})
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr that shows identity, not contents
_MAX_DEPTH = 32  # deeper values count by identity
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


def _is_call(value: object) -> bool:
    return isinstance(value, functools.partial) or inspect.ismethod(value) or (
        inspect.isfunction(value)
    )


def _value(value: object, depth: int, stack: set[int]) -> _Value:
    return _Value(value, _form(value, depth, stack))


def _form(value: object, depth: int, stack: set[int]) -> Any:
    """The canonical form of `value`, or `_IDENTITY` when only the object itself will do."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind.__name__, value)
    if kind is float or kind is complex:
        return (kind.__name__, repr(value))  # so that nan equals nan
    if isinstance(value, enum.Enum):
        return ("enum", _type_name(value), value.name)
    if id(value) in stack:
        return ("cycle",)  # a value that contains itself, or a function that calls itself
    if depth >= _MAX_DEPTH:
        return _IDENTITY
    if kind is list or kind is tuple or kind is dict or kind is set or kind is frozenset:
        stack.add(id(value))
        try:
            if kind is dict:
                items = [
                    (_value(k, depth + 1, stack), _value(v, depth + 1, stack))
                    for k, v in value.items()  # type: ignore[attr-defined]
                ]
                items.sort(key=lambda item: repr(item[0]))
                return ("dict", tuple(items))
            forms = [_value(item, depth + 1, stack) for item in value]  # type: ignore[attr-defined]
            if kind is set or kind is frozenset:
                forms.sort(key=repr)
            return (kind.__name__, tuple(forms))
        finally:
            stack.discard(id(value))
    if _is_call(value):
        return ("call", _derive(value, depth + 1, stack))
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break a push
        return _IDENTITY
    if _ADDRESS.search(text) or "..." in text or "…" in text:
        return _IDENTITY  # identity, or a summary (numpy, pandas) that elides contents
    return ("repr", _type_name(value), text)


@functools.lru_cache(maxsize=512)
def _rebound(code: CodeType) -> frozenset[str]:
    """Names of closure variables that `code` assigns or deletes (``nonlocal`` state)."""
    return frozenset(
        str(ins.argval)
        for ins in dis.get_instructions(code)
        if ins.opname in ("STORE_DEREF", "DELETE_DEREF")
    )


def _cells(fn: Any, code: CodeType, depth: int, stack: set[int]) -> tuple[Any, ...]:
    closure = getattr(fn, "__closure__", None) or ()
    state = _rebound(code)
    values: list[Any] = []
    for name, cell in zip(code.co_freevars, closure, strict=False):
        if name in state:
            continue
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a variable not bound yet)
            values.append((name, "<empty>"))
            continue
        values.append((name, _value(value, depth, stack)))
    return tuple(values)


@functools.lru_cache(maxsize=512)
def _global_names(code: CodeType) -> tuple[str, ...]:
    """Names `code` (and the functions defined inside it) may read as globals."""
    names: set[str] = set()
    todo = [code]
    while todo:
        current = todo.pop()
        names.update(current.co_names)
        todo.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return tuple(sorted(names))


def _globals(fn: Any, code: CodeType, depth: int, stack: set[int]) -> tuple[Any, ...]:
    """The module-level values the function reads: a notebook's ``lambda: send(user)`` over
    a global ``user`` is another call once ``user`` is rebound."""
    namespace = getattr(fn, "__globals__", None)
    if not isinstance(namespace, dict):
        return ()
    values: list[Any] = []
    for name in _global_names(code):
        if name in namespace:
            value = namespace[name]
            if inspect.ismodule(value) or inspect.isclass(value):
                values.append((name, _type_name(value), getattr(value, "__qualname__", name)))
            else:
                values.append((name, _value(value, depth, stack)))
    return tuple(values)


def _derive(fn: Any, depth: int, stack: set[int]) -> tuple[Any, ...]:
    parts: list[Any] = []
    entered: list[int] = []  # the layers being derived, to tell a cycle back to them
    try:
        while True:
            if isinstance(fn, functools.partial):
                stack.add(id(fn))
                entered.append(id(fn))
                args = tuple(_value(a, depth, stack) for a in fn.args)
                kwargs = tuple(
                    sorted((k, _value(v, depth, stack)) for k, v in fn.keywords.items())
                )
                parts.append(("partial", args, kwargs))
                fn = fn.func
            elif inspect.ismethod(fn):
                parts.append(("self", _value(fn.__self__, depth, stack)))
                fn = fn.__func__
            else:
                break
        code = getattr(fn, "__code__", None)
        if inspect.isfunction(fn) and isinstance(code, CodeType):
            stack.add(id(fn))
            entered.append(id(fn))
            defaults = tuple(_value(v, depth, stack) for v in fn.__defaults__ or ())
            kwdefaults = tuple(
                sorted((k, _value(v, depth, stack)) for k, v in (fn.__kwdefaults__ or {}).items())
            )
            parts.append(
                (
                    "function",
                    fn.__module__,
                    fn.__qualname__,
                    code,
                    defaults,
                    kwdefaults,
                    _cells(fn, code, depth, stack),
                    _globals(fn, code, depth, stack),
                )
            )
        else:
            parts.append(("callable", _value(fn, depth, stack)))
    finally:
        for ident in entered:
            stack.discard(ident)
    return tuple(parts)


def derive_fingerprint(fn: Any) -> tuple[Any, ...]:
    """Return the fingerprint of the call ``fn()`` (see the module docstring)."""
    return _derive(fn, 0, set())


# ---------------------------------------------------------------- the stored form

STORED_FORMAT = "v1"
"""The version of `stored_fingerprint`'s text; a new format never matches an older one."""

_BIG_INT_BITS = 1024  # larger ints are written in hex (int-to-text conversion is limited)


def _constants(code: CodeType, out: set[str]) -> None:
    """The literal constants `code` (and code defined inside it) uses, as canonical JSON."""
    for const in code.co_consts:
        if isinstance(const, CodeType):
            _constants(const, out)
        elif const is not None:  # None is the compiler's filler (docstring slot, return)
            out.add(_canonical(_portable(_form(const, 0, set()))))


@functools.lru_cache(maxsize=512)
def _code_form(code: CodeType) -> tuple[Any, ...]:
    """The portable form of a code object: the names and literal constants it uses."""
    constants: set[str] = set()
    _constants(code, constants)
    return ("code", _global_names(code), tuple(sorted(constants)))


_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _canonical(form: Any) -> str:
    return _JSON.encode(form)


_SHARED_STATE = (list, dict, set, bytearray)  # as module-level values: by their type only


def _portable_global(item: tuple[Any, ...]) -> Any:
    """One module-level value a function reads (see `_globals`), in its portable form."""
    if len(item) == 2 and isinstance(item[1], _Value) and type(item[1].obj) in _SHARED_STATE:
        return [item[0], "shared", _type_name(item[1].obj)]
    return _portable(item)


def _portable(part: Any) -> Any:
    """A JSON form of a derived fingerprint that means the same thing in another process."""
    kind = type(part)
    if kind is str or part is None or kind is bool:
        return part
    if kind is _Value:
        if part.form is _IDENTITY:
            return ["object", _type_name(part.obj)]
        return _portable(part.form)
    if kind is tuple:
        if len(part) == 8 and part[0] == "function":  # see _derive: its globals are special
            return [_portable(p) for p in part[:7]] + [[_portable_global(g) for g in part[7]]]
        return [_portable(p) for p in part]
    if kind is int:
        return part if part.bit_length() <= _BIG_INT_BITS else ["int", hex(part)]
    if kind is list:
        return [_portable(p) for p in part]
    if kind is bytes:
        return ["bytes", part.hex()]
    if isinstance(part, CodeType):
        return _code_form(part)
    return ["object", _type_name(part)]  # not produced by _derive or _form; kept safe


def stored_fingerprint(fn: Any, explicit: Any = None) -> str:
    """Return the fingerprint of the call ``fn()`` as text to store (see the module docstring).

    Args:
        fn: The job's callable.
        explicit: The job's explicit ``fingerprint=``, or None to derive it from `fn`.

    Returns:
        ``"v1:"`` and 64 hex digits: equal texts mean the same call, in any process.
    """
    if explicit is not None:
        form = ["explicit", _portable(_form(explicit, 0, set()))]
    else:
        form = ["derived", _portable(_derive(fn, 0, set()))]
    digest = hashlib.sha256(_canonical(form).encode("ascii")).hexdigest()
    return f"{STORED_FORMAT}:{digest}"
