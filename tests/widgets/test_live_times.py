"""Live times move between events, from the last rows and the clock, with no store read
(review 14 #2)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.store import StepState
from agentq.widgets import Dashboard, EventTimeline, StepTable
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine

from .fakes import T0, FakeEngine, ReadStore

K = EventKind
TICK = 0.25


def leased(store: ReadStore, wf: str = "run") -> None:
    store.event(K.WORKFLOW_STARTED, wf, at=T0)
    store.event(K.STEP_STARTED, wf, (0, "slow"), attempt=1, at=T0)
    store.step(wf, 0, "slow", StepState.LEASED, attempt=1, worker_id="w1",
               lease_expires_at=T0 + 30, started_at=T0)


def lease_text(html: str) -> str:
    found = re.search(r"expires in [^<]*", html)
    assert found is not None
    return found.group(0)


async def tick(clock: FakeClock) -> None:
    async with asyncio.timeout(2):
        await clock.wait_for_sleepers(1)
    await clock.advance(TICK)


async def test_the_dashboard_redraws_live_times_about_once_a_second_without_reading() -> None:
    clock = FakeClock(T0 + 1)
    store = ReadStore()
    leased(store)
    dash = Dashboard(FakeEngine(store, clock), interval=TICK, clock=clock).start()
    await tick(clock)
    first, timeline = lease_text(dash.steps.html.value), dash.timeline.html.value
    reads = {k: v for k, v in store.calls.items() if k != "last_seq"}
    for _ in range(12):  # 3 s of idle ticks
        await tick(clock)
    assert lease_text(dash.steps.html.value) != first  # counts down: 29 s -> 26 s
    assert dash.timeline.html.value != timeline
    assert {k: v for k, v in store.calls.items() if k != "last_seq"} == reads  # no reads
    await dash.stop()


async def test_standalone_views_redraw_at_most_once_a_second() -> None:
    clock = FakeClock(T0 + 1)
    store = ReadStore()
    leased(store)
    table = StepTable(store, clock=clock)
    timeline = EventTimeline(store, clock=clock)
    await table.refresh()
    await timeline.refresh()
    await clock.advance(0.5)
    assert not await table.refresh() and not await timeline.refresh()  # not due yet
    await clock.advance(0.6)
    assert await table.refresh() and await timeline.refresh()
    assert "expires in 28" in lease_text(table.html.value)


async def test_the_detail_deadline_counts_down_between_events(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "send?", timeout=60)

    assert (await engine.run(Workflow("w", [StepDef("ask", ask)]))).status == "waiting"
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show("w", step=0)
    before = dash.detail.html.value
    await clock.advance(5)
    await dash.refresh()  # no new event: an idle tick
    assert dash.detail.html.value != before
    assert "(in 55 s)" in dash.detail.html.value  # whole seconds, as the approval panel
    await dash.stop()
