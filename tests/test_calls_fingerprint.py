"""The fingerprint a durable call stores with its key (`stored_fingerprint`).

It must tell two calls apart by what they pass, and must not change as a tool's own state
(a cache, a log, a counter) changes while calls run: else a retried or recovered step would
find its own recorded calls "recorded for another call". And its fast path (no derivation of
the functions a call only uses, a cache for calls over plain values) must give exactly the
digest of the rule computed the slow way.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentq.queue.fingerprint import _Walk
from agentq.queue.fingerprint_stored import _CACHE, _derived_v2, _portable, stored_fingerprint
from agentq.queue.fingerprint_value import _Value

portable_fingerprint = stored_fingerprint  # the name these tests were written with

outbox: list[str] = []
"""A module-level log a tool appends to (its state)."""


async def send(to: str) -> str:
    outbox.append(to)
    return to


def make_tool() -> Any:
    cache: dict[str, str] = {}
    calls = []

    async def lookup(word: str) -> str:
        calls.append(word)
        cache.setdefault(word, word.upper())
        return cache[word]

    return lookup, cache, calls


def test_what_a_call_passes_tells_calls_apart() -> None:
    fp = portable_fingerprint
    assert fp(functools.partial(send, "alice")) == fp(functools.partial(send, "alice"))
    assert fp(functools.partial(send, "alice")) != fp(functools.partial(send, "bob"))
    alice, bob = "alice", "bob"
    assert fp(lambda: send(alice)) != fp(lambda: send(bob))
    assert fp(functools.partial(send, "alice")) != fp(functools.partial(make_tool, "alice"))
    assert fp(functools.partial(send, 1)) != fp(functools.partial(send, 1.0))
    assert fp(send, ("mail", "alice")) == fp(make_tool, ("mail", "alice"))  # explicit wins


def test_a_tools_own_state_is_not_part_of_the_call() -> None:
    lookup, cache, calls = make_tool()
    direct = portable_fingerprint(functools.partial(lookup, "agentq"))
    wrapped = portable_fingerprint(lambda: lookup("agentq"))
    used = portable_fingerprint(functools.partial(send, "alice"))
    cache.update({"a": "A", "b": "B"})  # the tool's closure fills up as calls run
    calls.extend(["a", "b"])
    outbox.extend(["x", "y"])  # and so does a module-level log a tool writes to
    assert portable_fingerprint(functools.partial(lookup, "agentq")) == direct
    assert portable_fingerprint(lambda: lookup("agentq")) == wrapped
    assert portable_fingerprint(functools.partial(send, "alice")) == used
    assert portable_fingerprint(functools.partial(lookup, "other")) != direct


# ---------------------------------------------------------------- the fast path equals the rule

MODE = "fast"
"""A module-level value a lambda reads (rebound by a test)."""


def _used(layers: tuple[Any, ...], given: bool) -> tuple[Any, ...]:
    """Derived layers with each function the call only uses reduced to its name."""
    out: list[Any] = []
    for layer in layers:
        if layer[0] == "function" and not given:
            out.append(("function", layer[1], layer[2]))
        elif layer[0] == "function":
            out.append(layer[:4] + tuple(_deep(part) for part in layer[4:]))
        else:
            given = False  # a partial or a bound method: its function is only used
            out.append(_deep(layer))
    return tuple(out)


def _deep(part: Any) -> Any:
    if isinstance(part, _Value):
        form = part.form
        if type(form) is tuple and form and form[0] == "call":
            return _Value(part.obj, ("call", _used(form[1], given=False)))
        return _Value(part.obj, _deep(form))
    if type(part) is tuple:
        return tuple(_deep(p) for p in part)
    return part


def reference(fn: Any, version: str = "v2") -> str:
    """The rule, computed the slow way (never from the cache). Format v1: derive everything,
    then reduce the functions the call only uses to their names, then drop what is not
    portable; format v2: the portable form of the whole walk."""
    if version == "v1":
        # the stored walk (format v1): a class by its name, a rebound closure variable left out
        form = ["derived", _portable(_used(_Walk(stored=True).derive(fn, 0), given=True))]
    else:
        form = ["derived", _derived_v2(fn)]
    text = json.dumps(form, ensure_ascii=True, separators=(",", ":"))
    return f"{version}:" + hashlib.sha256(text.encode("ascii")).hexdigest()


class Color(Enum):
    RED = 1


@dataclass
class Point:
    x: int
    y: int


class Client:
    async def fetch(self, url: str) -> str:
        return url


def callables() -> list[Any]:
    """Calls of every shape: each value kind, each wrapper, cycles and empty cells."""
    out: list[Any] = []
    for value in (1, True, 1.0, None, "s", b"b", 0.0, -0.0, math.nan, 2j, Color.RED, [1, "a"],
                  {"b": [1.0], "a": {2}}, (1, (2, 3)), frozenset({"x"}), Point(1, 2),
                  object(), send, functools.partial(send, "x"), Client().fetch, Color, math):
        out.append(functools.partial(send, value))
        out.append(functools.partial(send, to=value))
        out.append(lambda value=value: send(value))
        out.append(lambda: send(value))  # noqa: B023 - the value at this point is the call
    out.append(Client().fetch)
    out.append(functools.partial(Client().fetch, "u"))
    out.append(lambda: send(MODE))
    out.append(lambda *, to="kw": send(to))

    def recursive() -> Any:
        return recursive

    out.append(recursive)

    never: int  # a variable of this scope that is never bound: an empty cell

    def before_binding() -> Any:
        return never  # noqa: F821 - on purpose: never bound

    out.append(before_binding)
    out.append(send)
    out.append(make_tool()[0])
    # functions the call only uses, with closures (format v2 walks them)
    out.append(functools.partial(make_tool()[0], "x"))  # a cache and a log: by type
    out.append(lambda: make_tool()[0]("x"))
    out.append(functools.partial(make_greeter("alice"), "x"))
    out.append(functools.partial(make_greeter("bob"), "x"))
    out.append(functools.partial(make_greeter(1.5), "x"))
    out.append(lambda: make_greeter("alice")("x"))
    out.append(functools.partial(before_binding_user(), "x"))
    return out


def make_greeter(name: Any) -> Any:
    count = 0

    async def greeter(word: str) -> str:
        nonlocal count
        count += 1
        return f"{word} {name} {count} {MODE}"

    return greeter


def before_binding_user() -> Any:
    async def user(word: str) -> Any:
        return later  # noqa: F821 - on purpose: an empty cell of a function only used

    later: int  # never bound
    return user


def test_the_fast_path_gives_the_digest_of_the_rule() -> None:
    global MODE
    for version in ("v1", "v2"):
        for fn in callables():
            expected = reference(fn, version)
            assert portable_fingerprint(fn, None, version) == expected, fn
            assert portable_fingerprint(fn, None, version) == expected, fn  # from the cache
    first = portable_fingerprint(lambda: send(MODE))
    MODE = "rebound"  # a notebook cell rebinds the global the lambda reads
    try:
        assert portable_fingerprint(lambda: send(MODE)) != first
        assert portable_fingerprint(lambda: send(MODE)) == reference(lambda: send(MODE))
    finally:
        MODE = "fast"


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.binary(max_size=3),
    st.floats(allow_nan=True), st.sampled_from([0, 0.0, -0.0, False, 1, 1.0, True]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=8,
)


@given(value=values, other=values)
def test_cached_digests_never_mix_two_calls_up(value: Any, other: Any) -> None:
    for fn in (
        functools.partial(send, value),
        functools.partial(send, other),  # equal to value (1 == 1.0 == True) yet another call
        lambda: send(value),
        lambda: send(other),
    ):
        for version in ("v1", "v2"):
            assert portable_fingerprint(fn, None, version) == reference(fn, version)
            assert portable_fingerprint(fn, None, version) == reference(fn, version)


def test_a_call_over_plain_values_is_answered_from_the_cache() -> None:
    user = "alice"
    call = lambda: send(user)  # noqa: E731 - the shape ctx.call is given
    key = _CACHE.key(call, True)
    assert key is not None
    first = portable_fingerprint(call)
    assert _CACHE.get(key) == first
    assert portable_fingerprint(lambda: send(user)) == first  # a new lambda, the same key
    for v2 in (False, True):
        assert _CACHE.key(functools.partial(send, "alice"), v2) is not None
        for not_plain in (1.0, [1], {"a": 1}, object()):
            assert _CACHE.key(functools.partial(send, not_plain), v2) is None
        outbox_reader = lambda: send(outbox[-1])  # noqa: E731 - reads a module-level list
        # v2 keys a module-level list by its type, as its stored form counts it
        assert (_CACHE.key(outbox_reader, v2) is None) is not v2
        assert portable_fingerprint(outbox_reader) == reference(outbox_reader)
