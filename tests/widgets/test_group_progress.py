"""A run group's progress view: the fold (`read_progress`), its HTML, the `GroupMonitor`
widget and `follow_group`'s console line."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from agentq import (
    Job,
    NonRetryable,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.clock import FakeClock
from agentq.errors import UnknownWorkflowError
from agentq.store import DurableStore
from agentq.widgets.html.group import group_progress_html, progress_text
from agentq.widgets.models.group import read_progress

pytestmark = pytest.mark.timeout(60)

PRICES = {"input_tokens": 0.001, "output_tokens": 0.002}


def tokens_def(gates: dict[str, asyncio.Event]) -> WorkflowDef:
    """One durable "model" call (10 in, 5 out tokens); a gated key waits; "<b>" fails."""

    async def body(ctx: StepContext) -> Any:
        key = ctx.workflow_id.rsplit("/", 1)[1]
        value = ctx.input
        out = await ctx.call(Job("model", lambda: value),
                             usage={"input_tokens": 10, "output_tokens": 5})
        if key in gates:
            await gates[key].wait()
        if value == "<b>":
            raise NonRetryable("bad <b>input</b>")
        return out

    return WorkflowDef("tokens", [StepDef("s", body)])


async def test_progress_counts_failures_tokens_cost_and_time_left(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    gates = {"slow": asyncio.Event()}
    group = engine.group("p")
    await group.submit(tokens_def(gates), {"a": 1, "bad": "<b>", "slow": 3, "d": 4})
    it = group.results().__aiter__()
    for _ in range(3):
        await it.__anext__()
    await clock.advance(30.0)
    progress = await read_progress(store, "p", clock.time(), prices=PRICES)
    assert dict(progress.status) == {"pending": 0, "running": 1, "waiting": 0,
                                     "completed": 2, "failed": 1, "cancelled": 0}
    assert [(f.key, f.state) for f in progress.failures] == [("bad", "failed")]
    assert "bad <b>input</b>" in progress.failures[0].reason
    assert progress.tokens == {"input_tokens": 40, "output_tokens": 20}
    assert progress.cost == pytest.approx(40 * 0.001 + 20 * 0.002)
    assert progress.elapsed == pytest.approx(30.0, abs=0.5)
    assert progress.rate is not None and progress.rate == pytest.approx(3 / progress.elapsed)
    assert progress.eta == pytest.approx(1 / progress.rate)
    assert not progress.done
    line = progress_text(progress)
    assert line.startswith("3/4 ended · 1 failed · 1 running · 60 tokens · $0.0800")
    assert "left" in line

    html = group_progress_html(progress)
    assert 'data-agentq="group-progress"' in html and 'data-ended="3"' in html
    assert 'data-state="completed" data-count="2"' in html
    assert "<b>input</b>" not in html and "bad &lt;b&gt;input&lt;/b&gt;" in html
    assert 'data-cost="0.080000"' in html
    assert "data-cost" not in group_progress_html(await read_progress(store, "p", clock.time()))

    gates["slow"].set()
    await it.__anext__()
    done = await read_progress(store, "p", clock.time())
    assert done.done and done.eta == 0.0 and done.cost is None
    assert "left" not in progress_text(done)
    # an ended group's time and rate are those of its run, not falling as time goes on
    await clock.advance(3600.0)
    later = await read_progress(store, "p", clock.time())
    assert (later.elapsed, later.rate) == (done.elapsed, done.rate)
    assert later.elapsed == pytest.approx(30.0, abs=0.5)


async def test_progress_before_anything_ran_and_of_an_unknown_group(
    store: DurableStore, clock: FakeClock
) -> None:
    await store.record_group("later", definition="d", items={"x": 1, "y": 2},  # type: ignore[attr-defined]
                             now=clock.time())
    progress = await read_progress(store, "later", clock.time())
    assert progress.status.pending == 2 and progress.rate is None and progress.eta is None
    assert progress_text(progress) == "0/2 ended · 2 pending"
    assert 'data-state="pending" data-count="2"' in group_progress_html(progress)
    with pytest.raises(UnknownWorkflowError):
        await read_progress(store, "nope", clock.time())


async def test_group_monitor_widget_draws_the_group(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("ipywidgets")
    from agentq.widgets import GroupMonitor

    group = engine.group("w")
    await group.submit(tokens_def({}), {"a": 1, "b": "<b>"})
    [m async for m in group.results()]
    monitor = GroupMonitor(store, "w", prices=PRICES, clock=clock)
    assert await monitor.refresh() is True
    assert monitor.progress is not None and monitor.progress.done
    assert 'data-ended="2"' in monitor.html.value and "group-failure" in monitor.html.value
    assert await monitor.refresh() is False  # nothing changed: nothing redrawn


async def test_follow_group_prints_a_progress_line_until_every_member_ended(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    gates = {"a": asyncio.Event()}
    group = engine.group("line")
    await group.submit(tokens_def(gates), {"a": 1, "b": 2})
    out = io.StringIO()
    follow = asyncio.ensure_future(follow_group(store, "line", file=out, interval=1.0,
                                                clock=clock))
    await clock.wait_for_sleepers(1)
    assert not follow.done()
    gates["a"].set()
    [m async for m in group.results()]
    await clock.advance(1.0)
    final = await follow
    assert final.done and final.status.completed == 2
    assert "2/2 ended" in out.getvalue() and "line" in out.getvalue()


async def test_follow_group_prints_the_group_id_as_text_not_markup(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    group = engine.group("[bold]G[bold]")
    await group.submit(tokens_def({}), {"a": 1})
    [m async for m in group.results()]
    out = io.StringIO()
    await follow_group(store, "[bold]G[bold]", file=out, interval=1.0, clock=clock)
    assert "[bold]G[bold]" in out.getvalue()


async def test_follow_group_shows_controls_in_the_group_id_as_escapes(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    odd = "g\u202eevil\x1b[31m"  # a right-to-left override and an ANSI colour
    group = engine.group(odd)
    await group.submit(tokens_def({}), {"a": 1})
    [m async for m in group.results()]
    out = io.StringIO()
    await follow_group(store, odd, file=out, interval=1.0, clock=clock)
    printed = out.getvalue()
    assert "\u202e" not in printed and "\x1b" not in printed
    assert "g\\u202eevil\\x1b[31m" in printed  # shown as typed


@pytest.mark.parametrize("interval", [0, -1.0, float("nan"), float("inf"), True, "1"])
async def test_follow_group_refuses_an_interval_that_is_not_a_positive_number(
    store: DurableStore, clock: FakeClock, interval: object
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    with pytest.raises(ValueError, match="interval must be a positive number") as info:
        await follow_group(store, "g", interval=interval, clock=clock)  # type: ignore[arg-type]
    assert repr(interval) in str(info.value)


async def test_follow_group_started_before_its_group_waits_for_it(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    out = io.StringIO()
    follow = asyncio.ensure_future(follow_group(store, "later", file=out, interval=1.0,
                                                clock=clock))
    await clock.wait_for_sleepers(1)  # no such group yet: it waits, it does not raise
    assert not follow.done()
    await clock.advance(1.0)
    await clock.wait_for_sleepers(1)
    assert not follow.done()
    group = engine.group("later")
    await group.submit(tokens_def({}), {"a": 1})
    [m async for m in group.results()]
    await clock.advance(1.0)
    final = await follow
    assert final.done and final.status.completed == 1
    assert "waiting for group 'later'" in out.getvalue() and "1/1 ended" in out.getvalue()


async def test_follow_group_raises_when_its_group_is_forgotten_while_followed(
    engine: WorkflowEngine, store: DurableStore, clock: FakeClock
) -> None:
    pytest.importorskip("rich")
    from agentq.widgets import follow_group

    gates = {"a": asyncio.Event()}
    group = engine.group("gone")
    await group.submit(tokens_def(gates), {"a": 1})
    out = io.StringIO()
    follow = asyncio.ensure_future(follow_group(store, "gone", file=out, interval=1.0,
                                                clock=clock))
    await clock.wait_for_sleepers(1)  # read once: one member still running
    gates["a"].set()
    [m async for m in group.results()]
    assert await group.forget()
    await clock.advance(1.0)
    with pytest.raises(UnknownWorkflowError, match="'gone' was forgotten while followed"):
        await follow
