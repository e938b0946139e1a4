"""A reused key never answers another call (review findings 1-3, 9): each test pushes for
alice, rebinds what the call reads, then pushes for bob, in the order a user meets it."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentq.errors import KeyConflictError
from agentq.outcomes import Completed
from agentq.queue import Job, Queue, Queued
from agentq.queue.fingerprint import derive_fingerprint


async def send(to: Any) -> str:
    return f"sent to {to}"


def cell(source: str, namespace: dict[str, Any]) -> None:
    """Run `source` in `namespace`, as a notebook cell runs in its kernel's globals."""
    exec(compile(source, "<cell>", "exec"), namespace)


def notebook() -> dict[str, Any]:
    return {"__name__": "__main__", "send": send}


async def alice_then_bob(namespace: dict[str, Any], make: str, rebind: str) -> None:
    """Push `make` (an expression giving the fn), run `rebind`, push it again: a conflict."""
    async with Queue() as queue:
        fn = eval(make, namespace)
        assert await queue.push_and_wait(Job("k", fn)) == "sent to alice"
        assert await queue.push_and_wait(Job("k", eval(make, namespace))) == "sent to alice"
        cell(rebind, namespace)
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("k", eval(make, namespace)))


@pytest.mark.parametrize(
    "make",
    [
        "lambda: greet()",  # a helper function read as a global
        "greet_via",  # a function calling the helper
        "functools.partial(lambda f: f(), greet)",  # the helper as an argument
        "lambda g=greet: g()",  # the helper as a default
        "(lambda g: lambda: g())(greet)",  # the helper in a closure cell
    ],
)
async def test_a_global_read_by_a_helper_function_is_part_of_the_call(make: str) -> None:
    namespace = notebook()
    namespace["functools"] = functools
    cell("user = 'alice'\ndef greet(): return send(user)\n", namespace)
    cell("def greet_via(): return greet()", namespace)
    await alice_then_bob(namespace, make, "user = 'bob'")


async def test_a_helper_edited_in_place_is_another_call() -> None:
    namespace = notebook()
    cell("def greet(): return send('alice')", namespace)
    greet = namespace["greet"]
    async with Queue() as queue:
        await queue.push_and_wait(Job("k", lambda: greet()))
        greet.__code__ = (lambda: send("bob")).__code__  # the same function object, new code
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("k", lambda: greet()))


def make_tool(query: str) -> Callable[[], Any]:
    def call() -> Any:
        nonlocal query
        query = query.strip()  # normalise the argument: rebinds the closure variable
        return send(query)

    return call


async def test_a_closure_variable_the_function_rebinds_is_part_of_the_call() -> None:
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("tool", make_tool(" alice "))) == "sent to alice"
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("tool", make_tool(" bob ")))
        tool = make_tool(" carol ")
        job = Job("tool2", tool)
        await queue.push_and_wait(job)  # the same Job again: its result, no comparison
        assert await queue.push_and_wait(job) == "sent to carol"


@pytest.mark.parametrize(
    "make",
    [
        "lambda c=Cfg: send(c.user)",  # the class as a default
        "lambda: send(Cfg.user)",  # the class read as a global
        "lambda: Cfg.who()",  # a static method whose body was edited
        "lambda: Cfg().run()",  # a method whose body was edited
    ],
)
async def test_a_class_redefined_with_another_body_is_another_call(make: str) -> None:
    namespace = notebook()
    define = (
        "class Cfg:\n"
        "    user = {user!r}\n"
        "    @staticmethod\n"
        "    def who(): return send({user!r})\n"
        "    def run(self): return send({user!r})\n"
    )
    cell(define.format(user="alice"), namespace)
    await alice_then_bob(namespace, make, define.format(user="bob"))


async def test_a_class_redefined_with_the_same_body_is_the_same_call() -> None:
    namespace = notebook()
    define = "class Cfg:\n    user = 'alice'\n    def run(self): return send(self.user)\n"
    cell(define, namespace)
    async with Queue() as queue:
        await queue.push_and_wait(Job("k", eval("lambda: Cfg().run()", namespace)))
        cell(define, namespace)  # the cell re-run: a new class object, the same content
        assert await queue.push_and_wait(Job("k", eval("lambda: Cfg().run()", namespace))) == (
            "sent to alice"
        )


