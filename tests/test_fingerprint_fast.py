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
    _MARK,
    MAX_DEPTH,
    Shared,
    _Fast,
    _plain_function,
    call_fingerprint,
    fast_fingerprint,
)
from agentq.queue.fingerprint_match import matches_fast


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


def test_matching_a_kept_fast_fingerprint_agrees_with_taking_it() -> None:
    calls = [*corpus(), over_default(send), over_default(other), over("<empty>")]
    derived = [derive_fingerprint(fn) for fn in calls]
    shared = Shared()
    kept = [call_fingerprint(fn, shared) for fn in calls]
    decided = 0
    for i, j in itertools.product(range(len(calls)), repeat=2):
        if matches_fast(calls[j], kept[i]):
            decided += 1
            assert derived[i] == derived[j], (i, j, calls[i], calls[j])
        elif kept[i] == call_fingerprint(calls[j], shared) and fast_fingerprint(calls[j]):
            # Equal fast fingerprints the matcher leaves undecided: only the forms it does
            # not cover (a module or class read, bool and bytes values, keywords, nesting).
            assert derived[i] == derived[j]
    assert decided >= 20  # the common forms are decided without taking the fingerprint


def test_the_matcher_sees_a_rebound_global_and_a_new_default() -> None:
    global USER
    fn = mail()
    kept = call_fingerprint(fn)
    assert matches_fast(mail(), kept)
    USER = "bob"
    try:
        assert not matches_fast(mail(), kept)
    finally:
        USER = "alice"
    assert matches_fast(over_default("a"), call_fingerprint(over_default("a")))
    assert not matches_fast(over_default("b"), call_fingerprint(over_default("a")))
    assert not matches_fast(over_default(1), call_fingerprint(over_default(True)))
    one, true = functools.partial(send, 1), functools.partial(send, True)
    assert not matches_fast(true, call_fingerprint(one))
    assert not matches_fast(one, call_fingerprint(true))
    assert not matches_fast(functools.partial(send, (bool, True)), call_fingerprint(true))


def test_the_flat_pass_of_a_plain_function_equals_the_general_pass() -> None:
    calls = [
        *corpus(), over_default(send), over("<empty>"), lambda: send(USER), lambda n=3: fact(n),
        lambda: send(asyncio), mail(), over(None), over_default(None),
    ]
    for shared in (None, Shared()):
        flat = 0
        for fn in calls:
            if not isinstance(fn, types.FunctionType):
                continue
            general = _Fast(shared).call(fn, 0)
            taken = fast_fingerprint(fn, shared)
            assert taken == (None if general is None else (_MARK, *general)), fn
            flat += _plain_function(fn, shared) is not None
        assert flat >= 8  # the common lambdas take the flat pass


async def reads_nothing() -> None:
    return None


def test_the_kept_reads_of_a_code_are_used_only_while_taking_them_again_would_equal() -> None:
    # A queue keeps, per code object, what its last fingerprint read (`Shared.last`); a
    # later function of that code reuses those reads only while every name holds the very
    # object it held and each function among them is unchanged. Each change below must
    # give the fingerprint the general pass gives, not the kept one.
    global USER, reads_nothing
    shared = Shared()

    def lam(i: int) -> Callable[[], Any]:
        return lambda i=i: reads_nothing() if USER else send(i)  # type: ignore[misc]

    def check(fn: Callable[[], Any]) -> tuple[Any, ...] | None:
        general = _Fast(None).call(fn, 0)
        taken = fast_fingerprint(fn, shared)
        assert taken == (None if general is None else (_MARK, *general))
        return taken

    fast_fingerprint(reads_nothing)  # its code is known to read no value
    first = check(lam(1))
    assert check(lam(1)) == first and shared.last  # kept, then reused
    assert check(lam(2)) != first  # another default
    USER = "".join(["ali", "ce"])  # an equal str, another object: taken again, equal
    try:
        assert check(lam(1)) == first
        USER = "bob"
        assert check(lam(1)) != first
    finally:
        USER = "alice"
    assert check(lam(1)) == first
    original = reads_nothing
    try:
        reads_nothing.__qualname__ = "renamed"
        assert check(lam(1)) != first
        reads_nothing.__qualname__ = "reads_nothing"
        assert check(lam(1)) == first
        reads_nothing.__defaults__ = (1,)
        assert check(lam(1)) is None or check(lam(1)) != first
        reads_nothing.__defaults__ = None

        async def replacement() -> None:
            return None

        reads_nothing = replacement  # rebound: another function object
        assert check(lam(1)) != first
    finally:
        reads_nothing = original
    assert check(lam(1)) == first
    assert check(lambda i=1: reads_nothing() if USER else send(i)) != first  # other code
