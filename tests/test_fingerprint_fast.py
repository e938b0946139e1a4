"""The fast fingerprint compares exactly like the derived one, and falls back when it must."""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import types
from collections.abc import Callable
from typing import Any

import pytest

from agentq.errors import KeyConflictError
from agentq.queue import Job, Queue
from agentq.queue.fingerprint import derive_fingerprint
from agentq.queue.fingerprint_fast import (
    MAX_DEPTH,
    Shared,
    call_fingerprint,
    fast_fingerprint,
)


async def send(*args: Any, **kwargs: Any) -> Any:
    return args, kwargs


async def other(*args: Any, **kwargs: Any) -> Any:
    return args


def fact(n: int) -> int:
    return 1 if n <= 1 else n * fact(n - 1)  # reads itself: a cycle


class Color(enum.IntEnum):
    RED = 1


class Part(functools.partial):  # type: ignore[type-arg]
    """A partial subclass: derived like a partial."""


def over(value: Any) -> Callable[[], Any]:
    return lambda: send(value)


def over_default(value: Any) -> Callable[[], Any]:
    return lambda v=value: send(v)  # type: ignore[misc]


def over_kwdefault(value: Any) -> Callable[..., Any]:
    def fn(*, v: Any = value) -> Any:
        return send(v)

    return fn


def empty_cell() -> Callable[[], Any]:
    def fn() -> Any:
        return send(later)  # noqa: F821 - read once deleted: an empty cell

    fn_ = fn
    later = "<empty>"
    del later
    return fn_


def cell_holding_empty_text() -> Callable[[], Any]:
    later = "<empty>"
    return lambda: send(later)


def nested(depth: int) -> Callable[[], Any]:
    fn: Callable[..., Any] = send
    for _ in range(depth):
        fn = (lambda inner: lambda: inner())(fn)
    return fn


def corpus() -> list[Callable[..., Any]]:
    """Calls over plain values and calls that are not, with near twins of each other."""
    return [
        functools.partial(send, "a"),
        functools.partial(send, "a"),
        functools.partial(send, "b"),
        functools.partial(send, 1),
        functools.partial(send, True),
        functools.partial(send, 1.0),
        functools.partial(send, b"a"),
        functools.partial(send, None),
        functools.partial(send, Color.RED),
        functools.partial(send, x="a", y=2),
        functools.partial(send, y=2, x="a"),
        functools.partial(other, "a"),
        functools.partial(functools.partial(send, "a"), "b"),
        Part(send, "a"),
        over("a"),
        over("a"),
        over("b"),
        over(1),
        over(True),
        over([1]),
        over(send),
        over(other),
        over(fact),
        over_default("a"),
        over_default(2),
        over_kwdefault("a"),
        over_kwdefault(2),
        empty_cell(),
        cell_holding_empty_text(),
        lambda: send(asyncio),
        lambda: send(types.SimpleNamespace),
        lambda: fact(3),
        nested(1),
        nested(MAX_DEPTH - 1),
        nested(MAX_DEPTH + 2),
        fact,
        send,
        functools.partial(fact, 3),
        Color,
    ]


def test_fast_fingerprints_are_equal_exactly_when_derived_ones_are() -> None:
    calls = corpus()
    fast = [fast_fingerprint(fn) for fn in calls]
    derived = [derive_fingerprint(fn) for fn in calls]
    assert sum(f is not None for f in fast) >= 25  # the common forms take the fast path
    shared = Shared()
    for i, j in itertools.product(range(len(calls)), repeat=2):
        same = derived[i] == derived[j]
        mine = call_fingerprint(calls[i]) == call_fingerprint(calls[j])
        assert mine == same, (i, j, calls[i], calls[j])
        kept = call_fingerprint(calls[i], shared) == call_fingerprint(calls[j], shared)
        assert kept == same, (i, j, calls[i], calls[j])


def test_equal_parts_are_kept_once_per_shared_table() -> None:
    shared = Shared()
    first = fast_fingerprint(over_default(1), shared)
    second = fast_fingerprint(over_default(2), shared)
    assert first is not None and second is not None
    assert first != second
    assert first[1][7] is second[1][7]  # the module-level names read: one tuple


def test_the_forms_that_have_no_fast_fingerprint() -> None:
    class Client:
        async def call(self) -> None:
            return None

    assert fast_fingerprint(functools.partial(send, 1.5)) is None  # a float
    assert fast_fingerprint(functools.partial(send, [1])) is None  # a container
    assert fast_fingerprint(Client().call) is None  # a bound method
    assert fast_fingerprint(nested(MAX_DEPTH + 2)) is None  # too deep
    assert fast_fingerprint(functools.partial(send, *range(100))) is None  # too many values
    assert fast_fingerprint(print) is None  # no code object


def test_a_fast_fingerprint_never_equals_an_explicit_or_derived_one() -> None:
    fn = functools.partial(send, "a")
    fast = fast_fingerprint(fn)
    assert fast is not None
    assert fast != derive_fingerprint(fn)
    assert fast != tuple(fast[1:])


USER = "alice"


def mail() -> Callable[[], Any]:
    return lambda: send(USER)


async def test_a_lambda_over_a_rebound_global_conflicts_on_the_fast_path() -> None:
    global USER
    async with Queue() as queue:
        await queue.push_and_wait(Job("mail", mail()))
        await queue.push_and_wait(Job("mail", mail()))  # same call: cached
        USER = "bob"
        try:
            with pytest.raises(KeyConflictError):
                await queue.push_and_wait(Job("mail", mail()))
        finally:
            USER = "alice"


async def test_the_fast_and_the_derived_path_meet_on_one_key() -> None:
    async with Queue() as queue:
        await queue.push_and_wait(Job("k", functools.partial(send, "a")))  # fast
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("k", functools.partial(send, 1.5)))  # derived
        await queue.push_and_wait(Job("f", functools.partial(send, 1.5)))  # derived
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("f", functools.partial(send, "a")))  # fast
        assert await queue.push_and_wait(Job("f", functools.partial(send, 1.5))) == ((1.5,), {})
