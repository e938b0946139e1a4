"""Copies of what `MemoryStore` hands out, so that callers never share its mutable state.

`MemoryStore` keeps rows, events and outputs as Python objects; a caller that mutated an
output dict it was given would change the store. `copy.deepcopy` prevents that, but walks
every immutable value too and costs more than the rest of a verb (a third of the BFCL replay
on the MemoryStore). `detached` copies only what can change:

- str, int, float, bool, None, bytes, datetimes and enum members are immutable: shared;
- dicts and lists are copied, their items detached;
- tuples and frozen dataclasses (the store's rows, `Event`, `ErrorInfo`, outcomes) are
  shared when every item or field is shared, else rebuilt around the detached ones;
- anything else goes to `copy.deepcopy`, as before.

JSON values never hold one object twice or a cycle, so the aliasing `copy.deepcopy` keeps
does not arise.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
from typing import Any, TypeVar, cast

__all__ = ["detached"]

T = TypeVar("T")

_SHARED = frozenset({str, int, float, bool, type(None), bytes, datetime.datetime})
_FIELDS: dict[type, tuple[str, ...] | None] = {}  # per class: frozen dataclass fields, or None


def _frozen_fields(kind: type) -> tuple[str, ...] | None:
    try:
        return _FIELDS[kind]
    except KeyError:
        params = getattr(kind, "__dataclass_params__", None)
        names = (
            tuple(f.name for f in dataclasses.fields(kind))
            if params is not None and params.frozen
            else None
        )
        _FIELDS[kind] = names
        return names


def detached(value: T) -> T:
    """A copy of `value` that shares nothing mutable with it (see the module)."""
    return cast(T, _detached(value))


def _detached(value: Any) -> Any:
    kind = type(value)
    if kind in _SHARED:
        return value
    if kind is dict:
        return {key: _detached(item) for key, item in value.items()}
    if kind is list:
        return [_detached(item) for item in value]
    if kind is tuple:
        items = [_detached(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return tuple(items)
    if isinstance(value, enum.Enum):
        return value
    names = _frozen_fields(kind)
    if names is None:
        return copy.deepcopy(value)
    old = [getattr(value, name) for name in names]
    new = [_detached(item) for item in old]
    if all(a is b for a, b in zip(new, old, strict=True)):
        return value
    made = object.__new__(kind)
    for name, item in zip(names, new, strict=True):
        object.__setattr__(made, name, item)
    return made
