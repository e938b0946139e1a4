"""Two engines draining one run group on one store (as two processes would): a member the
other engine finished or holds is skipped quietly, with no warning and no traceback.

(Two real processes, with a shared rate limit, are in ``test_groups_drain_processes.py``.)
"""

from __future__ import annotations

import asyncio
import logging
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
    WorkflowDef,
    WorkflowEngine,
)
from agentq.clock import FakeClock
from agentq.store import DurableStore, WorkflowRow

pytestmark = pytest.mark.timeout(60)

ITEMS = {"a": 1, "b": 2, "c": 3}


def square(runs: Counter[str], gates: dict[str, asyncio.Event] | None = None) -> WorkflowDef:
    """Squares its input; counts its runs by key; a gated key waits for its gate."""

    async def body(ctx: StepContext) -> Any:
        key = ctx.workflow_id.split("/")[-1]
        runs[key] += 1
        if gates is not None and key in gates:
            await gates[key].wait()
        return ctx.input * ctx.input

    return WorkflowDef("square", [StepDef("square", body)])


@pytest.fixture
async def other(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    """A second engine ("w2") on the same store: another process's."""
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=4)}, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w2", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING]


async def test_members_another_engine_finished_after_the_read_are_skipped_quietly(
    engine: WorkflowEngine,
    other: WorkflowEngine,
    store: DurableStore,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentq")
    runs: Counter[str] = Counter()
    definition = square(runs)
    other.register(definition)
    for key, value in ITEMS.items():  # stored open: what the other process will run
        await other.start(definition, f"g/{key}", value)
    stale = await store.group_members("g")  # read now: every member open
    assert len(stale) == 3 and not any(r.state.closed for r in stale)
    for key in ITEMS:  # the other process finishes them all
        assert (await other.run(f"g/{key}")).status is RunStatus.COMPLETED
    # this engine's read of the members comes before those ends (a race between processes)
    real = store.group_members
    behind = True

    async def members(group_id: str) -> list[WorkflowRow]:
        return list(stale) if behind else await real(group_id)

    monkeypatch.setattr(store, "group_members", members)
    group = engine.group("g")
    assert await group.submit(definition, ITEMS) is True  # runs each "open" member
    behind = False
    ended = {m.key: m.output async for m in group.results()}
    for key in ITEMS:  # the background runs end with the stored result, quietly
        result = await engine.run(f"g/{key}")
        assert result.status is RunStatus.COMPLETED and result.outputs == (ITEMS[key] ** 2,)
    await settle()
    assert ended == {k: v * v for k, v in ITEMS.items()}
    assert runs == Counter(ITEMS.keys())  # each body once, in the other engine
    assert loud(caplog) == []
    assert any("has ended already" in r.getMessage() for r in caplog.records)


async def test_a_member_another_engine_holds_is_waited_for_quietly(
    engine: WorkflowEngine,
    other: WorkflowEngine,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentq")
    runs: Counter[str] = Counter()
    gates = {"a": asyncio.Event()}
    definition = square(runs, gates)
    other.register(definition)
    await other.start(definition, "g/a", ITEMS["a"])
    held = asyncio.ensure_future(other.run("g/a"))  # its body waits on the gate: leased
    await until(lambda: runs["a"] == 1)
    group = engine.group("g")
    await group.submit(definition, ITEMS)
    ends = group.results().__aiter__()
    done = {(await ends.__anext__()).key, (await ends.__anext__()).key}
    assert done == {"b", "c"}  # run here; "a" is the other engine's
    gates["a"].set()
    assert (await held).status is RunStatus.COMPLETED
    await clock.advance(engine.poll_interval)  # this engine's run of "a" claims again
    assert (await ends.__anext__()).key == "a"
    assert (await engine.run("g/a")).status is RunStatus.COMPLETED
    assert runs == Counter(ITEMS.keys())
    assert loud(caplog) == []
