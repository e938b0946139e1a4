"""A claim keeps its fingerprint unbuilt (`Deferred`) and builds exactly the one it took."""

from __future__ import annotations

import asyncio
import functools
import re
import types
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentq.errors import KeyConflictError
from agentq.queue import Job, Queue
from agentq.queue.fingerprint_deferred import Deferred, defer
from agentq.queue.fingerprint_fast import Shared, fast_fingerprint
from agentq.queue.keytable import KeyTable

TARGET = "alice"


async def work(*args: Any) -> Any:
    return args


async def other(*args: Any) -> Any:
    return ("other", *args)


async def reads_nothing() -> None:
    return None


def lam(i: Any) -> Callable[[], Any]:
    return lambda i=i: work(i, TARGET)  # type: ignore[misc]


def lam_closure(i: Any) -> Callable[[], Any]:
    return lambda: work(i)


def lam_kw(i: Any) -> Callable[..., Any]:
    def fn(*, i: Any = i) -> Any:
        return work(i)

    return fn


def calls() -> list[Callable[..., Any]]:
    return [
        lam(1), lam(1), lam(2), lam("a"), lam(None), lam(True), lam(1.5), lam([1]),
        lam_closure(1), lam_kw(1), reads_nothing, work, lambda: reads_nothing(),
        lambda: work(TARGET), lambda n=3: work(n), functools.partial(work, 1),
    ]


def check_all(shared: Shared) -> int:
    """Every part `defer` gives expands to `fast_fingerprint`'s tuple, taken now."""
    deferred = 0
    for fn in calls():
        if not isinstance(fn, types.FunctionType):
            continue
        part = defer(fn, shared)
        taken = fast_fingerprint(fn, shared)
        if part is not None:
            deferred += 1
            assert part.expand(fn.__defaults__) == taken, fn
    return deferred


def test_a_deferred_part_expands_to_the_fast_fingerprint() -> None:
    shared = Shared()
    check_all(shared)  # the kept reads of each code are taken once
    assert check_all(shared) >= 8  # the common lambdas and async defs are deferred
    part = defer(lam(1), shared)
    assert part is not None and part is defer(lam(2), shared)  # one part per code
    assert defer(lam_closure(1), shared) is None and defer(lam_kw(1), shared) is None
    assert defer(lam(1.5), shared) is None  # a default with no flat form
    assert "lam" in repr(part)


def test_a_deferred_part_is_given_only_while_taking_the_reads_again_would_equal() -> None:
    global TARGET, work
    shared = Shared()
    check_all(shared)
    first = defer(lam(1), shared)
    assert first is not None
    TARGET = "bob"  # the global the lambda reads now holds another object
    try:
        assert defer(lam(1), shared) is None  # taken again by the caller
        assert check_all(shared) >= 1
    finally:
        TARGET = "alice"
    original = work
    try:

        async def replacement(*args: Any) -> Any:
            return args

        work = replacement
        assert defer(lam(1), shared) is None
    finally:
        work = original
    fast_fingerprint(lam(1), shared)  # the reads of the original objects, kept again
    again = defer(lam(1), shared)
    assert again is not None and again.expand((1,)) == fast_fingerprint(lam(1), shared)


async def test_a_claimed_key_keeps_its_call_as_it_was_when_pushed() -> None:
    global TARGET
    async with Queue() as queue:
        await queue.push_and_wait(Job("warm", lam(0)))  # the code's reads are kept
        fn = lam(1)
        await queue.push_and_wait(Job("k", fn))
        record = queue._keys["k"]
        assert type(record.fp) is Deferred  # kept unbuilt
        assert await queue.push_and_wait(Job("k", lam(1))) == (1, "alice")  # same call
        assert type(record.fp) is tuple  # built once for the comparison
        fn2 = lam(2)
        await queue.push_and_wait(Job("k2", fn2))
        fn2.__defaults__ = (3,)  # the function changes after the claim
        with pytest.raises(KeyConflictError, match="differs in"):
            await queue.push_and_wait(Job("k2", fn2))
        await queue.push_and_wait(Job("k3", lam(3)))
        TARGET = "bob"  # the global it read changes after the claim
        try:
            with pytest.raises(KeyConflictError, match="'k3'"):
                await queue.push_and_wait(Job("k3", lam(3)))
        finally:
            TARGET = "alice"
        assert await queue.push_and_wait(Job("k3", lam(3))) == (3, "alice")


async def test_a_deferred_claim_is_compared_while_the_job_is_in_flight() -> None:
    async with Queue() as queue:
        await queue.push_and_wait(Job("warm", lam(0)))
        accepted = await queue.push(Job("k", lam(1)))
        handle = accepted.handle  # type: ignore[union-attr]
        with pytest.raises(KeyConflictError):
            await queue.push(Job("k", lam(2)))
        joined = await queue.push(Job("k", lam(1)))
        assert joined.handle is not handle  # type: ignore[union-attr]
        assert (await handle).output == (1, "alice")  # type: ignore[union-attr]


def test_the_table_builds_a_deferred_fingerprint_once() -> None:
    shared = Shared()
    fast_fingerprint(lam(5), shared)
    part = defer(lam(5), shared)
    assert part is not None

    class Rec:
        fp: Any = part
        fp_args: Any = (5,)

    rec: Any = Rec()
    built = KeyTable.fingerprint(rec)
    assert built == fast_fingerprint(lam(5), shared) and rec.fp is built
    assert KeyTable.fingerprint(rec) is built and rec.fp_args is None


