"""The lane workers: a worker lives while it holds a permit, and never parks (issue 9 item 14).

A notebook re-runs its setup cell (``queue = Queue()``): the old queue is dropped without
`close`. Its workers must not stay pending for ever, to be destroyed later by the garbage
collector with "Task was destroyed but it is pending!".
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from queue_helpers import BOUND, Gate, settle

from agentq.queue.jobs import Job
from agentq.queue.lanes import LaneConfig, Priority
from agentq.queue.queue import Queue


async def echo(value: object) -> object:
    return value


def agentq_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("agentq-")]


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the running loop's exception handler during the test."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        yield errors
    finally:
        loop.set_exception_handler(None)


def setup_cell() -> Queue:
    """A notebook's setup cell: a queue with every lane, used once."""
    return Queue({p: LaneConfig(capacity=10, permits=2) for p in Priority})


async def use(queue: Queue, run: int) -> list[object]:
    jobs = [
        Job(f"{p}-{run}-{i}", functools.partial(echo, (p, i)), p)
        for p in Priority
        for i in range(3)
    ]
    return list(await asyncio.gather(*(queue.push_and_wait(job) for job in jobs)))


async def test_issue9_rerunning_a_setup_cell_leaves_no_pending_worker_to_destroy(
    loop_errors: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """One loop, like a kernel: a queue created, used, dropped (no close), collected, and a
    new one created and used; nothing is destroyed pending, no agentq task is left."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    async with asyncio.timeout(BOUND):
        queue = setup_cell()
        assert len(await use(queue, 1)) == 9
        queue = setup_cell()  # the cell runs again: the first queue is dropped unclosed
        gc.collect()
        await settle()
        assert len(await use(queue, 2)) == 9
        del queue
        gc.collect()
        await settle()
    assert agentq_tasks() == []
    assert loop_errors == []
    assert "Task was destroyed" not in caplog.text


async def test_a_queue_dropped_with_work_in_flight_finishes_it_then_leaves_nothing(
    loop_errors: list[dict[str, Any]],
) -> None:
    """Dropped while one job runs and two wait: they run, then the workers end."""
    gate = Gate()
    queue: Queue | None = Queue({Priority.MEDIUM: LaneConfig(capacity=5, permits=1)})
    assert queue is not None
    handles = [(await queue.push(Job(f"k{i}", gate))) for i in range(3)]
    await gate.started.wait()
    queue = None
    gc.collect()
    gate.release.set()
    async with asyncio.timeout(BOUND):
        for accepted in handles:
            await accepted.handle  # type: ignore[union-attr]
        await settle()
    assert gate.calls == 3
    gc.collect()
    await settle()
    assert agentq_tasks() == []
    assert loop_errors == []


async def test_a_worker_ends_when_its_lane_is_dry_and_a_new_one_starts_for_the_next_job() -> None:
    async with Queue({Priority.HIGH: LaneConfig(capacity=5, permits=2)}) as queue:
        assert await queue.push_and_wait(Job("a", lambda: echo("a"), Priority.HIGH)) == "a"
        await settle()
        assert agentq_tasks() == []  # nothing parked between bursts
        gate = Gate()
        first = await queue.push(Job("b", gate, Priority.HIGH))
        await gate.started.wait()
        assert [t.get_name() for t in agentq_tasks()] == ["agentq-high-worker"]
        gate.release.set()
        async with asyncio.timeout(BOUND):
            await first.handle  # type: ignore[union-attr]
        assert queue.stats()[Priority.HIGH].running == 0
