"""An idempotency key reused for a different call raises KeyConflictError (BH-25)."""

from __future__ import annotations

import asyncio
import functools
import gc
import re
import weakref
from dataclasses import dataclass
from typing import Any

import pytest
from queue_helpers import BOUND, Gate

from agentq.errors import JobFailed, KeyConflictError
from agentq.outcomes import Completed
from agentq.queue.fingerprint import MAX_ITEMS, MAX_VALUES, derive_fingerprint
from agentq.queue.handles import Cached, InFlight
from agentq.queue.jobs import Job
from agentq.queue.queue import Queue

sent: list[str] = []


async def send_mail(to: str) -> str:
    sent.append(to)
    return f"mail sent to {to}"


async def other_fn() -> str:
    return "other"


async def test_bh25_a_key_reused_for_another_call_raises_a_conflict() -> None:
    """BH-25: k completes for alice; k for bob or another function conflicts; alice is cached."""
    sent.clear()
    async with Queue() as queue:
        alice = Job("k", functools.partial(send_mail, "alice"))
        assert await queue.push_and_wait(alice) == "mail sent to alice"
        with pytest.raises(KeyConflictError, match=r"'k'.*bob"):
            await queue.push_and_wait(Job("k", functools.partial(send_mail, "bob")))
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("k", other_fn))
        with pytest.raises(KeyConflictError):
            queue.push_nowait(Job("k", other_fn))
        again = Job("k", functools.partial(send_mail, "alice"))  # an identical call
        assert await queue.push_and_wait(again) == "mail sent to alice"
        assert await queue.push(again) == Cached("mail sent to alice")
    assert sent == ["alice"]


async def test_a_conflicting_join_of_a_running_key_is_refused_too() -> None:
    async with Queue() as queue:
        gate = Gate()
        await queue.push(Job("k", gate))
        with pytest.raises(KeyConflictError):
            await queue.push(Job("k", other_fn))
        assert isinstance(await queue.push(Job("k", gate)), InFlight)
        gate.release.set()


async def test_an_explicit_fingerprint_decides() -> None:
    async with Queue() as queue:
        first = Job("k", lambda: "first", fingerprint=("mail", "alice"))
        assert await queue.push_and_wait(first) == "first"
        same = Job("k", lambda: "second", fingerprint=("mail", "alice"))
        assert await queue.push_and_wait(same) == "first"
        with pytest.raises(KeyConflictError, match="bob"):
            await queue.push_and_wait(Job("k", lambda: "third", fingerprint=("mail", "bob")))


async def test_a_failed_key_accepts_any_call() -> None:
    async def broken() -> None:
        raise RuntimeError("no")

    async with Queue() as queue:
        with pytest.raises(JobFailed):
            await queue.push_and_wait(Job("k", broken))
        async with asyncio.timeout(BOUND):
            assert await queue.push_and_wait(Job("k", other_fn)) == "other"


def make(name: str) -> Job:
    return Job(f"mail-{name}", lambda: send_mail(name))


def test_closures_capturing_plain_values_compare_by_value() -> None:
    assert derive_fingerprint(make("alice").fn) == derive_fingerprint(make("alice").fn)
    assert derive_fingerprint(make("alice").fn) != derive_fingerprint(make("bob").fn)
    assert derive_fingerprint(lambda: send_mail("a")) != derive_fingerprint(lambda: send_mail("b"))


def test_a_variable_the_closure_rebinds_is_its_state_for_the_same_function_object() -> None:
    # issue 20 item 4: what a function writes (``nonlocal calls; calls += 1``) is its state,
    # not an input of the call: the same function object stays the same call as it counts;
    # a counter in a shared list (mutated, not rebound) is the same object, as before
    calls = 0
    results: list[int] = []

    def counter() -> int:
        nonlocal calls
        calls += 1
        results.append(calls)
        return calls

    def logger() -> int:
        results.append(1)
        return len(results)

    before = derive_fingerprint(counter)
    counter()
    assert derive_fingerprint(counter) == before
    logged = derive_fingerprint(logger)
    logger()
    assert derive_fingerprint(logger) == logged


