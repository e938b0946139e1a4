"""A function's own state is not an input of its call (issue 20 item 4).

What a function writes (a closure variable it rebinds, a global it assigns) is its state: the
same function pushed again under its key is a hit however often it ran. What it reads (a
global rebound by a notebook cell, a cell another function rebinds) stays part of the call.
And a hit never walks the data a closure can reach: a value that is the very object the
key's fingerprint holds is equal by the identity rule, and is not walked again.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentq import Cached, Job, KeyConflictError, Queue
from agentq.queue import fingerprint as fingerprint_module
from agentq.queue.fingerprint import derive_fingerprint

pytestmark = pytest.mark.timeout(30)

runs = 0


async def counts_globally() -> int:
    global runs
    runs += 1
    return runs


def make_counter() -> Any:
    ran = 0

    async def counted() -> int:
        nonlocal ran
        ran += 1
        return ran

    return counted


async def test_a_nonlocal_counter_pushed_twice_is_a_hit() -> None:
    counted = make_counter()
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("k", counted)) == 1
        # was: KeyConflictError "differs in closure variable ran: 0 != 1"
        assert await queue.push(Job("k", counted)) == Cached(1)
        assert await queue.push(Job("k", counted)) == Cached(1)
        # another function object of the same factory, whose counter is still 0: another
        # call (two function objects compare their variables by value)
        with pytest.raises(KeyConflictError, match="ran"):
            await queue.push(Job("k", counted_twice()))


def counted_twice() -> Any:
    fresh = make_counter()
    fresh.__closure__[0].cell_contents = 7  # type: ignore[index]
    return fresh


async def test_a_global_the_function_assigns_is_its_state() -> None:
    async with Queue() as queue:
        first = await queue.push_and_wait(Job("g", counts_globally))
        assert await queue.push(Job("g", counts_globally)) == Cached(first)


def make_reader() -> tuple[Any, Any]:
    user = "alice"

    async def send() -> str:
        return f"mail sent to {user}"

    def switch(to: str) -> None:
        nonlocal user
        user = to

    return send, switch


async def test_a_cell_another_function_rebinds_is_still_an_input() -> None:
    send, switch = make_reader()
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("r", send)) == "mail sent to alice"
        switch("bob")
        with pytest.raises(KeyConflictError, match="'alice' != 'bob'"):
            await queue.push(Job("r", send))
        switch("alice")
        assert await queue.push(Job("r", send)) == Cached("mail sent to alice")


def make_logger(log: list[Any]) -> Any:
    async def logged(i: int = 0) -> int:
        log.append(i)
        return len(log)

    return logged


@pytest.mark.parametrize(
    "data",
    [
        [[i] for i in range(1_000)],  # within MAX_ITEMS: walked item by item before
        [list(range(1_000)) for _ in range(100)],  # 100,000 items in all
        list(range(100_000)),  # past MAX_ITEMS: by identity (never walked, before either)
    ],
    ids=["1000-lists", "100x1000", "100000-flat"],
)
async def test_a_hit_never_walks_what_the_closure_reaches(
    data: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    logged = make_logger(data)
    walked = 0
    value = fingerprint_module._Walk.value

    def counting(self: Any, *args: Any) -> Any:
        nonlocal walked
        walked += 1
        return value(self, *args)

    async with Queue() as queue:
        await queue.push_and_wait(Job("log", logged))
        monkeypatch.setattr(fingerprint_module._Walk, "value", counting)
        for _ in range(3):
            data.append([0])  # the closure's list keeps growing: the same object
            assert isinstance(await queue.push(Job("log", logged)), Cached)
        assert walked <= 3 * 4  # a cell per hit (and its defaults), not the list's items
        walked = 0
        with pytest.raises(KeyConflictError):  # another list: compared by value (bounded)
            await queue.push(Job("log", make_logger([[1]])))
        assert walked < 10


def test_the_same_objects_give_the_kept_forms() -> None:
    data = [[i] for i in range(10)]
    logged = make_logger(data)
    kept = derive_fingerprint(logged)
    again = derive_fingerprint(logged, kept)
    assert again == kept and again[0][6][0][1] is kept[0][6][0][1]
    assert derive_fingerprint(make_logger([[i] for i in range(10)]), kept) == kept
    assert derive_fingerprint(make_logger([[0]]), kept) != kept
