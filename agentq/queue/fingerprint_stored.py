"""The fingerprint of a call as text to store, the same in every process (issue 9).

A queue with a store (`Queue(store=...)`) keeps each completed key's fingerprint beside its
output, as text (`stored_fingerprint`): a SHA-256 digest of the fingerprint's portable form,
which keeps only what means the same thing in another process. Its walk (``stored``) keeps
the format-v1 rules, coarser than the in-memory ones: a class by its name, a rebound
closure variable left out, a long repr whole, a function past the bounds by its type:

- every value that compares by value, exactly as in memory (type included);
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

How a call is walked in memory is told in `agentq.queue.fingerprint`; this walk reuses it
with the stored rules (``_Walk(stored=True)``, ``_Walk(by_name=True)``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from types import CodeType
from typing import Any

from agentq.queue.fingerprint import _IDENTITY, _type_name, _Value, _Walk
from agentq.queue.fingerprint_cache import StoredCache, code_info

__all__ = ["STORED_FORMAT", "stored_fingerprint"]

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
