"""Issue 9 item 3: `cancel` wakes every wait of the workflow's run at once.

A run waits in a retry's backoff, in a poll while another worker holds the step, and for an
interrupted body to stop before the next attempt. A cancel ends each of them immediately: the
run returns cancelled within a real-time bound while the fake clock has not moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from queue_helpers import until

from agentq.clock import FakeClock
from agentq.queue import Queue
from agentq.retry import Backoff, RetryPolicy
from agentq.store import DurableStore
from agentq.workflows import RunResult, RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

BOUND = 5.0
"""Real seconds any wait of these tests may take (the fake clock never moves on its own)."""


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


async def recorded(store: DurableStore, workflow_id: str, kind: str) -> None:
    """Yield to the loop until an event of `kind` is in the log (bounded)."""
    for _ in range(10_000):
        if kind in await kinds(store, workflow_id):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{kind} was never recorded")


async def test_cancel_during_an_hour_long_backoff_returns_at_once(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def down(ctx: StepContext) -> None:
        raise ConnectionError("gateway down")

    hourly = RetryPolicy(3, Backoff.fixed(3600))
    wf = Workflow("wf-backoff", [StepDef("charge", down, retry=hourly)])
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(BOUND):
        await recorded(engine.store, wf.id, "RetryScheduled")
        await clock.wait_for_sleepers(1)  # the backoff
    start = clock.time()
    assert await engine.cancel(wf.id, "operator stopped it")
    async with asyncio.timeout(BOUND):
        result = await run
    assert result.status is RunStatus.CANCELLED and result.reason == "operator stopped it"
    assert clock.time() == start  # no time had to pass
    assert clock.sleepers == 0  # and nothing is left sleeping
    ks = await kinds(engine.store, wf.id)
    assert ks.count("StepStarted") == 1 and ks[-1] == "WorkflowCancelled"


async def test_a_remote_cancel_during_a_backoff_is_seen_within_a_third_of_the_lease(
    store: DurableStore, clock: FakeClock
) -> None:
    """Finding 3: a cancel from another engine during an hour-long backoff ends the owner's
    run within lease_ttl / 3 of the clock (no lease is held then, the run claims again)."""

    async def down(ctx: StepContext) -> None:
        raise ConnectionError("gateway down")

    hourly = RetryPolicy(3, Backoff.fixed(3600))
    wf = Workflow("wf-remote-backoff", [StepDef("s", down, retry=hourly)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a = WorkflowEngine(qa, store, worker_id="a", lease_ttl=30.0, clock=clock)
        b = WorkflowEngine(qb, store, worker_id="b", lease_ttl=30.0, clock=clock)
        run = asyncio.ensure_future(a.run(wf))
        async with asyncio.timeout(BOUND):
            await recorded(store, wf.id, "RetryScheduled")
            await clock.wait_for_sleepers(1)  # the backoff
        start = clock.time()
        assert await b.cancel(wf.id, "elsewhere")
        await clock.advance(10.0)  # a third of the lease, not the hour
        async with asyncio.timeout(BOUND):
            result = await run
    assert result.status is RunStatus.CANCELLED and result.reason == "elsewhere"
    assert clock.time() - start == 10.0


async def test_cancel_while_polling_a_step_another_worker_holds(
    store: DurableStore, clock: FakeClock
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def held(ctx: StepContext) -> str:
        started.set()
        await release.wait()
        return "done"

    wf = Workflow("wf-poll", [StepDef("s", held)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a = WorkflowEngine(qa, store, worker_id="a", clock=clock)
        b = WorkflowEngine(qb, store, worker_id="b", clock=clock, poll_interval=3600.0)
        run_a = asyncio.ensure_future(a.run(wf))
        async with asyncio.timeout(BOUND):
            await started.wait()
        run_b = asyncio.ensure_future(b.run(wf))
        async with asyncio.timeout(BOUND):
            await clock.wait_for_sleepers(2)  # a's lease renewer and b's hour-long poll
        start = clock.time()
        assert await b.cancel(wf.id, "no longer needed")
        async with asyncio.timeout(BOUND):
            result_b = await run_b
        assert result_b.status is RunStatus.CANCELLED and clock.time() == start
        release.set()  # a's body finishes; its result is refused: the workflow is cancelled
        async with asyncio.timeout(BOUND):
            result_a = await run_a
        assert result_a.status is RunStatus.CANCELLED
    assert "StepCompleted" not in await kinds(store, wf.id)


async def test_cancel_while_waiting_for_a_timed_out_thread_returns_at_once(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    """The wait for a body that outlived its timeout (before attempt 2) is woken too; the
    thread is never overlapped: a later run in this engine waits for it."""
    entered = threading.Event()
    leave = threading.Event()
    attempts: list[int] = []

    def stuck(ctx: StepContext) -> str:
        attempts.append(ctx.attempt)
        entered.set()
        assert leave.wait(BOUND)
        return "late"

    wf = Workflow("wf-thread", [StepDef("s", stuck, timeout=1.0, retry=RetryPolicy(2))])
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(BOUND):
        assert await asyncio.to_thread(entered.wait, BOUND)
        await clock.wait_for_sleepers(2)  # the timeout and the lease renewer
        await clock.advance(1.0)  # attempt 1 times out; the thread goes on
        await until(lambda: engine.tables()["attempts"] == 0)  # the run waits for the thread
    start = clock.time()
    assert await engine.cancel(wf.id, "stop")
    async with asyncio.timeout(BOUND):
        result = await run
    assert result.status is RunStatus.CANCELLED and clock.time() == start
    assert engine.tables()["lingering"] == 1  # the thread, until it returns
    leave.set()
    async with asyncio.timeout(BOUND):
        await until(lambda: engine.tables()["lingering"] == 0)
    assert attempts == [1]


async def test_a_retry_after_a_remote_cancel_never_runs_beside_the_old_body(
    store: DurableStore, clock: FakeClock
) -> None:
    """Finding 2: a cancel from another engine (here c, which holds no run) and a retry leave
    the step fenced by the revoked lease: b, serving, takes it up only once a's old body has
    stopped (a's renewal saw the cancel, its body returned, a handed the lease back)."""
    bodies: list[str] = []
    running = 0
    overlapped = False
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def slow(ctx: StepContext) -> str:
        nonlocal running, overlapped
        running += 1
        overlapped = overlapped or running > 1
        bodies.append(ctx.workflow_id)
        entered.set()
        try:
            while not leave.is_set():  # ignores cancellation until told to stop
                with contextlib.suppress(asyncio.CancelledError):
                    await leave.wait()
            return "done"
        finally:
            running -= 1

    wf = Workflow("wf-fence", [StepDef("s", slow)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb, Queue(clock=clock) as qc:
        a = WorkflowEngine(qa, store, worker_id="a", lease_ttl=30.0, clock=clock)
        b = WorkflowEngine(qb, store, worker_id="b", lease_ttl=30.0, clock=clock,
                           poll_interval=1.0)
        c = WorkflowEngine(qc, store, worker_id="c", lease_ttl=30.0, clock=clock)
        run_a = asyncio.ensure_future(a.run(wf))
        try:
            result = await _cancel_retry_elsewhere(b, c, wf, clock, entered, leave, bodies)
            async with asyncio.timeout(BOUND):  # a's run may be in a poll on the fake clock
                while not run_a.done():
                    await clock.advance(1.0)
                    await asyncio.sleep(0.01)
        finally:
            leave.set()
    assert result.status is RunStatus.COMPLETED and len(bodies) == 2 and not overlapped
    assert (await run_a).status is RunStatus.COMPLETED  # a's run saw b's outcome


async def _cancel_retry_elsewhere(
    b: WorkflowEngine,
    c: WorkflowEngine,
    wf: Workflow,
    clock: FakeClock,
    entered: asyncio.Event,
    leave: asyncio.Event,
    bodies: list[str],
) -> RunResult:
    async with asyncio.timeout(BOUND):
        await entered.wait()
    assert await c.cancel(wf.id, "elsewhere")
    await c.store.retry_workflow(wf.id, None, clock.time())  # as `agentq retry` does
    run_b = asyncio.ensure_future(b.run(wf))
    for _ in range(12):  # a's renewal (10 s) sees the cancel; b polls every second
        await clock.advance(1.0)
        for _ in range(50):
            await asyncio.sleep(0)
    assert bodies == [wf.id] and not run_b.done()  # b waits: the old body still runs
    leave.set()  # the old body returns; a hands the lease back
    async with asyncio.timeout(BOUND):
        while not run_b.done():
            await clock.advance(1.0)
            await asyncio.sleep(0.01)
    return await run_b