def partials() -> list[functools.partial[Any]]:
    return [
        functools.partial(reads_nothing), functools.partial(work, 1), functools.partial(work, 1),
        functools.partial(work, "a", None), functools.partial(work, True),
        functools.partial(work, 1.5), functools.partial(work, x=1),
        functools.partial(lam, 1), functools.partial(functools.partial(work, 1), 2),
    ]


def test_a_deferred_partial_expands_to_the_fast_fingerprint() -> None:
    from agentq.queue.fingerprint_deferred import defer_partial

    shared = Shared()
    fast_fingerprint(work, shared)  # its code is known to read no value
    fast_fingerprint(reads_nothing, shared)
    deferred = 0
    for fn in partials():
        part = defer_partial(fn, shared)
        if part is not None:
            deferred += 1
            assert part.expand(fn.args) == fast_fingerprint(fn, shared), fn
    assert deferred == 5  # str, int, None arguments (a partial of a partial is flattened)
    part = defer_partial(functools.partial(work, 7), shared)
    assert part is not None and part is defer_partial(functools.partial(work, 8), shared)
    assert "work" in repr(part)


async def test_a_claimed_partial_keeps_its_arguments_as_they_were() -> None:
    async with Queue() as queue:
        await queue.push_and_wait(Job("warm", functools.partial(work, 0)))
        await queue.push_and_wait(Job("p", functools.partial(work, 1)))
        assert type(queue._keys["p"].fp).__name__ == "DeferredPartial"
        assert await queue.push_and_wait(Job("p", functools.partial(work, 1))) == (1,)
        with pytest.raises(KeyConflictError, match="differs in"):
            await queue.push_and_wait(Job("p", functools.partial(work, 2)))
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("p", functools.partial(work, True)))
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("p", functools.partial(other, 1)))


FORMS = ("lambda", "partial", "async")


def job_for(key: str, form: str, arg: Any) -> Job:
    if form == "lambda":
        return Job(key, lam(arg))
    if form == "partial":
        return Job(key, functools.partial(work, arg))
    return Job(key, reads_nothing if arg == 0 else other)  # type: ignore[arg-type]


async def answers(
    queue: Queue, ops: list[tuple[str, str, Any, str]]
) -> list[object]:
    global TARGET
    seen: list[object] = []
    try:
        for key, form, arg, target in ops:
            TARGET = target  # the global the lambdas read, rebound between pushes
            try:
                seen.append(await queue.push_and_wait(job_for(key, form, arg)))
            except KeyConflictError as exc:
                seen.append(("conflict", re.sub(r" at 0x[0-9a-f]+", "", str(exc))))
    finally:
        TARGET = "alice"
    return seen


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["k1", "k2", "k3"]),
            st.sampled_from(FORMS),
            st.sampled_from([0, 1, "a", None, True, 2.5]),
            st.sampled_from(["alice", "bob"]),
        ),
        max_size=12,
    )
)
def test_a_queue_answers_every_push_as_it_would_with_every_fingerprint_built(
    ops: list[tuple[str, str, Any, str]],
) -> None:
    # The same pushes against a queue that keeps claim fingerprints unbuilt and one that
    # builds them at once (`defer` and `defer_partial` refused): the same outputs, the same
    # conflicts with the same messages.
    import agentq.queue.keytable as keytable

    async def both() -> tuple[list[object], list[object]]:
        async with Queue() as deferring:
            got = await answers(deferring, ops)
        saved = keytable.defer, keytable.defer_partial
        keytable.defer = keytable.defer_partial = lambda fn, shared: None  # type: ignore[assignment]
        try:
            async with Queue() as building:
                want = await answers(building, ops)
        finally:
            keytable.defer, keytable.defer_partial = saved
        return got, want

    got, want = asyncio.run(both())
    assert got == want


def test_a_kept_part_is_given_again_only_to_the_same_names_over_the_same_reads() -> None:
    # `defer` answers a function of a kept code with one lookup (issue 25): each check of
    # `_defer` still holds, against the reads the kept part was taken over.
    global TARGET
    shared = Shared()
    check_all(shared)
    part = defer(lam(1), shared)
    assert part is not None and defer(lam(2), shared) is part
    renamed = lam(1)
    renamed.__qualname__ = "renamed"
    other_part = defer(renamed, shared)
    assert other_part is not part
    assert other_part is None or other_part.expand((1,)) == fast_fingerprint(renamed, shared)
    TARGET = "bob"
    try:
        fast_fingerprint(lam(1), shared)  # the code's kept reads move to the new object
        moved = defer(lam(1), shared)
        assert moved is not None and moved is not part
        assert moved.expand((1,)) == fast_fingerprint(lam(1), shared)
    finally:
        TARGET = "alice"
    back = defer(lam(3), shared)  # the reads of the first part's objects again
    assert back is None or back.expand((3,)) == fast_fingerprint(lam(3), shared)
    with_kw = lam(1)
    with_kw.__kwdefaults__ = {"x": 1}
    assert defer(with_kw, shared) is None
