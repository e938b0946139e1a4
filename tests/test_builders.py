"""Which plain callables run on the loop: only lambdas whose code shows they build a coroutine."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from agentq.errors import JobFailed
from agentq.queue import Job, Queue
from agentq.queue.builders import LIMIT, Builders, callee_of


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, counting the calls sent to a thread."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.hops = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.hops += 1
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
async def threads() -> AsyncIterator[CountingExecutor]:
    executor = CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    yield executor
    executor.shutdown(wait=True)


async def fetch(x: Any, scale: int = 1) -> Any:
    return ("async", x * scale)


def blocking_tool(x: Any) -> Any:
    time.sleep(0.01)
    return ("sync", x)


def tool_with_its_own_loop(x: Any) -> Any:
    return asyncio.run(fetch(x))  # works in a thread, fails on a running loop


def call_tool(name: str, x: Any) -> Any:
    """A dispatcher: a coroutine for one tool, a blocking call for the others."""
    return fetch(x) if name == "fetch" else tool_with_its_own_loop(x)


async def test_a_lambda_around_an_async_call_runs_on_the_loop(
    threads: CountingExecutor,
) -> None:
    async with Queue() as queue:
        outputs = [await queue.push_and_wait(Job(f"k{i}", lambda i=i: fetch(i))) for i in range(3)]
        assert outputs == [("async", 0), ("async", 1), ("async", 2)]
        # keyword arguments and constants, and a callee held by a closure cell
        assert await queue.push_and_wait(Job("kw", lambda: fetch(2, scale=3))) == ("async", 6)

        def make(f: Callable[..., Any], x: int) -> Callable[[], Any]:
            return lambda: f(x)

        assert await queue.push_and_wait(Job("cell", make(fetch, 5))) == ("async", 5)
        assert await queue.push_and_wait(Job("param", lambda g=fetch: g(7))) == ("async", 7)
    assert threads.hops == 0


async def test_a_dispatcher_to_sync_and_async_tools_always_runs_in_a_thread(
    threads: CountingExecutor,
) -> None:
    # Review 12: the same lambda once returned a coroutine, then ran a tool that starts its
    # own event loop on the running loop and failed. It must keep working as in a thread.
    async with Queue() as queue:
        for i, name in enumerate(["fetch", "sync", "fetch", "sync"]):
            got = await queue.push_and_wait(Job(f"d{i}", lambda n=name, x=i: call_tool(n, x)))
            assert got == ("async", i)
    assert threads.hops == 4


async def test_forms_that_may_run_code_before_the_coroutine_stay_in_a_thread(
    threads: CountingExecutor,
) -> None:
    class Client:
        async def fetch(self, x: int) -> Any:
            return ("method", x)

    client = Client()
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("attr", lambda: client.fetch(1))) == ("method", 1)
        assert await queue.push_and_wait(Job("call", lambda: fetch(abs(-2)))) == ("async", 2)
        assert threads.hops == 2
        # the documented fast forms of the same calls
        assert await queue.push_and_wait(Job("p", functools.partial(client.fetch, 3))) == (
            "method", 3,
        )
        assert threads.hops == 2


async def test_a_callee_rebound_to_a_blocking_def_goes_to_a_thread(
    threads: CountingExecutor,
) -> None:
    tools: dict[str, Callable[..., Any]] = {"tool": fetch}

    def make() -> Callable[[], Any]:
        tool = tools["tool"]
        return lambda: tool(1)

    async with Queue() as queue:
        assert await queue.push_and_wait(Job("a", make())) == ("async", 1)
        assert threads.hops == 0
        tools["tool"] = blocking_tool  # same code object, another callee: looked up per job
        assert await queue.push_and_wait(Job("b", make())) == ("sync", 1)
        assert threads.hops == 1


async def test_functions_sharing_a_decorators_wrapper_run_where_their_kind_says(
    threads: CountingExecutor,
) -> None:
    # Review 12: one wrapper code object for an async and a blocking function.
    def traced(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            return fn(*a, **k)

        return wrapper

    search = traced(fetch)
    read = traced(blocking_tool)
    async with Queue() as queue:
        assert await queue.push_and_wait(Job("s", functools.partial(search, 1))) == ("async", 1)
        assert await queue.push_and_wait(Job("r", functools.partial(read, 2))) == ("sync", 2)
    assert threads.hops == 2  # a plain wrapper is a plain callable: a thread each time


async def test_a_lambda_around_an_async_generator_function_fails_its_job() -> None:
    async def numbers() -> AsyncIterator[int]:
        yield 1

    async with Queue() as queue:
        with pytest.raises(JobFailed) as info:
            await queue.push_and_wait(Job("g", lambda: numbers()))
    assert isinstance(info.value.__cause__, TypeError)


async def test_a_lambda_whose_async_callee_raises_fails_its_job(
    threads: CountingExecutor,
) -> None:
    async def broken(x: int) -> None:
        raise ValueError(f"bad {x}")

    async with Queue() as queue:
        with pytest.raises(JobFailed) as info:
            await queue.push_and_wait(Job("e", lambda: broken(1)))
    assert isinstance(info.value.__cause__, ValueError)
    assert threads.hops == 0


def test_callee_of_reads_the_one_form() -> None:
    x = 1

    def f(*a: Any, **k: Any) -> None:
        return None

    assert callee_of((lambda: fetch(x)).__code__) == ("LOAD_GLOBAL", "fetch")
    assert callee_of((lambda: f(x, 2, k=x)).__code__) == ("LOAD_DEREF", "f")
    assert callee_of((lambda y=1: fetch(y)).__code__) == ("LOAD_GLOBAL", "fetch")
    assert callee_of((lambda g=fetch: g(x)).__code__) == ("LOAD_FAST", "g")
    for other in [
        lambda: None,
        lambda: fetch(x) or 1,
        lambda: fetch(f(x)),
        lambda: fetch(x.real),
        lambda: f(*[x]),
        lambda: [fetch(x)][0],
        lambda y=fetch: y(x).send,
    ]:
        assert callee_of(other.__code__) == ("", ""), other


def test_the_table_is_bounded() -> None:
    builders = Builders()
    codes = [compile(f"lambda: fetch({i})", "<test>", "eval") for i in range(LIMIT + 5)]
    for code in codes:
        fn = eval(code, {"fetch": fetch})
        assert builders.builds_coroutine(fn)
    assert len(builders) <= LIMIT
