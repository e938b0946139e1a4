"""`Admission` (``agentq/workflows/admission.py``): an engine holds at most its lane's permits
of steps claimed at once; the other runs wait before claiming, holding nothing, and their
steps stay ready for any engine. A cancel ends such a wait, a run nested in a step body
takes no slot, a graceful stop lets no waiting run claim, and no slot is ever left held."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from queue_helpers import settle, until

from agentq import (
    LaneConfig,
    Priority,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.clock import FakeClock
from agentq.store import DurableStore, StepState

pytestmark = pytest.mark.timeout(60)

PERMITS = 2


@pytest.fixture
async def narrow(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    """An engine ("w1") whose MEDIUM lane has 2 permits."""
    lanes = {Priority.MEDIUM: LaneConfig(capacity=50, permits=PERMITS)}
    async with Queue(lanes, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


@pytest.fixture
async def other(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    """A second engine ("w2") on the same store: another process's."""
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w2", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


def gated(runs: Counter[str], gate: asyncio.Event) -> WorkflowDef:
    """One step that counts its runs by workflow id, then waits for `gate`."""

    async def body(ctx: StepContext) -> Any:
        runs[ctx.workflow_id] += 1
        await gate.wait()
        return ctx.input

    return WorkflowDef("gated", [StepDef("wait", body)])


async def leased(store: DurableStore, ids: list[str]) -> dict[str, str | None]:
    """The worker holding each workflow's first step, or None if it is not leased."""
    out: dict[str, str | None] = {}
    for wid in ids:
        row = (await store.step_rows(wid))[0]
        out[wid] = row.worker_id if row.state is StepState.LEASED else None
    return out


async def test_an_engine_claims_no_more_steps_than_its_permits(
    narrow: WorkflowEngine, other: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    runs: Counter[str] = Counter()
    gate = asyncio.Event()
    definition = gated(runs, gate)
    other.register(definition)
    ids = [f"job-{i}" for i in range(6)]
    for i, wid in enumerate(ids):
        await narrow.start(definition, wid, i)
        narrow.run_soon(wid)
    await until(lambda: sum(runs.values()) == PERMITS)
    await settle()
    holders = await leased(store, ids)
    assert list(holders.values()).count("w1") == PERMITS  # the rest is not claimed
    assert list(holders.values()).count(None) == len(ids) - PERMITS
    assert narrow.queue.stats()[Priority.MEDIUM].queued == 0  # nothing claimed sits waiting
    # the other engine (process) takes the ready ones while this one's permits are busy
    free = [wid for wid, holder in holders.items() if holder is None]
    taken = [asyncio.ensure_future(other.run(wid)) for wid in free]
    await until(lambda: sum(runs.values()) == len(ids))
    gate.set()
    assert {(await t).status for t in taken} == {RunStatus.COMPLETED}
    await clock.advance(narrow.poll_interval)  # this engine's runs of those: done elsewhere
    results = [await narrow.run(wid) for wid in ids]
    assert {r.status for r in results} == {RunStatus.COMPLETED}
    assert runs == Counter(ids)  # each body once, in one engine or the other
    assert narrow._driver.tables()["admitted"] == 0


async def test_a_cancel_ends_a_run_waiting_for_a_slot(
    narrow: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    gate = asyncio.Event()
    definition = gated(runs, gate)
    ids = [f"job-{i}" for i in range(PERMITS + 1)]
    for i, wid in enumerate(ids):
        await narrow.start(definition, wid, i)
        narrow.run_soon(wid)
    await until(lambda: sum(runs.values()) == PERMITS)
    waiting = next(wid for wid, holder in (await leased(store, ids)).items() if holder is None)
    assert await narrow.cancel(waiting) is True
    result = await narrow.run(waiting)  # ends at once: its run never claimed
    assert result.status is RunStatus.CANCELLED and runs[waiting] == 0
    gate.set()
    assert {(await narrow.run(w)).status for w in ids if w != waiting} == {RunStatus.COMPLETED}
    assert narrow._driver.tables()["admitted"] == 0


async def test_a_run_nested_in_a_step_body_takes_no_slot(
    store: DurableStore, clock: FakeClock
) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=5, permits=1)}
    async with Queue(lanes, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w1", clock=clock)
        inner = Workflow("inner", [StepDef("i", lambda ctx: "inner done")])

        async def outer_body(ctx: StepContext) -> Any:
            result = await engine.run(inner)  # the only permit is this body's
            return result.outputs[-1]

        async with asyncio.timeout(10):
            result = await engine.run(Workflow("outer", [StepDef("o", outer_body)]))
        assert result.status is RunStatus.COMPLETED and result.outputs == ("inner done",)
        assert engine._driver.tables()["admitted"] == 0
        await engine.close()


async def test_a_halted_engine_lets_no_waiting_run_claim(
    narrow: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    gate = asyncio.Event()
    definition = gated(runs, gate)
    ids = [f"job-{i}" for i in range(PERMITS + 1)]
    for i, wid in enumerate(ids):
        await narrow.start(definition, wid, i)
        narrow.run_soon(wid)
    await until(lambda: sum(runs.values()) == PERMITS)
    narrow._driver.halted = True  # serve's graceful stop
    gate.set()  # the running attempts end and give their slots back
    await until(lambda: narrow._driver.parked.is_set())
    await settle()
    holders = await leased(store, ids)
    assert list(holders.values()).count(None) == len(ids)  # the waiting one claimed nothing
    assert sum(runs.values()) == PERMITS
    assert narrow._driver.tables()["admitted"] == 0


async def test_children_a_step_fans_out_wait_for_slots_too(
    narrow: WorkflowEngine, store: DurableStore
) -> None:
    runs: Counter[str] = Counter()
    gate = asyncio.Event()
    kid = gated(runs, gate)
    keys = [f"k{i}" for i in range(5)]

    async def fan_out(ctx: StepContext) -> Any:
        return await ctx.children(kid, {key: i for i, key in enumerate(keys)})

    parent = asyncio.ensure_future(narrow.run(Workflow("parent", [StepDef("fan", fan_out)])))
    await until(lambda: sum(runs.values()) == PERMITS)
    await settle()
    holders = await leased(store, [f"parent/{key}" for key in keys])
    assert list(holders.values()).count("w1") == PERMITS  # the others wait, unclaimed
    assert list(holders.values()).count(None) == len(keys) - PERMITS
    gate.set()
    result = await parent
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({key: i for i, key in enumerate(keys)},)
    assert runs == Counter(f"parent/{key}" for key in keys)
    assert narrow._driver.tables()["admitted"] == 0
