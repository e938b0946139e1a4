"""The detail of a long agent run is capped and re-read at most about once a second
(review 14 #3)."""

from __future__ import annotations

from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.queue import Job
from agentq.widgets import detail as detail_module
from agentq.widgets.detail import DetailPane
from agentq.widgets.html.detail import CALLS_LISTED
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine


def chatty(n: int) -> Workflow:
    async def agent(ctx: StepContext) -> Any:
        for i in range(n):
            await ctx.call(Job(f"c{i:03d}", lambda i=i: i))
        return n

    return Workflow("agent", [StepDef("agent", agent)])


async def test_a_workflow_with_many_calls_lists_the_latest_and_says_how_many_more(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    n = CALLS_LISTED + 20
    await engine.run(chatty(n))
    pane = DetailPane(engine.store, clock)
    await pane.show("agent")
    assert "… 20 more calls (earlier) not shown" in pane.html.value
    assert 'data-key="c000"' not in pane.html.value
    assert f'data-key="c{n - 1:03d}"' in pane.html.value
    calls = [v for _, v in pane.items.options if v[0] == "call"]
    assert len(calls) == CALLS_LISTED and calls[0] == ("call", "c020")
    await pane.show("agent", step=0)
    assert "… 20 more calls (earlier) not shown" in pane.html.value
    await pane.show("agent", call="c000")  # an older call is still reachable from code
    assert pane.items.value == ("call", "c000") and 'data-kind="call"' in pane.html.value


async def test_a_live_workflow_is_re_read_at_most_once_a_second(
    engine: WorkflowEngine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await engine.run(chatty(2))
    pane = DetailPane(engine.store, clock)
    await pane.show("agent")
    reads: list[str] = []
    real = detail_module.refresh_detail

    async def counting(store: Any, snap: Any) -> Any:
        reads.append(snap.workflow.workflow_id)
        return await real(store, snap)

    monkeypatch.setattr(detail_module, "refresh_detail", counting)
    event = (99, 0.0, "agent")
    other = (100, 0.0, "someone-else")
    await pane.update([other])
    assert reads == []  # not about the workflow shown
    await pane.update([event])
    assert reads == ["agent"]  # the first batch: at once
    await pane.update([event])
    await pane.update([])
    assert reads == ["agent"]  # within the second: marked stale, not read
    await clock.advance(1.0)
    await pane.update([])
    assert reads == ["agent", "agent"]  # the stale snapshot, once due
    await clock.advance(5.0)
    await pane.update([])
    assert reads == ["agent", "agent"]  # nothing new: no read
