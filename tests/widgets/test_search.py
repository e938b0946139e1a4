"""Search and paging in the step table, and a first poll that reads the log's tail only
(issue 14: no fixed caps, refresh cost flat in the log's size)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.store import StepState
from agentq.widgets import ApprovalPanel, Dashboard, EventTimeline, StepTable
from agentq.widgets.html.calls import call_counts_html
from agentq.widgets.models import search as _search
from agentq.widgets.models import source as _source
from agentq.widgets.models.calls import CallCounts

from .fakes import T0, FakeEngine, ReadStore

K = EventKind


def workflow(store: ReadStore, wf: str, steps: tuple[str, ...] = ("fetch", "send"),
             state: StepState = StepState.COMPLETED, at: float | None = None) -> None:
    store.event(K.WORKFLOW_STARTED, wf, at=at)
    for i, name in enumerate(steps):
        store.event(K.STEP_STARTED, wf, (i, name), attempt=1, at=at)
        store.step(wf, i, name, state)
        if state is StepState.COMPLETED:
            store.event(K.STEP_COMPLETED, wf, (i, name), attempt=1, at=at)


def drawn(table: StepTable) -> list[str]:
    return list(dict.fromkeys(r.workflow_id for r in table.page.rows))


async def test_pages_walk_the_whole_history_newest_first() -> None:
    store = ReadStore()
    for i in range(12):
        workflow(store, f"order-{i:02d}")
    table = StepTable(store, clock=FakeClock(), limit=10)
    await table.refresh()
    assert drawn(table) == [f"order-{i:02d}" for i in (11, 10, 9, 8, 7)]
    assert table.prev.disabled and not table.next.disabled
    assert 'data-start="0" data-matches="12"' in table.page_label.value
    table.next.click()
    await table.join()
    assert drawn(table) == [f"order-{i:02d}" for i in (6, 5, 4, 3, 2)]
    table.next.click()
    await table.join()
    assert drawn(table) == ["order-01", "order-00"] and table.next.disabled
    table.prev.click()
    await table.join()
    assert drawn(table)[0] == "order-06"
    table.prev.click()
    await table.join()
    assert drawn(table)[0] == "order-11" and table.prev.disabled


async def test_search_by_id_step_status_and_time_window() -> None:
    clock = FakeClock(T0 + 10_000)
    store = ReadStore()
    workflow(store, "order-1", at=T0)  # long ago
    workflow(store, "order-2", ("fetch", "approve"), StepState.WAITING, at=T0 + 9_990)
    workflow(store, "refund-1", ("lookup",), at=T0 + 9_995)
    table = StepTable(store, clock=clock)
    await table.refresh()
    table.query.value = "order"
    await table.join()
    assert drawn(table) == ["order-2", "order-1"]
    assert 'data-matches="2"' in table.page_label.value
    table.step_query.value = "appr"
    await table.join()
    assert drawn(table) == ["order-2"]
    assert [r.step_name for r in table.page.rows] == ["approve"]
    table.step_query.value = ""
    table.filter.value = "waiting"
    await table.join()
    assert [(r.workflow_id, r.step_name) for r in table.page.rows] == [
        ("order-2", "fetch"), ("order-2", "approve")]
    table.filter.value = ""
    table.query.value = ""
    table.window.value = 300.0  # the last 5 minutes
    await table.join()
    assert drawn(table) == ["refund-1", "order-2"]


async def test_a_search_reads_only_the_steps_of_the_workflows_it_shows() -> None:
    store = ReadStore()
    for i in range(200):
        workflow(store, f"wf-{i:03d}")
    table = StepTable(store, clock=FakeClock(), limit=4)
    await table.refresh()
    assert store.calls["step_rows(wf)"] == 2  # the first page: two workflows
    table.query.value = "wf-05"
    await table.join()
    assert drawn(table) == ["wf-059", "wf-058"]
    assert 'data-matches="10"' in table.page_label.value
    assert store.calls["step_rows(wf)"] == 4 and "step_rows" not in store.calls


async def test_the_first_poll_reads_the_tail_and_rebuilds_the_workflows_it_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_source, "TAIL_EVENTS", 7)
    store = ReadStore()
    for i in range(20):
        workflow(store, f"wf-{i:02d}")  # 5 events each: 100 events
    timeline = EventTimeline(store, clock=FakeClock(), limit=2)
    await timeline.refresh()
    # The tail (wf-18's last 2 events, wf-19 whole), then wf-18's whole history.
    assert store.after == [93, 0]
    tracks = timeline.model.recent(2)
    assert [t.workflow_id for t in tracks] == ["wf-19", "wf-18"]
    assert all(t.whole and t.state == "running" and len(t.steps) == 2 for t in tracks)
    assert [s.outcome for s in tracks[1].steps[0].spans] == ["completed"]


async def test_waiting_workflows_older_than_the_tail_still_reach_the_approval_panel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_source, "TAIL_EVENTS", 5)
    store = ReadStore()
    workflow(store, "old", ("ask",), StepState.WAITING)
    for i in range(10):
        workflow(store, f"new-{i}")
    dash = Dashboard(FakeEngine(store, FakeClock()))
    await dash.refresh()
    assert dash.approvals.slots[0].key == ("old", 0)
    await dash.stop()


async def test_the_timeline_zoom_slider_redraws_without_reading() -> None:
    store = ReadStore()
    workflow(store, "w")
    timeline = EventTimeline(store, clock=FakeClock(T0 + 20))
    await timeline.refresh()
    calls = dict(store.calls)
    timeline.zoom.value = (50.0, 100.0)
    assert dict(store.calls) == calls and "zoomed: 50-100%" in timeline.html.value
    timeline.zoom.value = (40.0, 40.0)  # squeezed to a point: a sliver, no error
    assert "zoomed: 40-40%" in timeline.html.value


class GatedStore(ReadStore):
    """Reading the steps of `slow` waits for `gate`: a search that is overtaken."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def step_rows(self, workflow_id: str | None = None) -> list[Any]:
        if workflow_id == "a-slow":
            await self.gate.wait()
        return await super().step_rows(workflow_id)


