"""Plain callables that return an awaitable: a thread the first time, the loop afterwards."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentq.errors import JobFailed
from agentq.queue import Job, Queue
from agentq.queue.builders import BLOCKING, LIMIT, Builders, code_of


async def where(log: list[int]) -> int:
    return threading.get_ident()


def lenient(queue: Queue, blocking: float = 60.0) -> Queue:
    """`queue`, whose calls count as blocking only beyond `blocking` seconds: the tests must
    not depend on how busy the machine is (a thread descheduled for 20 ms, the default,
    would count as blocking)."""
    queue._ledger.builders.blocking = blocking
    return queue


SLOW = 0.1  # the blocking threshold of the tests of blocking callables; they block 3x longer


def build(log: list[int], i: int) -> Callable[[], Any]:
    """A lambda that records the thread it is called in, then builds a coroutine."""
    return lambda: (log.append(threading.get_ident()), where(log))[1]


async def test_a_lambda_returning_a_coroutine_runs_in_a_thread_once_then_on_the_loop() -> None:
    loop_thread = threading.get_ident()
    calls: list[int] = []
    async with lenient(Queue()) as queue:
        for i in range(4):
            await queue.push_and_wait(Job(f"k{i}", build(calls, i)))
    assert calls[0] != loop_thread  # the first call: a worker thread
    assert calls[1:] == [loop_thread] * 3  # the same code object: called on the loop


async def test_the_memory_belongs_to_one_queue() -> None:
    loop_thread = threading.get_ident()
    calls: list[int] = []
    async with lenient(Queue()) as first:
        await first.push_and_wait(Job("a", build(calls, 0)))
        await first.push_and_wait(Job("b", build(calls, 1)))
    async with lenient(Queue()) as second:
        await second.push_and_wait(Job("a", build(calls, 2)))
    assert calls[1] == loop_thread
    assert calls[2] != loop_thread  # a new queue starts in a thread again


async def test_a_plain_def_that_blocks_keeps_running_in_a_thread() -> None:
    loop_thread = threading.get_ident()

    def blocking() -> int:
        threading.Event().wait(0.001)
        return threading.get_ident()

    async with Queue() as queue:
        threads = [await queue.push_and_wait(Job(f"b{i}", blocking)) for i in range(3)]
    assert loop_thread not in threads


async def test_a_remembered_callable_returning_a_plain_value_goes_back_to_a_thread() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def make(awaitable: bool) -> Callable[[], Any]:
        def fn() -> Any:
            seen.append(threading.get_ident())
            return where([]) if awaitable else "plain"

        return fn

    async with lenient(Queue()) as queue:
        await queue.push_and_wait(Job("1", make(True)))  # a thread
        await queue.push_and_wait(Job("2", make(True)))  # loop
        assert await queue.push_and_wait(Job("3", make(False))) == "plain"  # loop, forgotten
        await queue.push_and_wait(Job("4", make(True)))  # a thread again, remembered again
        await queue.push_and_wait(Job("5", make(True)))  # the loop
    assert [t == loop_thread for t in seen] == [False, True, True, False, True]


async def test_a_remembered_callable_that_raises_on_the_loop_fails_its_job() -> None:
    def make(fail: bool) -> Callable[[], Any]:
        def fn() -> Any:
            if fail:
                raise ValueError("bad argument")
            return where([])

        return fn

    async with lenient(Queue()) as queue:
        await queue.push_and_wait(Job("1", make(False)))
        with pytest.raises(JobFailed) as caught:
            await queue.push_and_wait(Job("2", make(True)))
        assert isinstance(caught.value.__cause__, ValueError)
        assert await queue.push_and_wait(Job("3", make(False))) == threading.get_ident()


async def test_a_remembered_callable_returning_an_async_generator_fails_its_job() -> None:
    async def agen() -> Any:
        yield 1

    def make(generator: bool) -> Callable[[], Any]:
        return lambda: agen() if generator else where([])

    async with lenient(Queue()) as queue:
        await queue.push_and_wait(Job("1", make(False)))
        with pytest.raises(JobFailed, match="async generator"):
            await queue.push_and_wait(Job("2", make(True)))


async def test_partials_and_bound_methods_of_plain_functions_are_remembered_too() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def start(i: int) -> Any:
        seen.append(threading.get_ident())
        return asyncio.sleep(0, i)

    class Client:
        def call(self) -> Any:
            seen.append(threading.get_ident())
            return asyncio.sleep(0, "m")

    async with lenient(Queue()) as queue:
        for i in range(2):
            assert await queue.push_and_wait(Job(f"p{i}", functools.partial(start, i))) == i
        client = Client()
        for i in range(2):
            assert await queue.push_and_wait(Job(f"m{i}", client.call)) == "m"
    assert [t == loop_thread for t in seen] == [False, True, False, True]


def test_code_of_names_the_code_that_decides_the_call() -> None:
    def fn() -> None:
        return None

    class Obj:
        def method(self) -> None:
            return None

        def __call__(self) -> None:
            return None

    assert code_of(fn) is fn.__code__
    assert code_of(functools.partial(fn)) is fn.__code__
    assert code_of(Obj().method) is Obj.method.__code__
    assert code_of(Obj()) is None
    assert code_of(print) is None


def test_the_default_threshold_is_far_above_building_a_coroutine() -> None:
    assert Builders().blocking == BLOCKING == 0.02


def test_the_table_is_bounded() -> None:
    builders = Builders()
    codes = [compile(f"x = {i}", "<t>", "exec") for i in range(LIMIT + 1)]
    for code in codes:
        builders.remember(code)
    assert len(builders) <= LIMIT
    assert codes[-1] in builders
    builders.forget(codes[-1])
    assert codes[-1] not in builders
    builders.forget(codes[-1])  # twice: harmless


def _block(seconds: float) -> None:
    """Hold the calling thread (what a blocking `def` does), without waiting for anything."""
    threading.Event().wait(seconds)


async def test_a_def_that_blocks_before_returning_an_awaitable_stays_in_threads() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def slow_builder() -> Any:
        seen.append(threading.get_ident())
        _block(SLOW * 3)
        return where([])

    async with lenient(Queue(), SLOW) as queue:
        for i in range(3):
            await queue.push_and_wait(Job(f"s{i}", slow_builder))
    assert loop_thread not in seen


async def test_a_remembered_callable_that_blocks_on_the_loop_goes_back_to_threads() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def make(block: bool) -> Callable[[], Any]:
        def fn() -> Any:
            seen.append(threading.get_ident())
            if block:
                _block(SLOW * 3)
            return where([])

        return fn

    async with lenient(Queue(), SLOW) as queue:
        await queue.push_and_wait(Job("1", make(False)))  # a thread, then remembered
        await queue.push_and_wait(Job("2", make(True)))  # the loop: blocked it, forgotten
        await queue.push_and_wait(Job("3", make(False)))  # a thread again
    assert [t == loop_thread for t in seen] == [False, True, False]