def make_search(query: str) -> Any:
    async def search() -> str:
        nonlocal query
        query = query.strip()  # a rebound variable that is also the factory's input
        return query

    return search


def test_a_rebound_variable_of_two_function_objects_compares_by_value() -> None:
    # two closures from one factory are two calls when what they hold differs, even in a
    # variable they rebind (the normalised query of a factory-built tool)
    assert derive_fingerprint(make_search(" cats ")) != derive_fingerprint(make_search(" dogs "))
    assert derive_fingerprint(make_search("cats")) == derive_fingerprint(make_search("cats"))


class Mailer:
    def __init__(self) -> None:
        self.sent = 0

    async def send(self, to: str) -> str:
        self.sent += 1
        return to


@dataclass(frozen=True)
class SendTo:
    to: str

    async def __call__(self) -> str:
        return self.to


def test_methods_compare_by_their_object_and_callable_objects_by_their_repr() -> None:
    one, two = Mailer(), Mailer()
    assert derive_fingerprint(functools.partial(one.send, "x")) == derive_fingerprint(
        functools.partial(one.send, "x")
    )
    assert derive_fingerprint(functools.partial(one.send, "x")) != derive_fingerprint(
        functools.partial(two.send, "x")
    )  # two objects with the default repr: two different senders
    one.sent += 1  # the object's state is not part of the call
    assert derive_fingerprint(one.send) == derive_fingerprint(one.send)
    assert derive_fingerprint(SendTo("a")) == derive_fingerprint(SendTo("a"))
    assert derive_fingerprint(SendTo("a")) != derive_fingerprint(SendTo("b"))
    assert derive_fingerprint(len) == derive_fingerprint(len)


def test_partial_keyword_arguments_and_broken_reprs() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    a = derive_fingerprint(functools.partial(send_mail, to="a"))
    assert a != derive_fingerprint(functools.partial(send_mail, to="b"))
    assert derive_fingerprint(functools.partial(send_mail, Broken()))  # does not raise


# ------------------------------------------------------------------ captured objects by value


class User:
    """An object with the default ``<… object at 0x…>`` repr."""

    def __init__(self, name: str) -> None:
        self.name = name


@dataclass(frozen=True)
class Account:
    name: str


def send_to(user: object) -> Job:
    return Job("mail", lambda: send_mail(getattr(user, "name", str(user))))


async def test_closures_capturing_different_objects_conflict_instead_of_mixing_results() -> None:
    """``lambda: send(user)`` for alice then bob: bob must not get alice's result."""
    sent.clear()
    async with Queue() as queue:
        alice, bob = User("alice"), User("bob")
        assert await queue.push_and_wait(send_to(alice)) == "mail sent to alice"
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(send_to(bob))
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(send_to(Account("bob")))
        assert await queue.push_and_wait(send_to(alice)) == "mail sent to alice"  # same object
    assert sent == ["alice"]


def test_objects_with_their_own_repr_compare_by_it() -> None:
    assert derive_fingerprint(send_to(Account("alice")).fn) == derive_fingerprint(
        send_to(Account("alice")).fn
    )
    assert derive_fingerprint(send_to(Account("alice")).fn) != derive_fingerprint(
        send_to(Account("bob")).fn
    )


def test_a_recreated_object_with_the_default_repr_is_another_call() -> None:
    """Documented: without a repr of its own, only the same object is the same call."""
    alice = User("alice")
    assert derive_fingerprint(send_to(alice).fn) == derive_fingerprint(send_to(alice).fn)
    assert derive_fingerprint(send_to(alice).fn) != derive_fingerprint(send_to(User("alice")).fn)