async def test_a_slow_search_overtaken_by_the_next_keystroke_draws_nothing() -> None:
    store = GatedStore()
    workflow(store, "a-slow")
    workflow(store, "ab")
    for i in range(60):
        workflow(store, f"z-{i}")  # push both off the first page: their steps are not read
    table = StepTable(store, clock=FakeClock(), limit=6)
    await table.refresh()
    table.query.value = "a"  # matches a-slow first: its read waits
    await asyncio.sleep(0)
    table.query.value = "ab"
    await asyncio.sleep(0)
    store.gate.set()
    await table.join()
    assert drawn(table) == ["ab"] and 'data-matches="1"' in table.page_label.value


async def test_an_approval_with_a_deadline_counts_down_each_tick_without_reading() -> None:
    from agentq.widgets import ApprovalPanel

    clock = FakeClock(T0)
    store = ReadStore()
    store.event(K.WORKFLOW_STARTED, "w")
    store.event(K.STEP_WAITING, "w", (0, "s0"), attempt=1, reason="ok?", key="k")
    store.step("w", 0, "s0", StepState.WAITING, reason="ok?", wait_key="k",
               wait_deadline=T0 + 125)
    panel = ApprovalPanel(FakeEngine(store, clock))
    await panel.refresh()
    label = panel.slots[0].label
    assert 'data-left="125"' in label.value and "(in 2 m 05 s)" in label.value
    calls = dict(store.calls)
    await clock.advance(100.4)
    assert await panel.refresh() is True  # the log did not move: only the label changed
    assert "(in 24 s)" in label.value
    assert store.calls["last_seq"] == calls["last_seq"] + 1 and store.calls["event_rows"] == 1
    await clock.advance(0.2)
    assert await panel.refresh() is False  # the same whole second: nothing sent
    await clock.advance(30)
    assert await panel.refresh() is True and "(passed)" in label.value


async def test_a_workflow_longer_than_the_page_says_how_many_more_and_pages_by_rows() -> None:
    # Review 14 #1: a 10-step workflow under limit=4 showed 4 rows, no "more", older disabled.
    store = ReadStore()
    workflow(store, "old")
    workflow(store, "long", tuple(f"s{i}" for i in range(10)))
    workflow(store, "new")
    table = StepTable(store, clock=FakeClock(), limit=4)
    await table.refresh()
    assert drawn(table) == ["new"]
    table.next.click()
    await table.join()
    assert [r.step_name for r in table.page.rows] == ["s0", "s1", "s2", "s3"]
    assert "6 more" in table.html.value and "steps 1-4 of 10" in table.page_label.value
    assert not table.next.disabled
    table.next.click()
    await table.join()
    assert [r.step_name for r in table.page.rows] == ["s4", "s5", "s6", "s7"]
    table.next.click()
    await table.join()  # the rest of "long", then the next workflow if it fits
    assert [r.step_name for r in table.page.rows] == ["s8", "s9", "fetch", "send"]
    assert "steps 9-10 of 10" in table.page_label.value and "more" not in table.html.value
    assert table.next.disabled
    for expected in (["s4", "s5", "s6", "s7"], ["s0", "s1", "s2", "s3"]):
        table.prev.click()
        await table.join()
        assert [r.step_name for r in table.page.rows] == expected
    table.prev.click()
    await table.join()
    assert drawn(table) == ["new"] and table.prev.disabled


