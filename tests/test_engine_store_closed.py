"""A store (or a queue) closed under a live engine, as a notebook user does it: no `async with`.

The user builds a queue, a store and an engine in cells, starts runs in the background
(`run_soon`), then closes the store while they are in flight; the kernel's loop goes on.
Each attempt's next lease renewal finds the store closed (`StoreClosedError`) and interrupts
its body; every run ends with `StoreClosedError` (what a joiner gets); the engine logs one
line for all of them (WARNING, no traceback; the others at DEBUG), and nothing else is
printed: no "Task exception was never retrieved", no traceback per run. What was recorded
before the close is all in the file, and once the leases expired a new engine's `recover`
finishes every run, its durable call answered from the log. A queue closed under the engine
likewise: each run ends with `QueueClosed` after handing its lease back, in one logged line.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path

import pytest
from queue_helpers import until

from agentq.clock import FakeClock
from agentq.errors import QueueClosed, StoreClosedError, StoreError
from agentq.queue import Job, Queue
from agentq.store import DurableStore, MemoryStore, SqliteStore, StepState
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

BOUND = 10.0
"""Real seconds any wait of these tests may take."""
TTL = 30.0
IDS = ("nb-0", "nb-1", "nb-2")


class Body:
    """Step "a": a durable call, then (the first time) a wait the close interrupts."""

    def __init__(self) -> None:
        self.calls = 0
        self.waiting = 0
        self.cancelled = 0
        self.all_waiting = asyncio.Event()
        self.first = True

    def call(self) -> str:
        self.calls += 1
        return "called"

    async def __call__(self, ctx: StepContext) -> str:
        value: str = await ctx.call(Job(f"c-{ctx.workflow_id}", self.call))
        if self.first:
            self.waiting += 1
            if self.waiting == len(IDS):
                self.all_waiting.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return value


def _unhandled_and_logs(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    """Collect what the running loop's exception handler gets (a "Task exception was never
    retrieved" among them) in the returned list, and capture agentq's logs from DEBUG."""
    unhandled: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unhandled.append(context))
    caplog.set_level(logging.DEBUG, logger="agentq")
    return unhandled