def test_json_like_values_compare_canonically() -> None:
    def call(params: object) -> object:
        return lambda: send_mail(str(params))

    a = {"to": "alice", "cc": ["x", {"b": 1, "a": 2.5}], "n": None}
    b = {"n": None, "cc": ["x", {"a": 2.5, "b": 1}], "to": "alice"}
    assert derive_fingerprint(call(a)) == derive_fingerprint(call(b))  # key order is not the call
    assert derive_fingerprint(call(a)) != derive_fingerprint(call({**a, "to": "bob"}))
    assert derive_fingerprint(call([1, 2])) != derive_fingerprint(call([1.0, 2]))
    assert derive_fingerprint(call([True])) != derive_fingerprint(call([1]))
    assert derive_fingerprint(call(float("nan"))) == derive_fingerprint(call(float("nan")))
    partial_a = functools.partial(send_mail, a)
    assert derive_fingerprint(partial_a) == derive_fingerprint(functools.partial(send_mail, b))
    assert derive_fingerprint(functools.partial(send_mail, to=a)) == derive_fingerprint(
        functools.partial(send_mail, to=b)
    )
    looped: list[object] = []
    looped.append(looped)
    assert derive_fingerprint(call(looped)) == derive_fingerprint(call(looped))


async def test_state_shared_by_reference_never_makes_a_call_conflict_with_itself() -> None:
    """A re-created closure over the same mutable object stays the same call as it changes."""
    seen: list[str] = []

    async def record(to: str) -> str:
        seen.append(to)
        return to

    def job() -> Job:
        return Job("k", lambda: record(str(len(seen))))

    async with Queue() as queue:
        for _ in range(3):
            assert await queue.push_and_wait(job()) == "0"
    assert seen == ["0"]


def test_captured_functions_compare_by_their_own_fingerprint() -> None:
    def outer(name: str) -> object:
        async def helper() -> str:
            return name

        return lambda: helper()

    assert derive_fingerprint(outer("a")) == derive_fingerprint(outer("a"))
    assert derive_fingerprint(outer("a")) != derive_fingerprint(outer("b"))


async def test_a_notebook_lambda_over_a_rebound_global_is_another_call() -> None:
    """Review finding: a top-level `lambda: send(user)` reads `user` as a global."""
    namespace: dict[str, object] = {}
    cell = "def send(u):\n    return f'sent to {u}'\nuser = {!r}\njob = lambda: send(user)\n"
    async with Queue() as queue:
        exec(compile(cell.replace("{!r}", repr("alice")), "<cell-1>", "exec"), namespace)
        assert await queue.push_and_wait(Job("mail-1", namespace["job"])) == "sent to alice"
        exec(compile(cell.replace("{!r}", repr("alice")), "<cell-1>", "exec"), namespace)
        assert await queue.push_and_wait(Job("mail-1", namespace["job"])) == "sent to alice"
        exec(compile(cell.replace("{!r}", repr("bob")), "<cell-1>", "exec"), namespace)
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("mail-1", namespace["job"]))


def test_values_whose_repr_elides_contents_count_by_identity() -> None:
    class Summary:
        def __init__(self, data: list[int]) -> None:
            self.data = data

        def __repr__(self) -> str:
            return f"Summary([{self.data[0]}, ..., {self.data[-1]}])"

    def call_with(value: Summary) -> object:
        return lambda: value

    a = Summary([0] * 2000)
    b = Summary([0] * 2000)
    b.data[1000] = 5
    assert repr(a) == repr(b)
    assert derive_fingerprint(call_with(a)) == derive_fingerprint(call_with(a))
    assert derive_fingerprint(call_with(a)) != derive_fingerprint(call_with(b))


# ------------------------------------------------------------------ the stored text


class Session:
    """An object with the default repr: compared by identity in one process."""


@dataclass
class Person:
    name: str