async def test_a_long_workflow_under_a_status_search_is_paged_too() -> None:
    store = ReadStore()
    workflow(store, "long", tuple(f"s{i}" for i in range(7)), StepState.FAILED)
    table = StepTable(store, clock=FakeClock(), limit=3)
    await table.refresh()
    table.filter.value = "failed"
    await table.join()
    assert len(table.page.rows) == 3 and "4 more" in table.html.value
    await table.show_page(table.page.next_start, table.page.next_offset)
    await table.show_page(table.page.next_start, table.page.next_offset)
    assert [r.step_name for r in table.page.rows] == ["s6"] and table.next.disabled


async def test_call_counts_from_a_partial_window_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Review 14 #8: totals read from the tail looked like totals of the whole log.
    store = ReadStore()
    for i in range(4):
        workflow(store, f"wf-{i}")  # 5 events each
    whole = Dashboard(FakeEngine(store, FakeClock()))
    await whole.refresh()
    assert "calls-scope" not in whole.calls.value
    await whole.stop()
    monkeypatch.setattr(_source, "TAIL_EVENTS", 7)
    dash = Dashboard(FakeEngine(store, FakeClock()))
    await dash.refresh()
    assert 'data-floor="13"' in dash.calls.value
    assert "in the events after #13 (older ones not read)" in dash.calls.value
    await dash.stop()


def test_a_steps_call_cell_from_a_partial_window_reads_at_least() -> None:
    counts = CallCounts(calls=3, runs=3, completed=3)
    assert ">3 calls" in call_counts_html(counts)
    partial = call_counts_html(counts, floor=95_000)
    assert "≥ 3 calls" in partial and "counted from event #95,001 on" in partial


async def test_the_first_render_reads_only_as_many_waiting_workflows_as_the_panel_shows() -> None:
    # Review 14 #4: the first render read the steps of every waiting workflow.
    store = ReadStore()
    for i in range(10):
        workflow(store, f"ask-{i}", ("ask",), StepState.WAITING)
    panel = ApprovalPanel(FakeEngine(store, FakeClock()), slots=2)
    await panel.refresh()
    assert store.calls["step_rows(wf)"] == 2 and "step_rows" not in store.calls
    assert [s.key for s in panel.slots] == [("ask-0", 0), ("ask-1", 0)]  # the oldest waits
    assert "… 8 more waiting not shown" in panel.more.value
    store.step("ask-0", 0, "ask", StepState.COMPLETED)  # answered elsewhere
    store.event(K.STEP_COMPLETED, "ask-0", (0, "ask"), attempt=1)
    await panel.refresh()
    assert [s.key for s in panel.slots] == [("ask-2", 0), ("ask-1", 0)]
    assert "… 7 more waiting not shown" in panel.more.value
    await panel.stop()


@pytest.mark.parametrize(("start", "error"), [
    (-1, ValueError), (-100, ValueError), (2.5, TypeError), ("3", TypeError), (True, TypeError),
])
async def test_show_page_refuses_a_bad_start_naming_it(start: Any, error: type) -> None:
    # Review 14 #6.
    store = ReadStore()
    for i in range(12):
        workflow(store, f"wf-{i:02d}")
    table = StepTable(store, clock=FakeClock(), limit=4)
    await table.refresh()
    with pytest.raises(error, match=r"start must be an int >= 0|start must be >= 0, got "):
        await table.show_page(start)
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        await table.show_page(0, -1)


async def test_show_page_past_the_end_draws_the_last_page() -> None:
    store = ReadStore()
    for i in range(12):
        workflow(store, f"wf-{i:02d}")
    table = StepTable(store, clock=FakeClock(), limit=4)
    await table.refresh()
    for start in (12, 100):
        await table.show_page(start)
        assert drawn(table) == ["wf-00"] and table.next.disabled and not table.prev.disabled
        assert "workflows 12-12 of 12" in table.page_label.value


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"workflows": 0}, ValueError, "workflows must be >= 1, got 0"),
    ({"limit": "50"}, TypeError, "limit must be an int >= 1, got '50'"),
    ({"limit": 2.5}, TypeError, "limit must be an int >= 1, got 2.5"),
    ({"slots": 0}, ValueError, "slots must be >= 1, got 0"),
])
def test_dashboard_arguments_are_checked_under_their_own_names(
    kw: dict[str, Any], error: type, message: str
) -> None:
    # Review 14 #7.
    with pytest.raises(error, match=message):
        Dashboard(FakeEngine(ReadStore(), FakeClock()), **kw)


