"""One value of a derived fingerprint, and how two are compared (`agentq.queue.fingerprint`).

A `_Value` pairs an object a call uses with its canonical form: equal to another if it is the
same object (the identity rule; not for a function, a partial or a bound method, compared by
form), if both forms are equal, or, for a closure variable a function rebinds itself (its
state, issue 20), if both belong to the same live function object.

The fingerprint protocol (`FINGERPRINT_HOOK`): an object whose class defines
``__agentq_fingerprint__(self)`` is compared by what that method returns (walked like any
value), not by its ``repr`` nor its identity: an object that changes between two pushes of
one call but is not an input of it (a workflow step's context, whose attempt number and
workflow id differ in a retry or a fork) returns a constant.
"""

from __future__ import annotations

import functools
import weakref
from types import FunctionType, MethodType
from typing import Any

_IDENTITY: Any = object()
_REFUSE: Any = object()  # a function past the bounds: equal to nothing, not even itself


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

    __slots__ = ("_held", "_weak", "form", "owner")

    def __init__(self, obj: object, form: Any, owner: Any = None) -> None:
        self._weak = type(obj).__weakrefoffset__ != 0
        self._held: Any = weakref.ref(obj) if self._weak else obj
        self.form = form
        # A closure variable the function rebinds itself (its state): a weak reference to
        # that function. Two such values of one live function object are equal whatever
        # they hold; of two function objects, they compare as any value.
        self.owner = owner

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
        owner = self.owner
        if owner is not None and other.owner is not None:
            fn = owner()
            if fn is not None and fn is other.owner():
                return True
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


FINGERPRINT_HOOK = "__agentq_fingerprint__"
"""The method a class defines to say what its instances are, as an input of a call."""


def stand_in(value: object) -> tuple[bool, Any]:
    """``(True, what value stands for)`` if its class defines `FINGERPRINT_HOOK`, else
    ``(False, None)``; a hook that raises stands for the object itself (by identity)."""
    hook = getattr(type(value), FINGERPRINT_HOOK, None)
    if hook is None or isinstance(value, type):
        return False, None
    try:
        return True, hook(value)
    except Exception:  # a broken hook must not break a push
        return True, _IDENTITY


def _is_call(form: Any) -> bool:
    """Whether `form` is a function's, a partial's or a bound method's (compared by form)."""
    return type(form) is tuple and form[0] == "call"


def _callable_kind(value: object) -> bool:
    kind = type(value)
    return kind is FunctionType or kind is MethodType or isinstance(value, functools.partial)


def _type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
