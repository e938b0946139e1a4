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
  closure captured (a variable it rebinds with ``nonlocal`` too: it may be the call's input),
  and each module-level value its code reads (a notebook cell's global ``user``);
- any other callable object: the object itself, as a value.

Each value is compared by a canonical form:

- JSON-like values (None, bool, int, float, str, and lists, tuples and dicts of them; also
  bytes, complex, enum members, sets and frozensets) by value, type included (``1``,
  ``1.0`` and ``True`` differ), with dict keys and set items in a canonical order;
- functions, partials and bound methods by their own fingerprint only, never by identity
  (the same helper reading another global now is another call); one past the bounds below
  is refused (`_REFUSE`: equal to nothing, so a conflict, never another call's result);
- a class by its module, qualified name, bases' names and content (plain attributes by
  value, the code of its methods, static and class methods and property accessors), so a
  class redefined with another body is another value; a module by its name;
- any other object by its ``repr`` when its class gives a meaningful one (a dataclass, a
  pydantic model; one over `MAX_REPR` characters as its digest), otherwise (the default
  ``<… object at 0x…>``, a ``repr`` that elides contents with ``...``, or a ``repr`` that
  fails) by identity: only the same object
  is the same value. Arrays and data frames (a class with ``__array__`` or
  ``__dataframe__``: numpy, pandas, polars, arrow) compare by identity without their
  ``repr`` being built, since it elides their contents and costs milliseconds.

And the same object (not a function) is always the same value, however its contents
changed in between (the identity rule, also for a repr-compared object): a
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

A queue with a store (`Queue(store=...)`) keeps each completed key's fingerprint beside its
output, as text (`stored_fingerprint`): a SHA-256 digest of the fingerprint's portable form,
which keeps only what means the same thing in another process. Its walk (``stored``) keeps
the format-v1 rules, coarser than the in-memory ones: a class by its name, a rebound
closure variable left out, a long repr whole, a function past the bounds by its type:

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
  call across processes (it is another call within one process);
- a function the call only *uses* (the function a partial or a bound method wraps, a
  function among the values: the tool a lambda calls) becomes its module and qualified name
  alone, not its code, closure or globals: those are the tool's own state (a cache, a log of
  what it sent), which changes as calls run and must not make a retried or recovered call
  look like another one. Only the function given itself (a lambda) counts with its values.

So a key completed with ``partial(send_mail, "alice")`` before a restart answers a push of
``partial(send_mail, "alice")`` after it, and refuses ``partial(send_mail, "bob")``. An
explicit ``Job(fingerprint=…)`` is stored by the portable form of its value (so ``1`` and
``1.0`` differ across processes, while they are equal under ``==``). The text starts with a
format version (``v1:``): a later format will not match it.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import re
import weakref
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any

from agentq.queue.fingerprint_cache import StoredCache, code_info

__all__ = ["MAX_ITEMS", "MAX_REPR", "MAX_VALUES", "derive_fingerprint", "stored_fingerprint"]

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
_IDENTITY: Any = object()
_REFUSE: Any = object()  # a function past the bounds: equal to nothing, not even itself
_CLASS_SKIP = frozenset({"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"})


class _Value:
    """One value a call uses: equal to another if it is the same object (except a function,
    a partial or a bound method: those are equal only by their forms, which hold what they
    read now), or if both have a canonical form and the forms are equal. A function past the
    derivation's bounds (`_REFUSE`) is equal to nothing: a conflict, never another call's
    result.

    An object that can be weakly referenced (an instance of a class, a function) is held
    weakly: a finished key keeps its fingerprint, and must not keep alive what its call used
    (a client, an agent's deps). Once such an object is gone, no later push can pass the same
    object, so only its canonical form can still be equal.
    """

    __slots__ = ("_held", "_weak", "form")

    def __init__(self, obj: object, form: Any) -> None:
        self._weak = type(obj).__weakrefoffset__ != 0
        self._held: Any = weakref.ref(obj) if self._weak else obj
        self.form = form

    @property
    def obj(self) -> Any:
        """The object itself, or None once an object held weakly is gone."""
        return self._held() if self._weak else self._held

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Value):
            return NotImplemented
        form = self.form
        theirs = other.form
        if form is _REFUSE or theirs is _REFUSE:
            return False
        mine = self.obj
        if mine is not None and mine is other.obj and not _is_call(form):
            return True
        return form is not _IDENTITY and theirs is not _IDENTITY and form == theirs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.form is _IDENTITY:
            obj = self.obj
            if obj is None:
                return "<an object that no longer exists>"
            return f"<the object {_type_name(obj)} at {id(obj):#x}>"
        return repr(self.form)


