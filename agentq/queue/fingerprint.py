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
"""

from __future__ import annotations

import dis
import enum
import functools
import hashlib
import inspect
import re
from types import CodeType, FunctionType
from typing import Any

__all__ = ["derive_fingerprint", "portable_fingerprint"]

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


def _portable(part: Any) -> Any:
    """`part` with what cannot cross a process replaced: code objects dropped, objects that
    compare by identity reduced to their type, functions a call uses reduced to their name."""
    if isinstance(part, _Value):
        if part.form is _IDENTITY:
            return ("object", _type_name(part.obj))
        if type(part.form) is tuple and part.form and part.form[0] == "call":
            return ("call", _portable_call(part.form[1], given=False))
        return _portable(part.form)
    if isinstance(part, CodeType):
        return None
    if type(part) is tuple:
        return tuple(_portable(p) for p in part)
    return part


def _portable_call(layers: tuple[Any, ...], *, given: bool) -> tuple[Any, ...]:
    """The portable form of a derived call (the layers `_derive` returns).

    What the call passes counts by value: a partial's arguments, a bound method's object,
    and, for the function given itself (`given`, not wrapped: a lambda or a function written
    for this call), its defaults, its closure's values and the globals it reads. A function
    the call only *uses* (the function of a partial or of a bound method, a function among
    the values) counts by its module and qualified name: its closure and its globals are its
    own state (a cache, a log, a client), which changes as calls run; counted, it would make
    a retried or recovered call look like another call.
    """
    out: list[Any] = []
    for layer in layers:
        if layer[0] == "function":
            _, module, qualname, _code, defaults, kwdefaults, cells, globals_ = layer
            if given:
                out.append(
                    ("function", module, qualname, _portable(defaults), _portable(kwdefaults),
                     _portable(cells), _portable(globals_))
                )
            else:
                out.append(("function", module, qualname))
        else:
            given = False  # a partial or a bound method: its function is only used
            out.append(_portable(layer))
    return tuple(out)


def _portable_value(value: object, depth: int, stack: set[int]) -> Any:
    """``_portable(_value(value, depth, stack))``, without deriving what is dropped anyway.

    The fast path of `portable_fingerprint` (a replayed step checks one fingerprint per call):
    a scalar's form is built at once, and a function, partial or bound method is walked by
    `_portable_layers`, which never derives the closure and globals of a function the call
    only uses. Every other value takes the general path; the result is the same either way
    (``tests/test_calls_fingerprint.py`` checks it).
    """
    kind = type(value)
    if kind in _SCALARS:
        return (kind.__name__, value)
    if depth >= _MAX_DEPTH or id(value) in stack:
        return _portable(_value(value, depth, stack))
    if kind is FunctionType:  # a function the call uses: its name
        return ("call", (("function", value.__module__, value.__qualname__),))  # type: ignore[attr-defined]
    if _is_call(value):
        return ("call", _portable_layers(value, depth + 1, stack, given=False))
    return _portable(_value(value, depth, stack))


def _portable_layers(fn: Any, depth: int, stack: set[int], *, given: bool) -> tuple[Any, ...]:
    """``_portable_call(_derive(fn, depth, stack), given=given)``, walked directly."""
    layers: list[Any] = []
    entered: list[int] = []
    try:
        while True:
            if isinstance(fn, functools.partial):
                stack.add(id(fn))
                entered.append(id(fn))
                args = tuple(_portable_value(a, depth, stack) for a in fn.args)
                kwargs = tuple(
                    sorted((k, _portable_value(v, depth, stack)) for k, v in fn.keywords.items())
                )
                layers.append(("partial", args, kwargs))
                fn = fn.func
            elif inspect.ismethod(fn):
                layers.append(("self", _portable_value(fn.__self__, depth, stack)))
                fn = fn.__func__
            else:
                break
            given = False  # a partial or a bound method: its function is only used
        code = getattr(fn, "__code__", None)
        if not (inspect.isfunction(fn) and isinstance(code, CodeType)):
            layers.append(("callable", _portable(_value(fn, depth, stack))))
        elif not given:
            layers.append(("function", fn.__module__, fn.__qualname__))
        else:
            stack.add(id(fn))
            entered.append(id(fn))
            layers.append(
                (
                    "function",
                    fn.__module__,
                    fn.__qualname__,
                    tuple(_portable_value(v, depth, stack) for v in fn.__defaults__ or ()),
                    tuple(
                        sorted(
                            (k, _portable_value(v, depth, stack))
                            for k, v in (fn.__kwdefaults__ or {}).items()
                        )
                    ),
                    _portable_cells(fn, code, depth, stack),
                    _portable_globals(fn, code, depth, stack),
                )
            )
    finally:
        for ident in entered:
            stack.discard(ident)
    return tuple(layers)


def _portable_cells(fn: Any, code: CodeType, depth: int, stack: set[int]) -> tuple[Any, ...]:
    """``_portable(_cells(...))``, each value through `_portable_value`."""
    state = _rebound(code)
    values: list[Any] = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        if name in state:
            continue
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a variable not bound yet)
            values.append((name, "<empty>"))
            continue
        values.append((name, _portable_value(value, depth, stack)))
    return tuple(values)


def _portable_globals(fn: Any, code: CodeType, depth: int, stack: set[int]) -> tuple[Any, ...]:
    """``_portable(_globals(...))``, each value through `_portable_value`."""
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
                values.append((name, _portable_value(value, depth, stack)))
    return tuple(values)


_PLAIN_CACHE: dict[tuple[Any, ...], str] = {}
_PLAIN_CACHE_SIZE = 4096
_NOT_PLAIN: Any = object()
_SELF: Any = object()


def _plain(value: object) -> Any:
    """What determines `value`'s portable form, hashable, or `_NOT_PLAIN`.

    A str, bytes, int, bool or None by its type and value; a function, module or class by
    identity (its form is its name). Anything else (a float: ``0.0 == -0.0``, containers,
    objects) is not plain: a call that uses one is not cached.
    """
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is FunctionType or isinstance(value, type) or inspect.ismodule(value):
        return value
    return _NOT_PLAIN


@functools.lru_cache(maxsize=512)
def _plan(code: CodeType) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The closure cells (by index) and global names a function with `code` is keyed on."""
    state = _rebound(code)
    cells = tuple(i for i, name in enumerate(code.co_freevars) if name not in state)
    return cells, _global_names(code)


