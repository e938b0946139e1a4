"""A job's one attempt ends the same whether its lane worker awaits the body itself (the
direct path, `agentq.queue.attempt`) or `run_attempts` runs it (a timeout, a retry policy, a
subscriber... take that path)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.outcomes import Completed, Failed, FailureReason
from agentq.queue import Job, LaneConfig, Priority, Queue, dispatch
from agentq.queue.attempt import COMPLETED_NONE


class Limited(Exception):
    retry_after = 30.0


async def returns_value() -> str:
    return "out"


async def returns_none() -> None:
    return None


async def raises_value_error() -> None:
    raise ValueError("bad")


async def raises_cancelled() -> None:
    raise asyncio.CancelledError  # nobody cancelled it: a failure of the job


async def rate_limited() -> None:
    raise Limited("slow down")


def build(body: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: body()  # a lambda that only builds a coroutine: also direct


BODIES = [returns_value, returns_none, raises_value_error, raises_cancelled, rate_limited]


async def outcome_of(body: Callable[[], Any], *, direct: bool, wrap: bool) -> tuple[Any, ...]:
    clock = FakeClock()
    queue = Queue({Priority.MEDIUM: LaneConfig(permits=1)}, clock=clock)
    try:
        fn = build(body) if wrap else body
        job = Job("k", fn) if direct else Job("k", fn, timeout=3600)  # a timeout: run_attempts
        accepted = await queue.push(job)
        outcome = await accepted.handle  # type: ignore[union-attr]
        lane = queue.stats()[Priority.MEDIUM]
        if isinstance(outcome, Failed):
            shape: tuple[Any, ...] = ("failed", outcome.reason, outcome.error.type,
                                      type(outcome.exception))
        else:
            shape = ("completed", outcome.output)
        return (*shape, lane.completed, lane.failed, lane.paused_until)
    finally:
        await queue.close()


@pytest.mark.parametrize("wrap", [False, True])
@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__)
async def test_the_direct_path_ends_an_attempt_as_run_attempts_does(
    body: Callable[[], Any], wrap: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    general = await outcome_of(body, direct=False, wrap=wrap)
    taken: list[str] = []
    original = dispatch.run_attempts

    async def spy(*args: Any) -> None:
        taken.append("run_attempts")
        await original(*args)

    monkeypatch.setattr(dispatch, "run_attempts", spy)
    assert await outcome_of(body, direct=True, wrap=wrap) == general
    assert taken == []  # the worker awaited the body itself


async def test_a_direct_job_that_returns_none_shares_one_outcome() -> None:
    async with Queue() as queue:
        first = await (await queue.push(Job("a", returns_none))).handle  # type: ignore[union-attr]
        second = await (await queue.push(Job("b", returns_none))).handle  # type: ignore[union-attr]
    assert first is second is COMPLETED_NONE and first == Completed(None)


async def test_a_direct_body_cancelled_while_it_runs_is_failed_cancelled() -> None:
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    async with Queue() as queue:
        accepted = await queue.push(Job("slow", slow))
        handle = accepted.handle  # type: ignore[union-attr]
        await started.wait()
        assert handle.cancel()
        outcome = await handle
        await handle.stopped()
        assert isinstance(outcome, Failed) and outcome.reason is FailureReason.CANCELLED
        assert await queue.push_and_wait(Job("slow", returns_value)) == "out"  # key free


async def test_a_direct_body_ignoring_its_cancel_keeps_the_cancelled_outcome() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> str:
        started.set()
        while True:
            try:
                await release.wait()
                return "late"
            except asyncio.CancelledError:
                continue  # ignores the cancel

    async with Queue() as queue:
        handle = (await queue.push(Job("s", stubborn))).handle  # type: ignore[union-attr]
        await started.wait()
        assert handle.cancel()
        assert isinstance(await handle, Failed)
        release.set()
        await handle.stopped()  # its body returned: the output was discarded
        assert isinstance(handle.outcome, Failed)
        assert queue.state("s") == handle.outcome
