"""A retry at once after a cancel from elsewhere: the revoked lease's holder hands it back.

Engine "a" runs a step whose body made a durable call; the workflow is cancelled from
another store handle (another process: ``agentq cancel``) and retried at once, before any
renewal of a's lease noticed the cancel (the fake clock moves by polls only). a's body then returns:
the store refuses its outcome (the workflow is closed, or the step pending again), and a
hands its revoked lease back, so `LeaseReleased` is in the log before the step starts again,
whoever retried it (a itself, another engine, or ``agentq retry``). Before the fix the
refused outcome dropped the hand-back and a claimed again over its own fence: the results
were right but the log never released lease #1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentq.clock import FakeClock
from agentq.queue import Job, Queue
from agentq.store import CANCEL_HANDED_BACK_REASON, DurableStore, MemoryStore, SqliteStore
from agentq.store.postgres.store import PostgresStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

BOUND = 10.0
"""Real seconds any wait of these tests may take."""
TTL = 30.0
POLL = 0.5
"""How often a run polls a step another worker holds (fake seconds)."""


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[DurableStore, DurableStore]]:
    """Two handles on one database, as two processes have (MemoryStore: one shared)."""
    if request.param == "memory":
        shared = MemoryStore()
        yield shared, shared
        await shared.close()
        return
    if request.param == "sqlite":
        first: DurableStore = await SqliteStore.open(tmp_path / "shared.db")
        second: DurableStore = await SqliteStore.open(tmp_path / "shared.db")
    else:
        target = request.getfixturevalue("pg_target")  # one schema, two handles
        first = await PostgresStore.open(target.dsn, schema=target.schema)
        second = await PostgresStore.open(target.dsn, schema=target.schema)
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()


class Body:
    """A step whose first attempt makes a durable call, then waits until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.attempts = 0
        self.waiting = asyncio.Event()
        self.release = asyncio.Event()

    def call(self) -> str:
        self.calls += 1
        return "called"

    async def __call__(self, ctx: StepContext) -> str:
        self.attempts += 1
        value: str = await ctx.call(Job("c", self.call))
        if self.attempts == 1:
            self.waiting.set()
            await self.release.wait()
        return value


@pytest.mark.parametrize("retried_by", ["holder", "other engine", "command line"])
async def test_a_retry_at_once_after_a_remote_cancel_logs_the_hand_back(
    stores: tuple[DurableStore, DurableStore], clock: FakeClock, retried_by: str
) -> None:
    sa, sb = stores
    start, body = clock.time(), Body()
    wf = Workflow(f"wf-{retried_by.replace(' ', '-')}", [StepDef("s", body)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a = WorkflowEngine(qa, sa, worker_id="a", lease_ttl=TTL, clock=clock, poll_interval=POLL)
        b = WorkflowEngine(qb, sb, worker_id="b", lease_ttl=TTL, clock=clock, poll_interval=POLL)
        first = asyncio.ensure_future(a.run(wf))
        async with asyncio.timeout(BOUND):
            await body.waiting.wait()
        assert await sb.cancel_workflow(wf.id, "from the shell", clock.time())
        if retried_by == "holder":
            retried = asyncio.ensure_future(a.retry(wf))
        elif retried_by == "other engine":
            retried = asyncio.ensure_future(b.retry(wf))
        else:
            await sb.retry_workflow(wf.id, None, clock.time())  # as `agentq retry` does
            retried = first
        await asyncio.sleep(0)
        body.release.set()
        async with asyncio.timeout(BOUND):
            # b polls while a's fence holds the step: move the clock by polls, never as far
            # as a's first renewal (the cancel is noticed only through the refused outcome)
            while not (retried.done() and first.done()):
                assert clock.time() < start + TTL / 3
                await asyncio.wait({retried, first}, timeout=0.05)
                await clock.advance(POLL)
            result = await retried
            await first
        await a.close()
        await b.close()
    assert result.status is RunStatus.COMPLETED and result.outputs == ("called",)
    assert (body.attempts, body.calls) == (2, 1)  # the call answered from the log
    events = await sa.load_events(wf.id)
    kinds = [str(e.kind) for e in events]
    assert kinds.count("LeaseReleased") == 1, kinds
    released = events[kinds.index("LeaseReleased")]
    assert released.data == {"lease_token": 1, "reason": CANCEL_HANDED_BACK_REASON}
    assert released.worker_id == "a"
    starts = [e for e in events if str(e.kind) == "StepStarted"]
    assert [e.data["lease_token"] for e in starts] == [1, 2]
    # every lease is ended in the log: #1 released (after the cancel), #2 completed
    assert kinds.index("WorkflowCancelled") < kinds.index("LeaseReleased")
    assert kinds.index("LeaseReleased") < events.index(starts[1])
    assert kinds[-2:] == ["StepCompleted", "WorkflowCompleted"]
    assert (await sa.step_rows(wf.id))[0].lease_expires_at is None
