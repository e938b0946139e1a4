"""The fingerprint of a call as text to store, the same in every process (issues 9, 20).

A queue with a store (`Queue(store=...)`) keeps each completed key's fingerprint beside its
output, as text (`stored_fingerprint`): a SHA-256 digest of the fingerprint's portable form,
which keeps only what means the same thing in another process. Format v2 (written since
issue 20) walks a call as memory does (`agentq.queue.fingerprint`): partial arguments and
keywords, a bound method's ``self``, and for every function, the one given and each one it
uses (a partial's, a method's, a helper among the values), its code, defaults, closure
values and the module-level values it reads; a class by its content. So
``partial(make_tool("alice"), "x")`` and ``partial(make_tool("bob"), "x")`` are two calls to
the store too. What cannot cross a process, or is a function's state, counts by less:

- a value compared by identity in memory (the default ``<… object at 0x…>`` repr, an elided
  repr, an array) becomes its type only: no object outlives its process, so across
  processes two such values of one type count as the same value;
- a module-level list, dict, set or bytearray that a function reads becomes its type only:
  such a global is nearly always shared state (a log, a cache, a registry) whose contents
  when the job completed say nothing about the call, and within one process it is the same
  object anyway. So does such a container in the closure of a function the call only uses
  (a factory-built tool's cache); in the closure of the function given (a lambda) it counts
  by value. Pass what identifies a call as an argument or give ``fingerprint=``;
- a closure variable or a global a function assigns itself (``nonlocal n; n += 1``,
  ``global client; client = ...``) is its state and is left out (the text is taken when the
  push claims the key, `agentq.queue.keytable.KeyTable.claim`, as memory's fingerprint is);
- a function's code object becomes the names and the literal constants its code uses (with
  those of the functions defined inside it), not its bytecode, which changes between Python
  versions. An edited function body that reads the same names and constants is the same
  call across processes (it is another call within one process);
- a function past the walk's bounds counts by its type (memory refuses it).

Format v1 (``_Walk(by_name=True)``, kept so that rows written before keep answering the same
call, `same_stored`) was coarser: a function the call only uses counted by its module and
qualified name alone, a class by its name, a global the function assigns still counted. An
explicit ``Job(fingerprint=…)`` is stored by the portable form of its value (so ``1`` and
``1.0`` differ across processes, while they are equal under ``==``). The text starts with
its format (``v2:``); a text of another format never equals it, so stored rows are compared
with `same_stored`, which takes the call's text in the row's format.
"""

from __future__ import annotations

import functools
import hashlib
import json
from types import CodeType
from typing import Any

from agentq.queue.fingerprint import _Walk
from agentq.queue.fingerprint_cache import StoredCache, code_info, immutable
from agentq.queue.fingerprint_value import _IDENTITY, _type_name, _Value

__all__ = ["FORMATS", "STORED_FORMAT", "same_stored", "stored_fingerprint"]

STORED_FORMAT = "v2"
"""The format `stored_fingerprint` writes; a text of one format never equals another's."""

FORMATS = ("v1", "v2")
"""The formats `same_stored` can check (rows written by older versions keep working)."""

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


def _portable_global(item: tuple[Any, ...], v2: bool) -> Any:
    """One module-level value a function reads (see `_globals`), in its portable form: a
    list, dict, set or bytearray (v2: or an instance of a subclass) by its type."""
    if len(item) == 2 and isinstance(item[1], _Value):
        obj = item[1].obj
        if isinstance(obj, _SHARED_STATE) if v2 else type(obj) in _SHARED_STATE:
            return [item[0], "shared", _type_name(obj)]
    return _portable(item, v2)


def _portable_state(item: tuple[Any, ...]) -> Any:
    """A closure or module-level value of a function the call only uses (format v2): by
    value if it cannot change in place (`immutable`), else by its type (its state)."""
    if len(item) == 2 and isinstance(item[1], _Value) and not immutable(item[1].obj):
        return [item[0], "state", _type_name(item[1].obj)]
    return _portable(item, True)


def _portable_function(part: tuple[Any, ...], v2: bool, given: bool) -> Any:
    """A function's part (see `_Walk.function`). In format v2, a function the call only uses
    (not `given`) counts a value in its closure or globals that can change in place (a
    cache, a log, a client: its state) by its type only."""
    head = [_portable(p, v2) for p in part[:6]]
    if v2 and not given:
        return [*head, [_portable_state(c) for c in part[6]],
                [_portable_state(g) for g in part[7]]]
    return [*head, [_portable(c, v2) for c in part[6]],
            [_portable_global(g, v2) for g in part[7]]]