def _is_call(form: Any) -> bool:
    """Whether `form` is a function's, a partial's or a bound method's (compared by form)."""
    return type(form) is tuple and form[0] == "call"


def _callable_kind(value: object) -> bool:
    kind = type(value)
    return kind is FunctionType or kind is MethodType or isinstance(value, functools.partial)


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


class _Walk:
    """One derivation: the values being entered (to tell a cycle) and the budget left."""

    __slots__ = ("budget", "by_name", "stack", "stored")

    def __init__(self, *, by_name: bool = False, stored: bool = False) -> None:
        self.stack: set[int] = set()
        self.budget = MAX_VALUES
        self.by_name = by_name  # a function the call only uses: its module and name only
        # the stored form (format v1, kept as it was): a class by its name, a rebound
        # closure variable left out, a function past the bounds by identity
        self.stored = stored or by_name

    def past_bounds(self, value: object) -> Any:
        """The form of a value past the bounds: refused if a callable (in memory)."""
        return _REFUSE if not self.stored and _callable_kind(value) else _IDENTITY

    def value(self, value: object, depth: int) -> Any:
        """The comparable form of one value: itself for str and None, else a `_Value`."""
        if type(value) is str or value is None:
            return value  # never equal to a _Value, nor to a value of another type
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
        if isinstance(value, type) and not self.stored:
            return self.klass(value, depth + 1)
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
            if type(fn) is FunctionType and self.by_name and (parts or depth > 0):
                # only used (a partial's or a method's function, one among the values):
                # its closure and globals are its own state, which changes as calls run
                parts.append(("function", fn.__module__, fn.__qualname__))
            elif type(fn) is FunctionType:
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
        _, rebound, names = code_info(code)
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
            if self.stored and name in rebound:
                continue  # stored form (v1): a variable the function rebinds is left out
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
                if isinstance(value, ModuleType) or (self.stored and isinstance(value, type)):
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
            out.add(_canonical(_portable(_Walk(stored=True).form(const, 0))))


@functools.lru_cache(maxsize=512)
def _code_form(code: CodeType) -> tuple[Any, ...]:
    """The portable form of a code object: the names and literal constants it uses."""
    constants: set[str] = set()
    _constants(code, constants)
    return ("code", code_info(code)[2], tuple(sorted(constants)))


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


_CACHE = StoredCache()


def stored_fingerprint(fn: Any, explicit: Any = None) -> str:
    """Return the fingerprint of the call ``fn()`` as text to store (see the module docstring).

    Args:
        fn: The job's callable.
        explicit: The job's explicit ``fingerprint=``, or None to derive it from `fn`.

    A function the call only uses (a partial's or a bound method's function, a function
    among the values: a global or closure value the given function reads) counts by its
    module and qualified name alone: its own closure and globals are its state (a cache, a
    log, a client), which changes as calls run, and must not make a retried or recovered
    durable call look like another call. A call over plain values (see
    `agentq.queue.fingerprint_cache`) is answered from a cache.

    Returns:
        ``"v1:"`` and 64 hex digits: equal texts mean the same call, in any process.
    """
    key = None
    if explicit is not None:
        form = ["explicit", _portable(_Walk(stored=True).form(explicit, 0))]
    else:
        key = _CACHE.key(fn)
        if key is not None:
            cached = _CACHE.get(key)
            if cached is not None:
                return cached
        form = ["derived", _portable(_Walk(by_name=True).derive(fn, 0))]
    digest = hashlib.sha256(_canonical(form).encode("ascii")).hexdigest()
    text = f"{STORED_FORMAT}:{digest}"
    if key is not None:
        _CACHE.put(key, text)
    return text
