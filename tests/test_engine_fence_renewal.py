"""A body a remote cancel could not stop keeps its step fenced for as long as it runs.

Review A #1: the engine whose attempt a cancel from elsewhere revoked keeps renewing the
revoked lease (the fence) while the body still runs, however long past ``lease_ttl``, and
hands it back (`LeaseReleased`) once the body has returned: a retry run by another engine
starts the step only then, so the two bodies never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import pytest

from agentq.clock import FakeClock
from agentq.queue import Queue
from agentq.store import CANCEL_HANDED_BACK_REASON, DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

BOUND = 5.0
"""Real seconds any wait of these tests may take (the fake clock never moves on its own)."""

TTL = 6.0


async def settle(clock: FakeClock, seconds: float) -> None:
    """Advance the fake clock one second at a time, letting the loop (and threads) run."""
    for _ in range(int(seconds)):
        await clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("kind", ["thread", "async ignoring cancellation"])
async def test_a_retry_elsewhere_waits_for_a_body_that_outlives_the_lease(
    store: DurableStore, clock: FakeClock, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    entered = threading.Event()
    leave = threading.Event()
    leave_async = asyncio.Event()
    lock = threading.Lock()
    running = 0
    overlapped = False
    bodies: list[str] = []

    def enter() -> None:
        nonlocal running, overlapped
        with lock:
            running += 1
            overlapped = overlapped or running > 1
            bodies.append("body")
        entered.set()

    def leaving() -> None:
        nonlocal running
        with lock:
            running -= 1

    def blocked(ctx: StepContext) -> str:  # a thread: a cancel cannot stop it
        enter()
        try:
            leave.wait(BOUND * 4)
            return "done"
        finally:
            leaving()

    async def stubborn(ctx: StepContext) -> str:  # catches CancelledError and goes on
        enter()
        try:
            while not leave_async.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await leave_async.wait()
            return "done"
        finally:
            leaving()

    body = blocked if kind == "thread" else stubborn
    wf = Workflow("wf-long-fence", [StepDef("s", body)])
    caplog.set_level(logging.INFO, logger="agentq")
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a = WorkflowEngine(qa, store, worker_id="a", lease_ttl=TTL, clock=clock)
        b = WorkflowEngine(qb, store, worker_id="b", lease_ttl=TTL, clock=clock,
                           poll_interval=1.0)
        run_a = asyncio.ensure_future(a.run(wf))
        try:
            async with asyncio.timeout(BOUND):
                await asyncio.to_thread(entered.wait, BOUND)
            assert await b.cancel(wf.id, "from b")
            await store.retry_workflow(wf.id, None, clock.time())
            run_b = asyncio.ensure_future(b.run(wf))
            await settle(clock, 5 * TTL)  # far past the lease the cancel revoked
            assert bodies == ["body"] and not run_b.done()  # b waits on a's fence
            events = await store.load_events(wf.id)
            assert [str(e.kind) for e in events].count("StepStarted") == 1
            assert "LeaseReleased" not in [str(e.kind) for e in events]
            step = (await store.step_rows(wf.id))[0]
            assert step.worker_id == "a" and step.lease_expires_at is not None
            assert step.lease_expires_at > clock.time()  # renewed by a
        finally:
            leave.set()
            leave_async.set()
        async with asyncio.timeout(BOUND):
            while not run_b.done():
                await settle(clock, 1)
            result = await run_b
            while not run_a.done():
                await settle(clock, 1)
            await run_a
        assert result.status is RunStatus.COMPLETED and bodies == ["body", "body"]
        assert not overlapped
        events = await store.load_events(wf.id)
        released = [e for e in events if str(e.kind) == "LeaseReleased"]
        assert [(e.worker_id, e.data["reason"]) for e in released] == [
            ("a", CANCEL_HANDED_BACK_REASON)]
        assert [str(e.kind) for e in events].index("LeaseReleased") < [
            i for i, e in enumerate(events) if str(e.kind) == "StepStarted"][-1]
    told = [r for r in caplog.records if "the workflow was cancelled (" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.INFO  # once, not per renewal
    assert not any("another worker took it over" in r.getMessage() for r in caplog.records)
    assert not any("lease is gone" in r.getMessage() for r in caplog.records)
