"""Retention as users meet it: ``engine.serve(retention=...)`` on the fake clock, and a sweep
while a serving engine works on other workflows.

The store's own rules (what a sweep removes and keeps) are the contract suite's
(``tests/store/test_sweep.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

import agentq.store.rules.sweep as rules_sweep
from agentq import StepContext, StepDef, Workflow, WorkflowDef, WorkflowEngine
from agentq.clock import FakeClock
from agentq.errors import StoreError
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import Claimed, DurableStore, SweepReport, WorkflowState
from agentq.workflows.retention import sweep_interval

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True),
]


class Serving:
    """One engine on the store and the fake clock, serving; stopped at the end."""

    def __init__(self, store: DurableStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.gate = asyncio.Event()
        self.queue = Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=2)}, clock=clock)
        self.engine = WorkflowEngine(
            self.queue, store, worker_id="w1", lease_ttl=30.0, clock=clock
        )

        async def quick(ctx: StepContext) -> Any:
            return ctx.input

        async def held(ctx: StepContext) -> Any:
            await self.gate.wait()
            return "held"

        self.quick = WorkflowDef("quick", [StepDef("a", quick), StepDef("b", quick)])
        self.held = WorkflowDef("held", [StepDef("a", held)])
        self.engine.register(self.quick)
        self.engine.register(self.held)
        self.task: asyncio.Task[None] | None = None

    def serve(self, **options: Any) -> None:
        self.task = asyncio.ensure_future(self.engine.serve(poll_interval=1.0, **options))

    async def tick(self, seconds: float) -> None:
        async with asyncio.timeout(20):
            await self.clock.wait_for_sleepers(1)
        await self.clock.advance(seconds)

    async def until(self, ids: list[str], state: WorkflowState | None) -> None:
        """Wait (bounded, yielding) until each of `ids` is in `state` (None: swept)."""
        async with asyncio.timeout(20):
            while True:
                rows = [await self.store.get_workflow(i) for i in ids]
                if all((r.state if r else None) is state for r in rows):
                    return
                await asyncio.sleep(0)

    async def close(self) -> None:
        self.gate.set()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        await self.queue.close()


@pytest.fixture
async def serving(store: DurableStore, clock: FakeClock) -> AsyncIterator[Serving]:
    made = Serving(store, clock)
    yield made
    await made.close()


async def test_serve_with_retention_sweeps_what_ended_longer_ago(serving: Serving) -> None:
    old = [f"old-{i}" for i in range(3)]
    for wid in old:
        await serving.engine.start(serving.quick, wid, 1)
    await serving.engine.start(serving.held, "held")
    serving.serve(retention=3600)
    await serving.until(old, WorkflowState.COMPLETED)
    ended = serving.clock.time()
    await serving.engine.cancel("held")
    await serving.tick(1800)
    await serving.engine.start(serving.quick, "new", 2)
    await serving.tick(1)  # the next poll
    await serving.until(["new"], WorkflowState.COMPLETED)
    await serving.engine.start(serving.held, "running")
    assert serving.clock.time() - ended < 3600
    while serving.clock.time() < ended + 3600 + sweep_interval(3600) + 1:
        await serving.tick(100)
    await serving.until(old, None)
    await serving.until(["held"], None)  # cancelled: swept too
    await serving.until(["new"], WorkflowState.COMPLETED)  # ended 1800 s later: kept
    row = await serving.store.get_workflow("running")
    assert row is not None and not row.state.closed


async def test_a_bad_retention_is_refused_before_serving(serving: Serving) -> None:
    for bad in (0, -1, float("inf"), float("nan"), True, "1d"):
        with pytest.raises(ValueError, match="retention must be a positive number"):
            await serving.engine.serve(retention=bad)  # type: ignore[arg-type]


async def test_a_failed_sweep_is_logged_and_serving_goes_on(
    serving: Serving, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried = asyncio.Event()

    async def broken(**_: Any) -> SweepReport:
        tried.set()
        raise StoreError("disk on fire")

    monkeypatch.setattr(serving.store, "sweep", broken)
    caplog.set_level(logging.WARNING, "agentq")
    await serving.engine.start(serving.quick, "wf", 1)
    serving.serve(retention=60)
    await serving.until(["wf"], WorkflowState.COMPLETED)
    async with asyncio.timeout(20):
        await tried.wait()
    await asyncio.sleep(0)  # the sweep's task logs as it ends
    assert "sweeping ended workflows failed: disk on fire" in caplog.text


async def test_a_sweep_while_a_serving_engine_works_on_other_workflows(
    serving: Serving, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many short transactions of a sweep interleave with the claims and records of the
    runs in progress: every run ends as it would have, and only what had ended goes."""
    monkeypatch.setattr(rules_sweep, "SWEEP_BATCH", 7)
    store, t0 = serving.store, serving.clock.time()
    ended = [f"ended-{i}" for i in range(60)]
    for wid in ended:
        await store.start_workflow(wid, ["a"], None, t0 - 100)
        claimed = await store.claim_step(wid, 0, "old", 10.0, t0 - 100)
        assert isinstance(claimed, Claimed)
        await store.complete_step(claimed.execution, wid, t0 - 100)
    served = [f"served-{i}" for i in range(12)]
    for i, wid in enumerate(served):
        await serving.engine.start(serving.quick, wid, i)
    serving.serve()
    report = await store.sweep(ended_before=t0)
    await serving.until(served, WorkflowState.COMPLETED)
    assert report == SweepReport(workflows=60, events=60 * 4, calls=0)
    assert [w.workflow_id for w in await store.workflows()] == served
    results = [await serving.engine.run(wid) for wid in served]
    assert [r.outputs for r in results] == [(i, i) for i in range(12)]



def _plain(wid: str, *names: str) -> Workflow:
    async def body(ctx: StepContext) -> str:
        return f"{ctx.workflow_id}:{len(names)}"

    return Workflow(wid, [StepDef(name, body) for name in names])


async def test_an_engine_runs_a_swept_id_again_as_a_new_workflow(serving: Serving) -> None:
    engine, store = serving.engine, serving.store
    first = await engine.run(_plain("again", "one"))
    assert first.outputs == ("again:1",)
    last = await store.last_seq()
    assert (await store.sweep(ended_before=serving.clock.time() + 1)).workflows == 1
    second = await engine.run(_plain("again", "two", "three"))
    assert second.outputs == ("again:2", "again:2")
    assert min(e.seq for e in await store.load_events("again")) > last
