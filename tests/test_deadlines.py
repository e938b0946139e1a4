"""`engine.start(..., run_at=, deadline=)` and `WorkflowDef(..., timeout=)` (issue 24), on a
fake clock: an instance is not run before `run_at`; a workflow that has not ended by its
deadline fails with ``WorkflowTimedOut``, whether its body runs (it is cancelled), it waits
or sleeps (failed by the live timer, `run`, `recover` or `serve`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from agentq.clock import FakeClock
from agentq.events import utc
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import DurableStore, SqliteStore, StepState, WorkflowState
from agentq.workflows import (
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
    recover,
)

pytestmark = pytest.mark.timeout(60)

LANES = {Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(LANES, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def state_of(store: DurableStore, workflow_id: str) -> WorkflowState:
    row = await store.get_workflow(workflow_id)
    assert row is not None
    return row.state


async def ended(store: DurableStore, workflow_id: str) -> None:
    """Wait (bounded, yielding to the loop and SQLite's thread) until the workflow ended."""
    for _ in range(5000):
        if (await state_of(store, workflow_id)).closed:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"workflow {workflow_id!r} did not end")


# ------------------------------------------------------------------ run_at


async def test_run_before_run_at_waits_until_then(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    ran: list[float] = []

    async def body(ctx: StepContext) -> str:
        ran.append(clock.time())
        return "ran"

    later = WorkflowDef("later", [StepDef("s", body)])
    at = clock.time() + 3600
    assert await engine.start(later, "later-1", run_at=utc(at))
    async with clock.autojump():
        result = await engine.run("later-1")
    assert result.status is RunStatus.COMPLETED
    assert ran == [pytest.approx(at, abs=0.01)]


async def test_serve_picks_up_a_run_at_instance_at_its_time(
    store: DurableStore, clock: FakeClock
) -> None:
    ran: list[float] = []

    async def body(ctx: StepContext) -> str:
        ran.append(clock.time())
        return "ran"

    later = WorkflowDef("later", [StepDef("s", body)])
    start = clock.time()
    async with Queue(LANES, clock=clock) as q:
        starter = WorkflowEngine(q, store, worker_id="starter", clock=clock)
        await starter.start(later, "later-2", run_at=start + 120)
        await starter.close()
    async with Queue(LANES, clock=clock) as q:
        server = WorkflowEngine(q, store, worker_id="server", clock=clock)
        server.register(later)
        serving = asyncio.ensure_future(server.serve(poll_interval=60.0))
        try:
            for _ in range(2):
                async with asyncio.timeout(20):
                    await clock.wait_for_sleepers(1)
                assert ran == []
                await clock.advance(60)
            await ended(store, "later-2")
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
    assert ran == [pytest.approx(start + 120)]


async def test_bad_run_at_and_deadline_are_refused_and_nothing_is_stored(
    engine: WorkflowEngine,
) -> None:
    d = WorkflowDef("d", [StepDef("s", lambda ctx: 1)])
    with pytest.raises(ValueError, match=r"run_at.*naive"):
        await engine.start(d, "x", run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match=r"deadline.*naive"):
        await engine.start(d, "x", deadline=datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="run_at"):
        await engine.start(d, "x", run_at="tomorrow")  # type: ignore[arg-type]
    assert await engine.store.get_workflow("x") is None
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            WorkflowDef("d", [StepDef("s", lambda ctx: 1)], timeout=bad)
    with pytest.raises(TypeError, match="timeout"):
        Workflow("w", [StepDef("s", lambda ctx: 1)], timeout="1h")  # type: ignore[arg-type]


async def test_far_future_times_are_refused_naming_them_and_nothing_is_stored(
    engine: WorkflowEngine,
) -> None:
    d = WorkflowDef("d", [StepDef("s", lambda ctx: 1)])
    with pytest.raises(ValueError, match=r"deadline 1e\+30"):
        await engine.start(d, "x", deadline=1e30)
    with pytest.raises(ValueError, match=r"run_at 1e\+30"):
        await engine.start(d, "x", run_at=1e30)
    with pytest.raises(ValueError, match="'long' timeout"):
        await engine.start(WorkflowDef("long", [StepDef("s", lambda ctx: 1)], timeout=1e300), "x")
    assert await engine.store.get_workflow("x") is None


# ------------------------------------------------------------------ deadlines


async def test_a_deadline_cancels_a_running_body_and_fails_the_workflow(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    cancelled = asyncio.Event()

    async def forever(ctx: StepContext) -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    wf = Workflow("busy", [StepDef("s", forever)], timeout=60)
    run = asyncio.ensure_future(engine.run(wf))
    for _ in range(5000):  # until the body runs under its lease
        rows = await engine.store.step_rows("busy")
        if rows and rows[0].state is StepState.LEASED and engine.running("busy"):
            break
        await asyncio.sleep(0)
    await clock.advance(60)
    async with asyncio.timeout(20):
        result = await run
    assert cancelled.is_set()
    assert result.status is RunStatus.FAILED
    assert (result.reason or "").startswith("WorkflowTimedOut: ")
    events = [str(e.kind) for e in await engine.store.load_events("busy")]
    assert events[-1] == "WorkflowFailed" and "StepCompleted" not in events


async def test_a_deadline_cancels_the_child_runs_and_interrupts_their_bodies(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    """A parent failed by its deadline cancels its open child (one transaction) and this
    engine interrupts the child's body at once, as a cancel of the parent does."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def hold(ctx: StepContext) -> None:
        started.set()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    child = WorkflowDef("held", [StepDef("hold", hold)])

    async def ask(ctx: StepContext) -> object:
        return await ctx.child(child, 1, key="c")

    await engine.start(WorkflowDef("asker", [StepDef("ask", ask)], timeout=60), "p")
    run = asyncio.ensure_future(engine.run("p"))
    async with asyncio.timeout(20):
        await started.wait()
    await clock.advance(60)
    async with asyncio.timeout(20):
        result = await run
        await cancelled.wait()  # interrupted here, not at a later lease renewal
    assert result.status is RunStatus.FAILED
    assert (result.reason or "").startswith("WorkflowTimedOut: ")
    row = await engine.store.get_workflow("p/c")
    assert row is not None and row.state is WorkflowState.CANCELLED
    assert row.reason == "its parent workflow 'p' timed out (its deadline passed)"
    assert (await engine.store.step_rows("p/c"))[0].state is StepState.FAILED
    kinds = [(e.workflow_id, str(e.kind)) for e in await engine.store.load_events()]
    i = kinds.index(("p", "WorkflowFailed"))
    assert kinds[i + 1] == ("p/c", "WorkflowCancelled")  # the same transaction


async def test_a_deadline_fails_a_sleeping_workflow_on_the_live_timer(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    runs = 0

    async def nap(ctx: StepContext) -> str:
        nonlocal runs
        runs += 1
        await ctx.sleep(3600)
        return "woke"

    d = WorkflowDef("nap", [StepDef("s", nap)], timeout=600)
    start = clock.time()
    await engine.start(d, "nap-1")
    assert (await engine.run("nap-1")).status is RunStatus.WAITING
    await clock.advance(599)
    assert await state_of(engine.store, "nap-1") is WorkflowState.WAITING
    await clock.advance(1)
    await ended(engine.store, "nap-1")
    result = await engine.run("nap-1")
    assert result.status is RunStatus.FAILED
    assert utc(start + 600).isoformat(timespec="milliseconds") in (result.reason or "")
    await clock.advance(3600)  # the sleep's timer finds it failed: nothing more happens
    kinds = [str(e.kind) for e in await engine.store.load_events("nap-1")]
    assert kinds.count("WaitTimedOut") == 0 and kinds[-1] == "WorkflowFailed"
    assert runs == 1


async def test_the_earlier_of_timeout_and_deadline_wins(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    d = WorkflowDef("d", [StepDef("s", lambda ctx: 1)], timeout=600)
    now = clock.time()
    await engine.start(d, "a", deadline=now + 60)
    await engine.start(d, "b", deadline=utc(now) + timedelta(hours=1))
    await engine.start(d, "c")
    deadlines = [(await engine.store.get_workflow(i)).deadline for i in "abc"]  # type: ignore[union-attr]
    assert deadlines == [now + 60, now + 600, now + 600]


async def test_a_deadline_passed_while_no_engine_lived_fails_on_recover(
    db_path: Path, clock: FakeClock
) -> None:
    async def ask(ctx: StepContext) -> object:
        return await ctx.wait_for_input("ok", "proceed?")  # no deadline of its own

    d = WorkflowDef("ask", [StepDef("s", ask)], timeout=60)
    async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="first", clock=clock)
        await engine.start(d, "ask-1")
        assert (await engine.run("ask-1")).status is RunStatus.WAITING
        await engine.close()
    later = FakeClock(clock.time() + 61)
    async with Queue(LANES, clock=later) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="second", clock=later)
        engine.register(d)
        results = await (await recover(engine)).wait()
        assert results["ask-1"].status is RunStatus.FAILED
        assert (results["ask-1"].reason or "").startswith("WorkflowTimedOut")
        await engine.close()


async def test_serve_fails_a_waiting_workflow_whose_deadline_passed(
    store: DurableStore, clock: FakeClock
) -> None:
    async def ask(ctx: StepContext) -> object:
        return await ctx.wait_for_input("ok", "proceed?")

    d = WorkflowDef("ask", [StepDef("s", ask)], timeout=90)
    async with Queue(LANES, clock=clock) as q:
        starter = WorkflowEngine(q, store, worker_id="starter", clock=clock)
        await starter.start(d, "ask-2")
        assert (await starter.run("ask-2")).status is RunStatus.WAITING
        await starter.close()  # its timer is gone with it
    async with Queue(LANES, clock=clock) as q:
        server = WorkflowEngine(q, store, worker_id="server", clock=clock)
        server.register(d)
        serving = asyncio.ensure_future(server.serve(poll_interval=60.0))
        try:
            for _ in range(2):
                async with asyncio.timeout(20):
                    await clock.wait_for_sleepers(1)
                await clock.advance(60)
            await ended(store, "ask-2")
        finally:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
    row = await store.get_workflow("ask-2")
    assert row is not None and row.state is WorkflowState.FAILED
    assert (row.reason or "").startswith("WorkflowTimedOut")


async def test_a_workflow_that_ends_in_time_is_not_failed_later(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    wf = Workflow("quick", [StepDef("s", lambda ctx: "done")], timeout=60)
    assert (await engine.run(wf)).status is RunStatus.COMPLETED
    await clock.advance(120)
    assert await state_of(engine.store, "quick") is WorkflowState.COMPLETED
    assert not await engine.store.time_out_workflow("quick", clock.time())
