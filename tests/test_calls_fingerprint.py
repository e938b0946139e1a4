"""The fingerprint a durable call stores with its key (`portable_fingerprint`).

It must tell two calls apart by what they pass, and must not change as a tool's own state
(a cache, a log, a counter) changes while calls run: else a retried or recovered step would
find its own recorded calls "recorded for another call".
"""

from __future__ import annotations

import functools
from typing import Any

from agentq.queue import portable_fingerprint

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
