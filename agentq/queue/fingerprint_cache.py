"""What a code object reads, and the cache of `stored_fingerprint` for calls over plain values.

A replayed step checks one stored fingerprint per recorded call, and most calls are a lambda
or a `functools.partial` over a few str, int or bytes values: deriving the fingerprint, its
canonical JSON and its SHA-256 again for each costs tens of microseconds. `StoredCache` keys
such a call on exactly what its stored form depends on, so that the same call made again
costs one dictionary lookup:

- a plain function (not a method, no keyword-only defaults): its code object, module and
  qualified name, and the values of its defaults, of the closure cells it does not rebind
  and of the module-level names its code reads (or that a name is missing);
- a `functools.partial` of a plain function: the function and the partial's arguments.

Each value must be plain: a str, bytes, int, bool or None (keyed by type and value, so
``1`` and ``True`` differ), or a function, class or module (by identity: the stored form of
a function the call only uses is its name, of a class or module its name). Any other value
(a float, since ``0.0 == -0.0`` have two forms; a container; an object) means no key, and
the fingerprint is derived as usual. In format v2 (``key(fn, v2=True)``) a function among
the values is keyed by its own key, not its identity (it counts with what it reads), a class
means no key, the globals a function assigns are left out, and a value that is state (a
module-level list, dict, set or bytearray; in a function only used, any value `immutable`
rejects) is keyed by its type, as its stored form counts it. ``tests/test_calls_fingerprint.py``
checks that a cached digest always equals the derived one, in both formats.
"""

from __future__ import annotations

import dis
import enum
import functools
from types import CodeType, FunctionType, MethodType, ModuleType
from typing import Any

__all__ = ["StoredCache", "code_info", "immutable"]

# What a code object reads, by the identity of the code object (a dict lookup by id is much
# cheaper than hashing a code object). Entries keep their code object, so an id is never
# reused while its entry lives; the table is emptied when it reaches _CODE_LIMIT entries.
_CODE_LIMIT = 1024
_CODE_INFO: dict[int, tuple[CodeType, frozenset[str], tuple[str, ...], tuple[str, ...]]] = {}