def test_stored_fingerprints_keep_what_compares_by_value() -> None:
    from agentq.queue.fingerprint_stored import stored_fingerprint as stored

    alice = stored(functools.partial(send_mail, "alice"))
    assert alice.startswith("v2:") and len(alice) == 3 + 64
    assert stored(functools.partial(send_mail, "alice")) == alice
    assert stored(functools.partial(send_mail, "bob")) != alice
    assert stored(functools.partial(send_mail, to="alice")) != alice
    assert stored(other_fn) != stored(send_mail)
    assert stored(lambda: send_mail(Person("a"))) != stored(lambda: send_mail(Person("b")))
    assert stored(lambda: send_mail("alice")) != stored(lambda: send_mail("bob"))
    params = {"b": 2, "a": [1, 1.0, True, None, b"x", {3}]}
    assert stored(functools.partial(send_mail, params)) == stored(
        functools.partial(send_mail, dict(reversed(params.items())))
    )
    assert stored(functools.partial(send_mail, 1)) != stored(functools.partial(send_mail, 1.0))
    assert stored(functools.partial(send_mail, 10**5000)) != stored(
        functools.partial(send_mail, 10**5000 + 1)
    )


def test_stored_fingerprints_know_identity_values_by_their_type_only() -> None:
    from agentq.queue.fingerprint_stored import stored_fingerprint as stored

    one, two = Session(), Session()
    assert derive_fingerprint(functools.partial(send_mail, one)) != derive_fingerprint(
        functools.partial(send_mail, two)
    )  # one process: only the same object is the same value
    assert stored(functools.partial(send_mail, one)) == stored(
        functools.partial(send_mail, two)
    )  # across processes there is no telling them apart
    assert stored(functools.partial(send_mail, one)) != stored(
        functools.partial(send_mail, Person("x"))
    )


def test_stored_explicit_fingerprints_are_their_value() -> None:
    from agentq.queue.fingerprint_stored import stored_fingerprint as stored

    assert stored(other_fn, ("send", "alice")) == stored(send_mail, ("send", "alice"))
    assert stored(other_fn, ("send", "alice")) != stored(other_fn, ("send", "bob"))
    assert stored(other_fn, ("send", "alice")) != stored(other_fn, ["send", "alice"])
    assert stored(other_fn, {"a": 1, "b": 2}) == stored(other_fn, {"b": 2, "a": 1})
    assert stored(other_fn, ("send",)) != stored(functools.partial(lambda x: x, "send"))


def test_stored_fingerprints_are_the_same_in_another_process() -> None:
    import subprocess
    import sys
    from pathlib import Path

    from agentq.queue.fingerprint_stored import stored_fingerprint as stored

    code = (
        "import functools, test_fingerprint as t\n"
        "from agentq.queue.fingerprint_stored import stored_fingerprint as s\n"
        "print(s(functools.partial(t.send_mail, {'to': ['alice'], 'n': 1.5})))\n"
        "print(s(lambda: t.send_mail(t.Person('a'))))\n"
    )
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=here, capture_output=True, text=True, check=True,
        env={**__import__("os").environ, "PYTHONHASHSEED": "random"},
    )
    first, _ = done.stdout.split()
    assert first == stored(functools.partial(send_mail, {"to": ["alice"], "n": 1.5}))


log: list[str] = []
settings = {"retries": 3}


async def logs_and_sends(to: str) -> str:
    log.append(to)
    return f"{to} {settings}"


def test_module_level_containers_are_state_to_a_stored_fingerprint() -> None:
    from agentq.queue.fingerprint_stored import stored_fingerprint as stored

    before = stored(functools.partial(logs_and_sends, "alice"))
    log.append("something")  # a log or a cache fills up: still the same call
    settings["retries"] = 4
    assert stored(functools.partial(logs_and_sends, "alice")) == before
    assert stored(functools.partial(logs_and_sends, "bob")) != before
    log.clear()
    settings["retries"] = 3

# ------------------------------------------------------------------ when the fingerprint is taken