def _portable(part: Any, v2: bool = False) -> Any:
    """A JSON form of a derived fingerprint that means the same thing in another process."""
    kind = type(part)
    if kind is str or part is None or kind is bool:
        return part
    if kind is _Value:
        if part.form is _IDENTITY:
            return ["object", _type_name(part.obj)]
        return _portable(part.form, v2)
    if kind is tuple:
        if len(part) == 8 and part[0] == "function":  # see _derive: its globals are special
            return _portable_function(part, v2, given=False)
        return [_portable(p, v2) for p in part]
    if kind is int:
        return part if part.bit_length() <= _BIG_INT_BITS else ["int", hex(part)]
    if kind is list:
        return [_portable(p, v2) for p in part]
    if kind is bytes:
        return ["bytes", part.hex()]
    if isinstance(part, CodeType):
        return _code_form(part)
    return ["object", _type_name(part)]  # not produced by _derive or _form; kept safe


def _derived_v2(fn: Any) -> Any:
    """The portable form (format v2) of the call ``fn()``: the in-memory walk's parts."""
    layers = _Walk(portable=True).derive(fn, 0)
    if len(layers) == 1 and len(layers[0]) == 8 and layers[0][0] == "function":
        return [_portable_function(layers[0], True, given=True)]  # the function given
    return [_portable(layer, True) for layer in layers]


_CACHE = StoredCache()


def stored_fingerprint(fn: Any, explicit: Any = None, version: str = STORED_FORMAT) -> str:
    """Return the fingerprint of the call ``fn()`` as text to store (see the module docstring).

    Args:
        fn: The job's callable.
        explicit: The job's explicit ``fingerprint=``, or None to derive it from `fn`.
        version: The format, `STORED_FORMAT` (``"v2"``) unless a row of an older format
            (``"v1"``) is being checked (`same_stored`).

    A function the call only uses (a partial's or a bound method's function, a function
    among the values: a global or closure value the given function reads) counts, in format
    v2, by its code, defaults, closure and globals as in memory, except what is its state: a
    closure variable or global it assigns itself, a list, dict, set or bytearray in its
    closure or among the globals it reads (by type). In format v1 it counts by its module
    and qualified name alone. A call over plain values (see
    `agentq.queue.fingerprint_cache`) is answered from a cache.

    Returns:
        The format, ``":"`` and 64 hex digits: equal texts mean the same call, in any process.

    Raises:
        ValueError: `version` is not a known format.
    """
    if version not in FORMATS:
        raise ValueError(f"unknown stored fingerprint format {version!r}; known: {FORMATS}")
    v2 = version == "v2"
    key = None
    if explicit is not None:
        walk = _Walk(portable=True) if v2 else _Walk(stored=True)
        form = ["explicit", _portable(walk.form(explicit, 0), v2)]
    else:
        key = _CACHE.key(fn, v2)
        if key is not None:
            cached = _CACHE.get(key)
            if cached is not None:
                return cached
        if v2:
            form = ["derived", _derived_v2(fn)]
        else:
            form = ["derived", _portable(_Walk(by_name=True).derive(fn, 0))]
    digest = hashlib.sha256(_canonical(form).encode("ascii")).hexdigest()
    text = f"{version}:{digest}"
    if key is not None:
        _CACHE.put(key, text)
    return text


def same_stored(stored: str | None, fn: Any, explicit: Any = None, now: str | None = None) -> bool:
    """Whether the call ``fn()`` is the one whose stored fingerprint is `stored`.

    A text of format v1 (written by an older agentq) is compared with the call's v1 text, by
    the v1 rules; one of format v2 with its v2 text; one of an unknown format is another
    call (a conflict, never another call's result).

    Args:
        stored: The stored text (``"v1:…"`` or ``"v2:…"``); None (a row stored without one)
            is the same call.
        fn: The job's callable.
        explicit: The job's explicit ``fingerprint=``, or None.
        now: The call's text in the current format, if already taken (saves taking it).

    Returns:
        True if they are the same call.
    """
    if stored is None:
        return True
    version = stored.partition(":")[0]
    if version not in FORMATS:
        return False
    if version == STORED_FORMAT and now is not None:
        return now == stored
    return stored_fingerprint(fn, explicit, version) == stored