def code_info(
    code: CodeType,
) -> tuple[CodeType, frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """`code`, the closure variables it rebinds (``nonlocal`` state), the globals it may read
    (format v1: every name its code and the code defined inside it uses), and those minus the
    globals its own code assigns or deletes (``global`` state: what it writes is not an input).
    """
    info = _CODE_INFO.get(id(code))
    if info is None or info[0] is not code:
        instructions = list(dis.get_instructions(code))
        rebound = frozenset(
            str(ins.argval)
            for ins in instructions
            if ins.opname in ("STORE_DEREF", "DELETE_DEREF")
        )
        written = {
            str(ins.argval)
            for ins in instructions
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
        }
        names: set[str] = set()
        todo = [code]
        while todo:  # the function's code and the code of the functions defined inside it
            current = todo.pop()
            names.update(current.co_names)
            todo.extend(c for c in current.co_consts if isinstance(c, CodeType))
        every = tuple(sorted(names))
        info = (code, rebound, every, tuple(n for n in every if n not in written))
        if len(_CODE_INFO) >= _CODE_LIMIT:
            _CODE_INFO.clear()
        _CODE_INFO[id(code)] = info
    return info


_SCALARS = frozenset({str, bytes, int, bool, type(None)})
_NOT_PLAIN: Any = object()
_SELF: Any = object()  # the call itself among its values: a "cycle" in its form
_EMPTY: Any = object()  # an empty closure cell
_MISSING: Any = object()  # a global name the code reads that is not bound
_SHARED_STATE = (list, dict, set, bytearray)
_ATOMS = frozenset({str, bytes, int, bool, float, complex, type(None)})
_CALLS = (FunctionType, MethodType, functools.partial)


def immutable(value: object, depth: int = 0) -> bool:
    """Whether `value` cannot change in place, so that its value means the same call in
    another process: None, bool, int, float, complex, str, bytes, enum members, classes,
    modules, functions (and partials, bound methods: walked by their own rules), and tuples
    and frozensets of these (at most 1,000 items, 4 levels deep). A function the call only
    uses counts any other value in its closure or globals by its type (format v2)."""
    kind = type(value)
    if kind in _ATOMS or isinstance(value, (*_CALLS, type, ModuleType, enum.Enum)):
        return True
    if (kind is tuple or kind is frozenset) and depth < 4 and len(value) <= 1_000:  # type: ignore[arg-type]
        return all(immutable(item, depth + 1) for item in value)  # type: ignore[attr-defined]
    return False
_V2_DEPTH = 3  # functions nested deeper among the values (format v2): no key


def _plain(value: object) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is FunctionType or isinstance(value, type | ModuleType):
        return value
    return _NOT_PLAIN


class StoredCache:
    """Stored fingerprints of calls over plain values, by a key that determines them.

    Args:
        size: Entries kept; the cache is emptied when it is full.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._digests: dict[tuple[Any, ...], str] = {}

    def key(self, fn: Any, v2: bool = False, depth: int = 0) -> tuple[Any, ...] | None:
        """Return a key that determines the stored fingerprint of ``fn()``, or None when
        `fn` is not a plain function or partial over plain values (see the module).

        With `v2` (format v2, where a function the call uses counts with what it reads), a
        function among the values is keyed by its own key (at most `_V2_DEPTH` deep), not by
        identity, and a class means no key (it counts by its content).
        """
        values: list[Any] = []
        if type(fn) is FunctionType:
            if fn.__kwdefaults__:
                return None
            code = fn.__code__
            _, rebound, names, reads = code_info(code)
            defaults = fn.__defaults__ or ()
            parts: list[Any] = [code, fn.__module__, fn.__qualname__, len(defaults)]
            values.extend(defaults)
            for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
                if name not in rebound:
                    try:
                        values.append(cell.cell_contents)
                    except ValueError:
                        values.append(_EMPTY)
            # from here on, a list, dict, set or bytearray is state, counted by its type
            # (`fingerprint_stored`): a global, or in the closure of a function only used
            shared = len(defaults) if depth else len(values)
            namespace = fn.__globals__
            values.extend(namespace.get(name, _MISSING) for name in (reads if v2 else names))
        elif type(fn) is functools.partial and type(fn.func) is FunctionType:
            keywords = sorted(fn.keywords.items())
            func: Any = fn.func
            if v2:
                func = self.key(func, True, depth + 1)
                if func is None:
                    return None
            parts = ["partial", func, len(fn.args), *[name for name, _ in keywords]]
            values.extend(fn.args)
            values.extend(value for _, value in keywords)
            shared = len(values)
        else:
            return None
        for i, value in enumerate(values):
            plain: Any
            if value is fn:
                plain = _SELF
            elif value is _EMPTY or value is _MISSING:
                plain = value
            elif v2 and i >= shared and not depth and isinstance(value, _SHARED_STATE):
                plain = ("shared", type(value))  # a global of the function given
            elif v2 and i >= shared and depth and not immutable(value):
                plain = ("state", type(value))  # a function only used: its state
            elif v2 and type(value) is FunctionType:
                if depth >= _V2_DEPTH:
                    return None
                plain = self.key(value, True, depth + 1)
                if plain is None:
                    return None
                plain = ("fn", plain)
            elif v2 and isinstance(value, type):
                return None
            else:
                plain = _plain(value)
                if plain is _NOT_PLAIN:
                    return None
            parts.append(plain)
        return tuple(parts) if not v2 or depth else ("v2", *parts)

    def get(self, key: tuple[Any, ...]) -> str | None:
        """The stored fingerprint cached under `key`, or None."""
        return self._digests.get(key)

    def put(self, key: tuple[Any, ...], text: str) -> None:
        """Cache `text` under `key` (emptying the cache first when it is full)."""
        if len(self._digests) >= self._size:
            self._digests.clear()
        self._digests[key] = text