async def test_issue9_the_claiming_push_takes_its_fingerprint_when_pushed_alice_then_bob() -> None:
    """Issue 9 item 13: ``Job("greet", lambda: send(user))`` pushed for alice, ``user``
    rebound to bob, a new such job pushed: bob is refused, nobody gets alice's mail twice."""
    namespace: dict[str, object] = {"sent": [], "Job": Job}
    cell = (
        "async def send(u):\n"
        "    sent.append(u)\n"
        "    return f'mail sent to {u}'\n"
        "def greet():\n"
        "    return Job('greet', lambda: send(user))\n"
    )
    exec(compile(cell, "<cell-1>", "exec"), namespace)
    async with Queue() as queue:
        namespace["user"] = "alice"
        first = namespace["greet"]()  # type: ignore[operator]
        assert await queue.push_and_wait(first) == "mail sent to alice"
        namespace["user"] = "bob"  # rebind, then push for bob
        with pytest.raises(KeyConflictError, match="'greet'"):
            await queue.push_and_wait(namespace["greet"]())  # type: ignore[operator]
        with pytest.raises(KeyConflictError):
            await queue.push(namespace["greet"]())  # type: ignore[operator]
    assert namespace["sent"] == ["alice"]


async def test_issue9_one_key_for_a_lambda_over_a_loop_variable_conflicts_at_once() -> None:
    """Issue 9 item 13: ``lambda: i`` under one key for i = 0, 1, 2 gives
    [0, KeyConflictError, KeyConflictError] (it gave [0, 0, KeyConflictError])."""
    results: list[object] = []
    async with Queue() as queue:
        for i in range(3):
            try:
                results.append(await queue.push_and_wait(Job("k", lambda: i)))  # noqa: B023
            except KeyConflictError as exc:
                results.append(type(exc))
    assert results == [0, KeyConflictError, KeyConflictError]


async def test_issue9_a_running_claimer_keeps_the_fingerprint_it_was_pushed_with() -> None:
    """The same order while the first job still runs: the join for bob is refused, a join
    for alice is accepted."""
    gate = Gate()
    namespace: dict[str, object] = {"gate": gate, "Job": Job}
    cell = (
        "async def send(u):\n"
        "    await gate()\n"
        "    return u\n"
        "def greet():\n"
        "    return Job('greet', lambda: send(user))\n"
    )
    exec(compile(cell, "<cell-1>", "exec"), namespace)
    greet = namespace["greet"]
    async with Queue() as queue:
        namespace["user"] = "alice"
        running = asyncio.ensure_future(queue.push_and_wait(greet()))  # type: ignore[operator]
        await gate.started.wait()
        namespace["user"] = "bob"
        with pytest.raises(KeyConflictError):
            await queue.push(greet())  # type: ignore[operator]
        namespace["user"] = "alice"
        assert isinstance(await queue.push(greet()), InFlight)  # type: ignore[operator]
        gate.release.set()
        async with asyncio.timeout(BOUND):
            assert await running == "alice"
    assert gate.calls == 1


async def test_issue9_a_named_function_over_a_rebound_global_in_a_new_job_conflicts() -> None:
    """The same function object in a new Job is compared by the values it reads now."""
    namespace: dict[str, object] = {}
    exec(compile("async def greet():\n    return f'sent to {user}'\n", "<cell>", "exec"), namespace)
    greet = namespace["greet"]
    async with Queue() as queue:
        namespace["user"] = "alice"
        assert await queue.push_and_wait(Job("greet", greet)) == "sent to alice"  # type: ignore[arg-type]
        namespace["user"] = "bob"
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("greet", greet))  # type: ignore[arg-type]


async def test_issue9_the_very_job_object_that_claimed_a_key_is_the_same_call() -> None:
    """Documented: pushing the Job object that claimed the key again is a cache hit by
    identity, even if the values its function reads were rebound since (nothing is derived:
    the hot path). A new Job for the new values is compared and refused."""
    namespace: dict[str, object] = {}
    exec(compile("async def greet():\n    return user\n", "<cell-1>", "exec"), namespace)
    namespace["user"] = "alice"
    job = Job("greet", namespace["greet"])  # type: ignore[arg-type]
    async with Queue() as queue:
        assert await queue.push_and_wait(job) == "alice"
        namespace["user"] = "bob"
        assert await queue.push_and_wait(job) == "alice"
        with pytest.raises(KeyConflictError):
            await queue.push_and_wait(Job("greet", namespace["greet"]))  # type: ignore[arg-type]