def test_a_function_past_the_depth_bound_is_refused_not_matched() -> None:
    def chain(depth: int) -> Callable[[], Any]:
        fn: Callable[[], Any] = lambda: send("alice")  # noqa: E731
        for _ in range(depth):
            fn = functools.partial(lambda f: f(), fn)
        return fn

    deep = chain(40)
    assert derive_fingerprint(deep) != derive_fingerprint(deep)  # refused: never "the same"
    shallow = chain(3)
    assert derive_fingerprint(shallow) == derive_fingerprint(shallow)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        ("lambda: send(user)", "global user: 'alice' != 'bob'"),
        ("lambda: greet()", "global greet → global user: 'alice' != 'bob'"),
        ("functools.partial(send, user)", "argument 1: 'alice' != 'bob'"),
        ("lambda g=greet: g()", "default 1 → global user: 'alice' != 'bob'"),
    ],
)
async def test_the_conflict_names_the_first_part_that_differs(make: str, says: str) -> None:
    namespace = notebook()
    namespace["functools"] = functools
    cell("user = 'alice'\ndef greet(): return send(user)\n", namespace)
    async with Queue() as queue:
        await queue.push_and_wait(Job("k", eval(make, namespace)))
        cell("user = 'bob'", namespace)
        with pytest.raises(KeyConflictError, match="differs in") as caught:
            await queue.push_and_wait(Job("k", eval(make, namespace)))
        assert f"differs in {says}" in str(caught.value)


async def test_the_conflict_names_a_rebound_closure_variable() -> None:
    async with Queue() as queue:
        await queue.push_and_wait(Job("tool", make_tool(" cats ")))
        with pytest.raises(KeyConflictError, match="closure variable query: ' cats ' != ' dogs '"):
            await queue.push_and_wait(Job("tool", make_tool(" dogs ")))


@dataclass
class Deps:
    name: str
    history: list[str]


def test_a_long_repr_is_kept_as_a_digest_and_still_compared() -> None:
    history = [f"message {i}" for i in range(2_000)]
    alice = derive_fingerprint(functools.partial(send, Deps("alice", history)))
    kept = alice[0][1][0]
    assert kept.form[0] == "repr-digest" and len(repr(kept.form)) < 200
    assert derive_fingerprint(functools.partial(send, Deps("alice", list(history)))) == alice
    assert derive_fingerprint(functools.partial(send, Deps("bob", history))) != alice


@dataclass
class User:
    name: str


async def test_the_same_object_mutated_between_pushes_is_the_same_call() -> None:
    # finding 4, decided: the identity rule (documented in docs/idempotency.md); a new
    # object with other contents is another call
    user = User("alice")
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("k", functools.partial(send, user))) == (
            "sent to User(name='alice')"
        )
        user.name = "bob"
        assert await queue.push_and_wait(Job("k", functools.partial(send, user))) == (
            "sent to User(name='alice')"
        )
        says = "argument 1: \"User(name='alice')\" != \"User(name='carol')\""
        with pytest.raises(KeyConflictError, match=re.escape(says)):
            await queue.push_and_wait(Job("k", functools.partial(send, User("carol"))))


async def test_an_in_flight_conflict_of_one_function_names_it_once_and_what_differs() -> None:
    namespace = notebook()
    cell("user = 'alice'\nasync def slow(): await gate.wait(); return await send(user)\n",
         namespace)
    gate = namespace["gate"] = asyncio.Event()
    slow = namespace["slow"]
    async with Queue() as queue:
        first = await queue.push(Job("k9", slow))  # in flight: the gate is closed
        cell("user = 'bob'", namespace)
        with pytest.raises(KeyConflictError) as caught:
            await queue.push(Job("k9", slow))  # a new Job of the very same function
        gate.set()
        assert isinstance(first, Queued) and await first.handle == Completed("sent to bob")
    message = str(caught.value)
    assert message.count(repr(slow)) == 1, message
    assert "both times" in message and "differs in global user: 'alice' != 'bob'" in message