def _plain_key(fn: Any) -> tuple[Any, ...] | None:
    """A cache key that determines `fn`'s portable fingerprint, or None.

    Only for the calls a replayed step makes over and over: a plain function (a lambda)
    whose defaults, closure values and the globals it reads are all `_plain`, or a partial
    of a plain function with plain arguments.
    """
    values: list[Any] = []
    if type(fn) is FunctionType:
        if fn.__kwdefaults__:
            return None
        code = fn.__code__
        cells, names = _plan(code)
        closure = fn.__closure__ or ()
        namespace = fn.__globals__
        defaults = fn.__defaults__ or ()
        parts: list[Any] = [code, fn.__module__, fn.__qualname__, len(defaults)]
        values.extend(defaults)
        for i in cells:
            try:
                values.append(closure[i].cell_contents)
            except ValueError:  # an empty cell
                parts.append(i)
        for name in names:
            if name in namespace:
                values.append(namespace[name])
            else:
                parts.append(name)
    elif type(fn) is functools.partial and type(fn.func) is FunctionType:
        parts = ["partial", fn.func, len(fn.args), *sorted(fn.keywords)]
        values.extend(fn.args)
        values.extend(value for _, value in sorted(fn.keywords.items()))
    else:
        return None
    for value in values:
        plain = _SELF if value is fn else _plain(value)  # itself: a "cycle" in its form
        if plain is _NOT_PLAIN:
            return None
        parts.append(plain)
    return tuple(parts)


def portable_fingerprint(fn: Any, explicit: Any = None) -> str:
    """Return a digest of the call ``fn()`` that is stable across processes and restarts.

    What a store keeps with a durable call's key, to tell "the same call" from another one in
    a later process. It holds only the parts of the fingerprint that compare by value and
    describe the call, not the state of the code it runs:

    - each function's module and qualified name, not its code (editing a function's body and
      resuming is still the same call);
    - the values the call passes, as in `derive_fingerprint`: a `functools.partial`'s
      arguments, a bound method's ``self``, and, for a function given directly (a lambda),
      its defaults, its closure's values and the notebook globals it reads;
    - for a function the call only uses (a partial's or a method's function, a function
      among those values), nothing but its name: its own closure and globals are its state
      (a cache, a counter, a client) and change as calls run;
    - for a value that compares by identity in one process (an object with the default
      ``repr``), only its type: across processes such values cannot tell calls apart.

    With `explicit` (a `Job`'s ``fingerprint=``) the digest is that value's canonical form
    alone.

    A replayed step checks one fingerprint per recorded call, so this is kept fast: the
    functions a call only uses are never derived, and the digest of a lambda (or a partial)
    whose values are all str, bytes, int, bool, None, functions, modules or classes is cached
    under those values (by type and value; the others by identity), so that a call made
    again with the same values costs one dictionary lookup.

    Returns:
        32 hexadecimal characters.
    """
    if explicit is not None:
        form: Any = ("explicit", _portable(_value(explicit, 0, set())))
        key = None
    else:
        key = _plain_key(fn)
        if key is not None:
            cached = _PLAIN_CACHE.get(key)
            if cached is not None:
                return cached
        form = ("derived", _portable_layers(fn, 0, set(), given=True))
    text = repr(form).encode("utf-8", "backslashreplace")
    digest = hashlib.blake2b(text, digest_size=16).hexdigest()
    if key is not None:
        if len(_PLAIN_CACHE) >= _PLAIN_CACHE_SIZE:
            _PLAIN_CACHE.clear()
        _PLAIN_CACHE[key] = digest
    return digest
