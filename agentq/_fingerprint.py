"""What makes two pushes of one idempotency key "the same call" (field report BH-25).

A key pushed again with a different call must not silently get the first call's result. The
queue compares fingerprints only when a key is pushed while it is already known, and takes a
fast path when both pushes carry the same callable object: deriving one costs microseconds
and happens only then.

A derived fingerprint tells apart what identifies a call (the function and its arguments) and
ignores what is state (counters, caches, clients), unwrapping the callable layer by layer:

- `functools.partial`: the ``repr`` of its positional and keyword arguments, then its func;
- a bound method: the class of its ``self`` (not its contents), then the function;
- a Python function: module, qualified name, code object, the ``repr`` of its defaults, and
  for each value its closure captured: the ``repr`` of a plain value (None, bool, int,
  float, complex, str, bytes, an Enum member, or a tuple or frozenset of those), or only the
  type of any other object (a list, a client…). A variable the function rebinds itself
  (``nonlocal``) is state and is left out;
- any other callable: its class, plus its ``repr`` when the class defines one (a dataclass).

So ``partial(send_mail, "alice")`` and ``partial(send_mail, "bob")`` differ, as do two
lambdas with different literals, while a job that bumps a captured counter stays "the same
call". Give ``Job(fingerprint=…)`` explicitly when this is not what you want.
"""

from __future__ import annotations

import dis
import enum
import functools
import inspect
from types import CodeType
from typing import Any

__all__ = ["derive_fingerprint"]

_PLAIN = (type(None), bool, int, float, complex, str, bytes, enum.Enum)


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not break a push
        return f"<unrepresentable {_type_name(value)}>"


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _is_plain(value: object, depth: int = 0) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, tuple | frozenset) and depth < 4:
        return all(_is_plain(item, depth + 1) for item in value)
    return False


@functools.lru_cache(maxsize=512)
def _rebound(code: CodeType) -> frozenset[str]:
    """Names of closure variables that `code` assigns or deletes (``nonlocal`` state)."""
    return frozenset(
        str(ins.argval)
        for ins in dis.get_instructions(code)
        if ins.opname in ("STORE_DEREF", "DELETE_DEREF")
    )


def _cells(fn: Any, code: CodeType) -> tuple[tuple[str, str], ...]:
    closure = getattr(fn, "__closure__", None) or ()
    state = _rebound(code)
    values = []
    for name, cell in zip(code.co_freevars, closure, strict=False):
        if name in state:
            continue
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a variable not bound yet)
            values.append((name, "<empty>"))
            continue
        values.append((name, _safe_repr(value) if _is_plain(value) else _type_name(value)))
    return tuple(values)


def derive_fingerprint(fn: Any) -> tuple[Any, ...]:
    """Return the fingerprint of the call ``fn()`` (see the module docstring)."""
    parts: list[Any] = []
    while True:
        if isinstance(fn, functools.partial):
            kwargs = sorted((k, _safe_repr(v)) for k, v in fn.keywords.items())
            parts.append(("partial", tuple(_safe_repr(a) for a in fn.args), tuple(kwargs)))
            fn = fn.func
        elif inspect.ismethod(fn):
            parts.append(("self", _type_name(fn.__self__)))
            fn = fn.__func__
        else:
            break
    code = getattr(fn, "__code__", None)
    if inspect.isfunction(fn) and isinstance(code, CodeType):
        parts.append(
            (
                "function",
                fn.__module__,
                fn.__qualname__,
                code,
                _safe_repr(fn.__defaults__),
                _safe_repr(fn.__kwdefaults__),
                _cells(fn, code),
            )
        )
    else:
        own_repr = not inspect.isbuiltin(fn) and any(
            "__repr__" in vars(klass) for klass in type(fn).__mro__[:-1]
        )
        parts.append(("callable", _type_name(fn), _safe_repr(fn) if own_repr else ""))
    return tuple(parts)