def test_fingerprints_of_big_values_are_bounded_and_fall_back_to_identity() -> None:
    """A huge captured value is not walked at every push: past MAX_ITEMS items it counts by
    identity (another equal list is another call), and so does everything past MAX_VALUES."""

    def over(value: object) -> object:
        return lambda: value

    big = list(range(MAX_ITEMS + 1))
    assert derive_fingerprint(over(big)) == derive_fingerprint(over(big))
    assert derive_fingerprint(over(big)) != derive_fingerprint(over(list(big)))
    small = list(range(MAX_ITEMS))
    assert derive_fingerprint(over(small)) == derive_fingerprint(over(list(small)))
    wide = [list(range(MAX_ITEMS)) for _ in range(MAX_VALUES // MAX_ITEMS + 1)]
    assert derive_fingerprint(over(wide)) == derive_fingerprint(over(wide))
    copy = [list(part) for part in wide]
    assert derive_fingerprint(over(wide)) != derive_fingerprint(over(copy))


def test_arrays_and_data_frames_count_by_identity_without_building_their_repr() -> None:
    """Taken at every claim now, a fingerprint must not format a DataFrame each time."""

    class Frame:
        reprs = 0

        def __init__(self, rows: int) -> None:
            self.rows = rows

        def __dataframe__(self) -> object:
            return self

        def __repr__(self) -> str:
            Frame.reprs += 1
            return f"Frame({self.rows})"

    class Array(Frame):
        def __array__(self) -> object:
            return self

    def over(value: object) -> object:
        return lambda: value

    for kind in (Frame, Array):
        a, b = kind(3), kind(3)
        assert derive_fingerprint(over(a)) == derive_fingerprint(over(a))
        assert derive_fingerprint(over(a)) != derive_fingerprint(over(b))
    assert Frame.reprs == 0


class _Deps:
    """What a job's fn may hold (a client, an agent's deps): default repr, so by identity."""

    async def run(self, text: str) -> str:
        return text


def _ask(deps: _Deps) -> Job:
    async def ask() -> str:  # on the loop: no worker thread's frame may still hold deps
        return await deps.run("hi")

    return Job("ask", ask)


async def test_a_settled_job_lets_go_of_its_fn_and_what_it_holds() -> None:
    """Issue 12: a completed key keeps the fingerprint of its call, not the callable nor the
    objects it used (without key_ttl or max_keys); the same call is still answered from the
    key while they live, and another call is refused after they are gone. (A failed key
    lets go of its job too, but its failure keeps the exception, whose traceback holds the
    frames it went through.)"""
    deps = _Deps()
    alive = weakref.ref(deps)
    async with Queue() as queue:
        assert await queue.push_and_wait(_ask(deps)) == "hi"
        assert await queue.push_and_wait(_ask(deps)) == "hi"  # the same call: cached
        del deps
        gc.collect()
        assert alive() is None  # the completed key does not hold it
        with pytest.raises(KeyConflictError, match="'ask' is already used for another call"):
            await queue.push_and_wait(_ask(_Deps()))  # another object: another call
        assert queue.state("ask") == Completed("hi")


async def test_a_released_key_still_knows_its_job_object_and_names_its_first_call() -> None:
    job = Job("mail", functools.partial(send_mail, "alice"))
    async with Queue() as queue:
        assert await queue.push_and_wait(job) == "mail sent to alice"
        sent.clear()
        assert await queue.push_and_wait(job) == "mail sent to alice"  # by identity
        assert sent == []
        del job
        gc.collect()  # the Job and its partial are gone: the message reads the fingerprint
        message = f"first a call of {__name__}.send_mail with arguments ('alice',)"
        with pytest.raises(KeyConflictError, match=re.escape(message)):
            await queue.push_and_wait(Job("mail", functools.partial(send_mail, "bob")))
