"""The Dashboard's schedules: a small table with each schedule's spec and next tick, read
when the log moves or every 10 s (a schedule made or deleted writes no event), escaped."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentq.clock import FakeClock
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import MemoryStore, ScheduleRow
from agentq.widgets import Dashboard
from agentq.widgets.html.schedules import schedules_html
from agentq.widgets.models.schedules import ScheduleList
from agentq.workflows import StepDef, WorkflowDef, WorkflowEngine

from .fakes import T0, ReadStore


def test_the_table_escapes_and_says_when_the_next_tick_comes() -> None:
    rows = [
        ScheduleRow("<b>x</b>", "d&d", "0 9 * * *", None, None, T0 + 185, T0),
        ScheduleRow("late", "d", None, 60.0, None, T0 - 1, T0, T0 - 61, "late@x"),
    ]
    html = schedules_html(rows, T0)
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x" not in html and "d&amp;d" in html
    assert 'data-next-tick="' + repr(T0 + 185) + '"' in html
    assert "cron 0 9 * * *" in html and "(in 3 m 05 s)" in html
    assert "every 60s" in html and "(due)" in html and "late@x" in html
    assert "no schedules" in schedules_html([], T0)
    assert 'data-hidden="1"' in schedules_html(rows, T0, limit=1)


async def test_the_list_reads_when_the_log_moves_or_every_ten_seconds() -> None:
    store = ReadStore()
    listed = ScheduleList(store)
    assert await listed.poll(T0, moved=False) is False and store.calls["schedules"] == 1
    store.schedule_rows = [ScheduleRow("n", "d", None, 5.0, None, T0 + 5, T0)]
    assert await listed.poll(T0 + 9, moved=False) is False  # not due: not read
    assert store.calls["schedules"] == 1
    assert await listed.poll(T0 + 9, moved=True) is True and store.calls["schedules"] == 2
    assert [r.name for r in listed.rows] == ["n"]
    store.schedule_rows = []
    assert await listed.poll(T0 + 19.5, moved=False) is True and listed.rows == ()


@pytest.fixture
async def real(clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=2)}, clock=clock) as q:
        engine = WorkflowEngine(q, MemoryStore(), clock=clock)
        yield engine
        await engine.close()


async def test_the_dashboard_shows_a_schedule_and_its_next_tick(
    real: WorkflowEngine, clock: FakeClock
) -> None:
    report = WorkflowDef("report", [StepDef("go", lambda ctx: 1)])
    dash = Dashboard(real)
    await dash.refresh()
    assert "no schedules" in dash.schedules.value
    await real.schedule("nightly", report, cron="0 9 * * *")
    await clock.advance(10)
    assert await dash.refresh() is True
    html = dash.schedules.value
    assert 'data-name="nightly"' in html and "2026-01-01 09:00:00 UTC" in html
    assert await real.unschedule("nightly")
    await clock.advance(10)
    await dash.refresh()
    assert "no schedules" in dash.schedules.value


def test_an_out_of_range_stored_tick_shows_as_the_number() -> None:
    html = schedules_html([ScheduleRow("far", "d", None, 1e300, None, 1e300, T0)], T0)
    assert "1e+300 (Unix seconds)" in html
