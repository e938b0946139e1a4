"""`quick_init`: a cheaper ``__init__`` for the store's frozen, slotted row classes.

Every store verb builds a few rows (`WorkflowRow`, `StepRow`, `CallRow`, the rules' `Rows`
and `Draft`), each a ``@dataclass(frozen=True, slots=True)`` of up to 21 fields. The
``__init__`` that ``dataclasses`` writes for a frozen class sets each field with
``object.__setattr__(self, name, value)`` (a global and an attribute looked up, then the
type's attribute lookup again, per field); `quick_init` replaces it by one that calls each
slot's own descriptor (``member_descriptor.__set__``), about half the cost. The class stays
what ``dataclasses`` made it: frozen (assignment raises ``FrozenInstanceError``), compared,
hashed, printed and `dataclasses.replace`-d as before, with the same signature.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["quick_init"]

T = TypeVar("T")


class _Factory:
    """The default of a field with a ``default_factory`` (the factory makes its value);
    shown as ``dataclasses`` shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_MISSING = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """Give a ``@dataclass(frozen=True, slots=True)`` class the cheaper ``__init__``.

    Apply it above the ``@dataclass`` decorator. The new ``__init__`` takes the same
    parameters, in the same order, with the same defaults.

    Args:
        cls: The dataclass; frozen, with slots, every field in ``__init__``, no
            ``__post_init__``.

    Returns:
        `cls` itself.

    Raises:
        TypeError: `cls` is not such a dataclass.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init needs a frozen dataclass with slots, got {cls!r}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init cannot keep the __post_init__ of {cls!r}")
    env: dict[str, Any] = {"_missing": _MISSING}
    args, body = [], []
    for i, f in enumerate(dataclasses.fields(cls)):  # type: ignore[arg-type]
        if not f.init:
            raise TypeError(f"quick_init cannot build field {f.name!r} of {cls!r}")
        value = f.name
        if f.default_factory is not dataclasses.MISSING:  # a new value for each row
            env[f"_f{i}"] = f.default_factory
            args.append(f"{f.name}=_missing")
            value = f"_f{i}() if {f.name} is _missing else {f.name}"
        elif f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            env[f"_d{i}"] = f.default
            args.append(f"{f.name}=_d{i}")
        env[f"_s{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        body.append(f"    _s{i}(self, {value})\n")
    source = f"def __init__(self, {', '.join(args)}):\n{''.join(body) or '    pass'}\n"
    exec(source, env)  # as dataclasses itself writes __init__: one call per field, no loop
    init = env["__init__"]
    init.__annotations__ = {f.name: f.type for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    init.__annotations__["return"] = None
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
