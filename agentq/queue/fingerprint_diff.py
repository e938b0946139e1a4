"""Where two fingerprints of one key differ, named for a `KeyConflictError` (finding 9).

`difference` walks two fingerprints (fast or derived, `agentq.queue.fingerprint_fast` and
`agentq.queue.fingerprint`) side by side and names the first part that differs, with both
values shortened: ``global user: 'alice' != 'bob'``, ``argument 1: 'a' != 'b'``,
``closure variable query of make_tool.<locals>.call: ' cats ' != ' dogs '``. Parts are named
after the layer they belong to (a partial's arguments, a bound method's ``self``, a
function's defaults, closure variables and globals read, a class's attributes); a part
reached through a function among the values is prefixed with that function's name.
"""

from __future__ import annotations

from types import CodeType
from typing import Any

from agentq.queue.fingerprint_parts import MARK as _MARK
from agentq.queue.fingerprint_parts import Fn as _Fn
from agentq.queue.fingerprint_value import _IDENTITY, _Value

__all__ = ["difference"]

_LIMIT = 40  # characters of each value shown


def _show(value: Any) -> str:
    if type(value) is _Value:
        obj = value.obj
        if value.form is _IDENTITY or (obj is not None and not isinstance(value.form, tuple)):
            return _cut(repr(value))
        if obj is not None and not (type(value.form) is tuple and value.form[0] == "call"):
            return _cut(repr(obj))
        return _cut(repr(value.form))
    if type(value) is tuple and len(value) == 2 and isinstance(value[0], type):
        return _cut(repr(value[1]))  # a fast form's tagged bool or bytes
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= _LIMIT else text[: _LIMIT - 1] + "…"


def _unwrap(value: Any) -> Any:
    if type(value) is _Value:
        return value.form
    if type(value) is _Fn:
        return value.parts
    return value


def _named(entries: Any) -> dict[str, Any]:
    return {e[0]: e[1:] if len(e) > 2 else e[1] for e in entries if type(e) is tuple and e}


def _entries(a: Any, b: Any, label: str) -> str | None:
    mine, theirs = _named(a), _named(b)
    for name in list(mine) + [n for n in theirs if n not in mine]:
        if name not in mine or name not in theirs:
            was = _show(mine[name]) if name in mine else "(none)"
            now = _show(theirs[name]) if name in theirs else "(none)"
            return f"{label} {name}: {was} != {now}"
        found = _walk(mine[name], theirs[name], f"{label} {name}")
        if found is not None:
            return found
    return None


def _function(a: tuple[Any, ...], b: tuple[Any, ...], where: str) -> str | None:
    name = f"{a[1]}.{a[2]}"
    if (a[1], a[2]) != (b[1], b[2]):
        return f"{where}function: {name} != {b[1]}.{b[2]}"
    if len(a) < 8 or len(b) < 8:
        return None
    if a[3] != b[3]:
        return f"{where}code of {name} (another body, or defined at another line)"
    checks = (
        (a[4], b[4], "default"),
        (a[5], b[5], "keyword default"),
        (a[6], b[6], "closure variable"),
        (a[7], b[7], "global"),
    )
    for mine, theirs, label in checks:
        if label == "default":
            found = _positions(mine, theirs, f"{where}default")
        else:
            found = _entries(mine, theirs, f"{where}{label}")
        if found is not None:
            return found
    return None


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # a value whose == fails: not the same
        return False


def _then(where: str, label: str) -> str:
    return f"{where} → {label}" if where else label


def _positions(a: tuple[Any, ...], b: tuple[Any, ...], label: str) -> str | None:
    """The first of positional values (arguments, defaults) that differs, by its number."""
    if len(a) != len(b):
        return f"{label}s: {_show(a)} != {_show(b)}"
    for i, (p, q) in enumerate(zip(a, b, strict=True)):
        found = _walk(p, q, f"{label} {i + 1}")
        if found is not None:
            return found
    return None


def _walk(a: Any, b: Any, where: str) -> str | None:
    if a is b:
        return None
    shown = f"{where or 'value'}: {_show(a)} != {_show(b)}"
    x, y = _unwrap(a), _unwrap(b)
    if type(x) is not tuple or type(y) is not tuple or type(a) is not type(b):
        return None if _same(a, b) else shown
    if x and y and type(x[0]) is tuple and type(y[0]) is tuple and len(x) == len(y):
        for p, q in zip(x, y, strict=True):  # the layers of a call
            found = _walk(p, q, where)
            if found is not None:
                return found
        return None if _same(a, b) else shown
    if not x or not y or type(x[0]) is not str or x[0] != y[0]:
        return None if _same(a, b) else shown
    kind = x[0]
    if kind == "call" and len(x) == len(y) == 2:
        return _walk(x[1], y[1], where)
    if kind == "function" and len(x) >= 4 and isinstance(x[3], CodeType):
        return _function(x, y, f"{where} → " if where else "")
    if kind == "partial" and len(x) == len(y) == 3:
        found = _positions(x[1], y[1], _then(where, "argument"))
        return found if found is not None else _entries(x[2], y[2], _then(where, "argument"))
    if kind == "class" and len(x) == len(y) == 5:
        if x[1:4] != y[1:4]:
            return shown
        return _entries(x[4], y[4], _then(where, f"{x[2]}'s attribute"))
    if len(x) != len(y):
        return shown
    label = _then(where, kind) if kind in ("self", "callable") else where
    for p, q in zip(x[1:], y[1:], strict=True):
        found = _walk(p, q, label)
        if found is not None:
            return found
    return None


def difference(was: Any, now: Any) -> str | None:
    """Name the first part where fingerprint `now` differs from `was`, for a message.

    Args:
        was: The fingerprint the key was claimed with (fast, derived or explicit).
        now: The fingerprint of the push refused.

    Returns:
        A short text, for example ``"global user: 'alice' != 'bob'"`` (each value cut to
        40 characters), or None when no single part can be named (the two are of other
        kinds: one explicit, one derived).
    """
    if type(was) is tuple and was and was[0] is _MARK:
        was = was[1:]
    if type(now) is tuple and now and now[0] is _MARK:
        now = now[1:]
    try:
        return _walk(was, now, "")
    except Exception:  # a message must never fail the push's error
        return None