class HeldStore(ReadStore):
    """A `ReadStore` whose `workflows` and `step_rows(wf)` wait for `gate`, counting the
    reads in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most = 0
        self.index_waiting = asyncio.Event()
        self.hold_index = True

    async def _gated(self) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await self.gate.wait()
        self.in_flight -= 1

    async def workflows(self, state: Any = None) -> Any:
        self.index_waiting.set()
        if self.hold_index:
            await self._gated()
        return await super().workflows(state)

    async def step_rows(self, workflow_id: str | None = None) -> Any:
        await self._gated()
        return await super().step_rows(workflow_id)


async def test_the_first_render_folds_the_events_while_the_index_is_read() -> None:
    store = HeldStore()
    for i in range(3):
        workflow(store, f"wf-{i}")
    dash = Dashboard(FakeEngine(store, FakeClock()))  # type: ignore[arg-type]
    first = asyncio.create_task(dash.refresh())
    await store.index_waiting.wait()
    for _ in range(3):
        await asyncio.sleep(0)
    # The index read is in flight, and the timeline and call counts have the events already.
    assert store.in_flight == 1 and not first.done()
    assert len(dash.timeline.model) == 3
    store.gate.set()
    assert await first is True
    assert drawn(dash.steps) == ["wf-2", "wf-1", "wf-0"]


async def test_the_first_page_reads_its_workflows_steps_in_one_batch() -> None:
    store = HeldStore()
    for i in range(6):
        workflow(store, f"wf-{i}")
    store.hold_index = False
    table = StepTable(store, clock=FakeClock(), limit=8)
    first = asyncio.create_task(table.refresh())
    for _ in range(20):
        await asyncio.sleep(0)
    # All four workflows of the page (2 steps each, 8 rows) are read at once, not in turn.
    assert store.in_flight == 4
    store.gate.set()
    await first
    assert drawn(table) == ["wf-5", "wf-4", "wf-3", "wf-2"] and store.most == 4


async def test_a_refresh_during_a_page_read_does_not_break_the_walk() -> None:
    """A page reads step rows (awaits) while walking the index; a refresh that runs in that
    await and moves a workflow to the front must not fail the walk ("OrderedDict mutated
    during iteration", seen once in the BFCL notebook)."""
    store = ReadStore()
    for i in range(6):
        workflow(store, f"order-{i}")
    cache = _source.StepCache()
    await cache.load(store, store.events, full=True)
    cache._steps.clear()  # step rows not read yet: the page must await the store for them
    real = store.step_rows

    async def step_rows_during_a_refresh(workflow_id: str | None = None) -> list[Any]:
        await asyncio.sleep(0)
        moved = cache.index["order-0"]
        cache.set_workflow(moved)  # what a concurrent `load` does for an active workflow
        return await real(workflow_id)

    store.step_rows = step_rows_during_a_refresh
    page = await _search.page_of(cache, store, _search.Query(workflow="order"), start=0,
                                 limit=4, now=T0)
    assert [r.workflow_id for r in page.rows] == ["order-5", "order-5", "order-4", "order-4"]


async def test_the_hidden_waits_count_each_waiting_workflow_once() -> None:
    # Issue 22 fault 4: the step table's first page read waiting workflows that the panel
    # still counted as unread ("285 shown for 235"), and a wait answered elsewhere stayed
    # counted ("269 for 55 after a bulk approve").
    store = ReadStore()
    for i in range(10):
        workflow(store, f"ask-{i}", ("ask",), StepState.WAITING)
    dash = Dashboard(FakeEngine(store, FakeClock()), slots=2, limit=50)
    await dash.refresh()
    assert len(dash.steps.page.rows) == 10  # the first page read every waiting workflow
    assert 'data-hidden="8"' in dash.approvals.more.value, dash.approvals.more.value
    for i in range(2, 7):  # five waits answered elsewhere (a bulk approve, say)
        store.step(f"ask-{i}", 0, "ask", StepState.COMPLETED)
        store.event(K.STEP_COMPLETED, f"ask-{i}", (0, "ask"), attempt=1)
    await dash.refresh()
    assert 'data-hidden="3"' in dash.approvals.more.value, dash.approvals.more.value
    await dash.stop()


async def test_unread_waiting_workflows_follow_the_index() -> None:
    # The same count when the unread ones stop waiting without being read.
    store = ReadStore()
    for i in range(10):
        workflow(store, f"ask-{i}", ("ask",), StepState.WAITING)
    panel = ApprovalPanel(FakeEngine(store, FakeClock()), slots=2)
    await panel.refresh()
    assert "… 8 more waiting not shown" in panel.more.value
    for i in range(5, 10):
        store.step(f"ask-{i}", 0, "ask", StepState.COMPLETED)
        store.event(K.STEP_COMPLETED, f"ask-{i}", (0, "ask"), attempt=1)
    await panel.refresh()
    assert "… 3 more waiting not shown" in panel.more.value, panel.more.value
    await panel.stop()