def workflows(body: Body) -> list[Workflow]:
    return [Workflow(wid, [StepDef("a", body), StepDef("b", lambda ctx: "b")]) for wid in IDS]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_closing_the_store_under_a_notebook_engine_is_quiet_and_loses_nothing(
    kind: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "nb.db"
    unhandled = _unhandled_and_logs(caplog)
    body = Body()
    # cell 1: no `async with` anywhere
    queue = Queue(clock=clock)
    store: DurableStore = MemoryStore() if kind == "memory" else await SqliteStore.open(db)
    engine = WorkflowEngine(queue, store, worker_id="nb", lease_ttl=TTL, clock=clock)
    # cell 2: runs in the background, and one the cell awaits
    for wf in workflows(body)[1:]:
        engine.run_soon(wf)
    awaited = asyncio.ensure_future(engine.run(workflows(body)[0]))
    async with asyncio.timeout(BOUND):
        await body.all_waiting.wait()
        await clock.wait_for_sleepers(1)  # the lease renewals
    # cell 3: the store is closed under the engine; the kernel's loop goes on
    await store.close()
    await clock.advance(TTL / 3)  # each attempt's next renewal finds the store closed
    async with asyncio.timeout(BOUND):
        with pytest.raises(StoreClosedError, match="closed"):
            await awaited
        await until(lambda: not engine.tables()["runs"])
    assert (body.calls, body.cancelled) == (len(IDS), len(IDS))  # bodies interrupted
    with pytest.raises(StoreClosedError):
        await engine.run(IDS[1])
    gc.collect()
    await asyncio.sleep(0)
    assert unhandled == []  # no "Task exception was never retrieved"
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    assert loud[0].exc_info is None and loud[0].name == "agentq"
    said = loud[0].getMessage()
    assert "stopped: its store was closed under it" in said and "recover()" in said
    quiet = [r for r in caplog.records if "store was closed under it" in r.getMessage()]
    assert [r.levelno for r in quiet] == [logging.WARNING] + [logging.DEBUG] * (len(IDS) - 2)
    assert issubclass(StoreClosedError, StoreError)  # `except StoreError` still catches it
    await queue.close()
    await engine.close()  # harmless afterwards: nothing left to hand back
    if kind == "memory":
        return
    # a new kernel cell: the file kept everything recorded before the close
    async with SqliteStore(db) as again, Queue(clock=clock) as q2:
        for wid in IDS:
            kinds = [str(e.kind) for e in await again.load_events(wid)]
            assert kinds == ["WorkflowStarted", "StepStarted", "CallStarted", "CallCompleted"]
            row = (await again.step_rows(wid))[0]
            assert (row.state, row.worker_id) == (StepState.LEASED, "nb")
        body.first = False
        await clock.advance(TTL)  # the closed engine's leases expire
        fresh = WorkflowEngine(q2, again, worker_id="nb2", lease_ttl=TTL, clock=clock)
        for wf in workflows(body):
            fresh.register_workflow(wf)
        report = await recover(fresh)
        assert sorted(report.resumed) == list(IDS) and len(report.recovered) == len(IDS)
        results = await report.wait()
        assert {r.status for r in results.values()} == {RunStatus.COMPLETED}
        assert body.calls == len(IDS)  # each call answered from the log
        await fresh.close()


async def test_closing_the_queue_under_a_notebook_engine_is_quiet_and_hands_leases_back(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    unhandled = _unhandled_and_logs(caplog)
    body = Body()
    queue = Queue(clock=clock)
    store = await SqliteStore.open(tmp_path / "nb.db")
    engine = WorkflowEngine(queue, store, worker_id="nb", lease_ttl=TTL, clock=clock)
    for wf in workflows(body)[1:]:
        engine.run_soon(wf)
    awaited = asyncio.ensure_future(engine.run(workflows(body)[0]))
    async with asyncio.timeout(BOUND):
        await body.all_waiting.wait()
        await queue.close(drain=False)  # a cell closes the queue under the engine
        with pytest.raises(QueueClosed):
            await awaited
        await until(lambda: not engine.tables()["runs"])
    assert body.cancelled == len(IDS)
    gc.collect()
    await asyncio.sleep(0)
    assert unhandled == []
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) == 1 and loud[0].exc_info is None, [r.getMessage() for r in loud]
    assert "stopped: its queue was closed under it" in loud[0].getMessage()
    for wid in IDS:  # handed back, not lost: the step is pending at once, no crash counted
        row = (await store.step_rows(wid))[0]
        assert (row.state, row.recoveries) == (StepState.PENDING, 0)
    body.first = False
    async with Queue(clock=clock) as again:
        fresh = WorkflowEngine(again, store, worker_id="nb2", lease_ttl=TTL, clock=clock)
        for wf in workflows(body):
            fresh.register_workflow(wf)
        results = await (await recover(fresh)).wait()
        assert {r.status for r in results.values()} == {RunStatus.COMPLETED}
        assert body.calls == len(IDS)
        await fresh.close()
    await engine.close()
    await store.close()


@pytest.mark.parametrize("pause", [0, 1, 2, 3])
async def test_a_verb_the_close_overtakes_raises_store_closed_error(
    tmp_path: Path, pause: int
) -> None:
    """A read (or write) started just before `close` whose connection closes under it raises
    `StoreClosedError`, not `StoreError("SQLite failed: ... closed database")` (review F4:
    `run_soon`, then closing the store, logged a traceback)."""
    store = await SqliteStore.open(tmp_path / "s.db")
    await store.start_workflow("w", ["a"], None, 0.0)
    reads = [asyncio.ensure_future(store.get_workflow("w")) for _ in range(3)]
    reads += [asyncio.ensure_future(store.start_workflow(f"w{i}", ["a"], None, 0.0))
              for i in range(3)]  # and writes
    for _ in range(pause):
        await asyncio.sleep(0)
    await store.close()
    for read in reads:
        try:
            assert (await read) is not None  # done before the close
        except StoreError as exc:
            assert isinstance(exc, StoreClosedError), exc


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_serve_ends_with_store_closed_error_when_its_store_is_closed(
    kind: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A closed store is not a transient failure: `serve` ends with `StoreClosedError` at
    its next poll instead of logging a failed read per poll forever (review F5)."""
    caplog.set_level(logging.WARNING, logger="agentq")
    body = Body()
    store: DurableStore = (
        MemoryStore() if kind == "memory" else await SqliteStore.open(tmp_path / "s.db")
    )
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="nb", lease_ttl=TTL, clock=clock)
        definition = WorkflowDef("d", [StepDef("a", body), StepDef("b", lambda ctx: "b")])
        engine.register(definition)
        for wid in IDS:
            await engine.start(definition, wid)
        serving = asyncio.ensure_future(engine.serve(poll_interval=1.0))
        async with asyncio.timeout(BOUND):
            await body.all_waiting.wait()
            await store.close()  # a cell closes the store under the serving engine
            while not serving.done():
                await clock.advance(1.0)
            with pytest.raises(StoreClosedError, match=r"serve\(\) stops"):
                await serving
    assert body.cancelled == len(IDS)  # the runs were interrupted: the engine closed
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert failed == []
