"""The live widgets on small fakes: trait values, only-on-change, incremental reads, stop(),
approval clicks (BH-19), and the refresher on a running loop without nest_asyncio (BH-22);
durable call counts and totals, keyed waits in the panel (resumed with their key)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import NotWaitingError, StoreError
from agentq.events import EventKind
from agentq.queue import LaneConfig, Priority, Queue
from agentq.store import MemoryStore, StepState
from agentq.widgets import ApprovalPanel, Dashboard, EventTimeline, LaneMonitor, StepTable
from agentq.workflows import (
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
    WorkflowEngine,
)

from .fakes import T0, FakeEngine, ReadStore, StatsQueue, Tools, agent_workflow

K = EventKind
TICK = 0.25


def changes(widget: Any, name: str = "value") -> list[Any]:
    """Record every change of a trait."""
    seen: list[Any] = []
    widget.observe(lambda change: seen.append(change["new"]), names=name)
    return seen


def started(store: ReadStore, wf: str, n: int = 2) -> None:
    store.event(K.WORKFLOW_STARTED, wf)
    for i in range(n):
        store.step(wf, i, f"s{i}", StepState.PENDING)


def waiting(store: ReadStore, wf: str, reason: str = "ok?") -> None:
    started(store, wf, 1)
    store.event(K.STEP_STARTED, wf, (0, "s0"), attempt=1)
    store.event(K.STEP_WAITING, wf, (0, "s0"), attempt=1, reason=reason)
    store.step(wf, 0, "s0", StepState.WAITING, reason=reason)


@pytest.fixture
def store() -> ReadStore:
    return ReadStore()


@pytest.fixture
async def engine(store: ReadStore, clock: FakeClock) -> AsyncIterator[FakeEngine]:
    yield FakeEngine(store, clock)


# --- LaneMonitor ---------------------------------------------------------------------------


async def test_lane_monitor_redraws_only_when_stats_change() -> None:
    queue = StatsQueue()
    monitor = LaneMonitor(queue, clock=FakeClock())
    seen = changes(monitor.html)
    assert await monitor.refresh() is True
    assert 'data-priority="high" data-running="0"' in monitor.html.value
    assert await monitor.refresh() is False and len(seen) == 1
    queue.lanes = (replace(queue.lanes[0], running=3), *queue.lanes[1:])
    assert await monitor.refresh() is True and len(seen) == 2
    assert 'data-priority="high" data-running="3"' in monitor.html.value


# --- StepTable: incremental reads ------------------------------------------------------------


async def test_step_table_reads_incrementally_and_only_when_the_log_moved(
    store: ReadStore,
) -> None:
    for i in range(40):
        started(store, f"wf-{i:02d}")
    table = StepTable(store, clock=FakeClock(), limit=10)
    seen = changes(table.html)
    assert await table.refresh() is True
    # The first poll: the workflow index, the log's tail, the steps of the workflows shown;
    # never the whole projection.
    assert store.calls["event_rows"] == 1 and store.calls["workflows"] == 1
    assert "step_rows" not in store.calls and store.calls["step_rows(wf)"] == 5
    assert table.html.value.count('data-agentq="step-row"') == 10  # 5 workflows of 2 steps
    assert 'data-matches="40"' in table.page_label.value and not table.next.disabled
    # Nothing new: one cheap last_seq, no other read, no message to the page.
    before = dict(store.calls)
    assert await table.refresh() is False
    assert store.calls["last_seq"] == before["last_seq"] + 1
    assert store.calls["event_rows"] == 1 and len(seen) == 1
    # One event: read after the last seq seen; re-read only that workflow.
    store.event(K.STEP_STARTED, "wf-03", (0, "s0"), attempt=1, worker_id="w1")
    store.step("wf-03", 0, "s0", StepState.LEASED, attempt=1, worker_id="w1")
    assert await table.refresh() is True
    assert store.after == [0, 40]
    assert store.calls["step_rows(wf)"] == 6 and store.calls["get_workflow"] == 1
    first = table.html.value.split('data-agentq="step-row"')[1]
    assert 'data-workflow="wf-03"' in first and 'data-status="leased"' in first


async def test_step_table_filter_redraws_from_cache_without_io(store: ReadStore) -> None:
    waiting(store, "a")
    started(store, "b")
    table = StepTable(store, clock=FakeClock())
    await table.refresh()
    calls = dict(store.calls)
    table.filter.value = "waiting"
    await table.join()
    assert dict(store.calls) == calls
    assert table.html.value.count('data-agentq="step-row"') == 1
    assert 'data-status="waiting"' in table.html.value and "ok?" in table.html.value
    table.filter.value = "failed"
    await table.join()
    assert "no steps" in table.html.value
    table.filter.value = ""
    await table.join()
    assert table.html.value.count('data-agentq="step-row"') == 3


async def test_a_burst_touching_many_workflows_reads_the_projection_once(
    store: ReadStore,
) -> None:
    table = StepTable(store, clock=FakeClock())
    await table.refresh()
    for i in range(100):
        started(store, f"wf-{i}")
    await table.refresh()
    # More than FULL_READ_AFTER touched: the index is read once, not 100 get_workflow.
    assert store.calls["workflows"] == 2 and "get_workflow" not in store.calls
    assert store.calls["step_rows(wf)"] == 25  # only the 25 workflows the page shows
    assert 'data-matches="100"' in table.page_label.value  # none lost


# --- EventTimeline ---------------------------------------------------------------------------


async def test_timeline_folds_only_new_events(store: ReadStore) -> None:
    started(store, "w")
    store.event(K.STEP_STARTED, "w", (0, "s0"), attempt=1)
    timeline = EventTimeline(store, clock=FakeClock())
    await timeline.refresh()
    assert 'data-outcome="running"' in timeline.html.value
    store.event(K.STEP_COMPLETED, "w", (0, "s0"), attempt=1)
    await timeline.refresh()
    assert store.after == [0, 2] and "step_rows" not in store.calls
    assert 'data-outcome="completed"' in timeline.html.value
    assert timeline.model.last_seq == 3


# --- the refresher -----------------------------------------------------------------------------


async def tick(clock: FakeClock, interval: float = TICK) -> None:
    async with asyncio.timeout(2):
        await clock.wait_for_sleepers(1)
    await clock.advance(interval)


async def test_refresher_runs_on_the_injected_clock_and_stop_refreshes_once_more(
    store: ReadStore, clock: FakeClock
) -> None:
    table = StepTable(store, clock=clock, interval=TICK).start()
    assert table.start() is table and table.running  # idempotent
    await tick(clock)
    started(store, "late")
    await tick(clock)
    assert 'data-workflow="late"' in table.html.value
    started(store, "later")
    await table.stop()
    assert not table.running
    assert 'data-workflow="later"' in table.html.value  # the last refresh of stop()


async def test_stop_reraises_the_refresher_error_and_the_widget_shows_it(
    store: ReadStore, clock: FakeClock
) -> None:
    table = StepTable(store, clock=clock).start()
    await tick(clock)
    store.fail_with = StoreError("disk <b>gone</b>")
    await tick(clock)
    assert not table.running and isinstance(table.error, StoreError)
    assert "disk &lt;b&gt;gone&lt;/b&gt;" in table._banner.value
    assert table._banner.layout.display is None
    with pytest.raises(StoreError, match="disk"):
        await table.stop()


def test_start_outside_a_running_loop_says_what_to_do() -> None:
    table = StepTable(ReadStore(), clock=FakeClock())
    with pytest.raises(RuntimeError, match="running event loop"):
        table.start()


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), True])
def test_bad_interval_is_rejected(interval: Any) -> None:
    with pytest.raises(ValueError, match="interval"):
        StepTable(ReadStore(), interval=interval)


async def test_bh22_widgets_run_on_the_running_loop_without_nest_asyncio(
    store: ReadStore, engine: FakeEngine, clock: FakeClock
) -> None:
    dash = Dashboard(engine, clock=clock).start()
    waiting(store, "w")
    await tick(clock)
    assert dash.approvals.slots[0].key == ("w", 0)
    await dash.stop()
    assert not hasattr(asyncio, "_nest_patched") and "nest_asyncio2" not in sys.modules


# --- ApprovalPanel -----------------------------------------------------------------------------


async def test_approve_schedules_one_resume_disables_at_once_and_shows_the_outcome(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "order-1", "send 3 mails?")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot = panel.slots[0]
    assert slot.key == ("order-1", 0) and "send 3 mails?" in slot.label.value
    assert not slot.approve.disabled and slot.box.layout.display is None
    assert panel.empty.layout.display == "none"
    engine.gate.clear()
    slot.note.value = "looks fine"
    slot.approve.click()
    slot.approve.click()  # BH-19: a double click
    slot.reject.click()
    assert slot.approve.disabled and slot.reject.disabled  # at once, before any await
    assert engine.resumes == []  # scheduled as a task, not run in the callback
    async with asyncio.timeout(2):
        await engine.called.wait()
    assert engine.resumes == [("order-1", "s0", {"approved": True, "note": "looks fine"})]
    engine.gate.set()
    async with asyncio.timeout(2):
        await panel.join()
    assert len(engine.resumes) == 1
    assert 'data-outcome="completed"' in slot.status.value
    assert "approved <b>order-1</b> step s0 → workflow" in panel.log.value
    assert slot.approve.disabled  # that wait is answered
    # The store moves on: the step no longer waits, the slot is freed.
    store.event(K.STEP_RESUMED, "order-1", (0, "s0"), input={"approved": True})
    store.step("order-1", 0, "s0", StepState.COMPLETED)
    await panel.refresh()
    assert slot.key is None and slot.box.layout.display == "none"
    assert panel.empty.layout.display is None


async def test_reject_sends_approved_false_and_a_custom_input_shape(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "a")
    panel = ApprovalPanel(engine, input_for=lambda ok, note: {"ok": ok, "why": note})
    await panel.refresh()
    panel.slots[0].note.value = "no"
    panel.slots[0].reject.click()
    await panel.join()
    assert engine.resumes == [("a", "s0", {"ok": False, "why": "no"})]


async def test_a_refused_resume_shows_the_error_and_enables_the_buttons_again(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "a")
    engine.error = NotWaitingError("step 's0' is not waiting yet")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot = panel.slots[0]
    slot.approve.click()
    await panel.join()
    assert 'data-outcome="error"' in slot.status.value and "not waiting yet" in slot.status.value
    assert not slot.approve.disabled and slot.key == ("a", 0)  # still resumable: try again
    engine.error = None
    slot.approve.click()
    await panel.join()
    assert len(engine.resumes) == 2 and 'data-outcome="completed"' in slot.status.value
    await panel.stop()  # outcomes (AgentqError) are shown, not raised


async def test_an_unexpected_resume_error_is_reraised_by_stop(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "a")
    engine.error = ZeroDivisionError("bug")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    panel.slots[0].approve.click()
    await panel.join()
    assert "ZeroDivisionError" in panel.slots[0].status.value
    with pytest.raises(ZeroDivisionError):
        await panel.stop()


async def test_a_new_wait_of_the_same_step_enables_the_buttons_again(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "a")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot = panel.slots[0]
    slot.approve.click()
    await panel.join()
    assert slot.approve.disabled
    store.event(K.STEP_RESUMED, "a", (0, "s0"))
    store.event(K.STEP_STARTED, "a", (0, "s0"), attempt=1)
    store.event(K.STEP_WAITING, "a", (0, "s0"), attempt=1, reason="and now?")
    store.step("a", 0, "s0", StepState.WAITING, reason="and now?")
    await panel.refresh()
    assert slot.key == ("a", 0) and not slot.approve.disabled and "and now?" in slot.label.value


async def test_more_waiting_steps_than_slots_shows_n_more(
    store: ReadStore, engine: FakeEngine
) -> None:
    for wf in ("a", "b", "c", "d"):
        waiting(store, wf)
    panel = ApprovalPanel(engine, slots=2)
    await panel.refresh()
    assert [s.key for s in panel.slots] == [("a", 0), ("b", 0)]  # oldest wait first
    assert 'data-hidden="2"' in panel.more.value
    panel.slots[0].approve.click()
    await panel.join()
    store.step("a", 0, "s0", StepState.COMPLETED)
    store.event(K.STEP_RESUMED, "a", (0, "s0"))
    await panel.refresh()
    assert [s.key for s in panel.slots] == [("c", 0), ("b", 0)]
    assert 'data-hidden="1"' in panel.more.value


# --- Dashboard ---------------------------------------------------------------------------------


async def test_dashboard_reads_the_store_once_per_tick_for_all_views(
    store: ReadStore, engine: FakeEngine
) -> None:
    waiting(store, "a")
    dash = Dashboard(engine)
    assert await dash.refresh() is True
    assert store.calls["event_rows"] == 1 and store.calls["workflows"] == 1
    assert 'data-workflow="a"' in dash.steps.html.value
    assert 'data-agentq="timeline-step"' in dash.timeline.html.value
    assert dash.approvals.slots[0].key == ("a", 0)
    assert 'data-agentq="lane"' in dash.lanes.html.value
    assert await dash.refresh() is False
    assert store.calls["event_rows"] == 1 and store.calls["last_seq"] == 2
    store.event(K.STEP_RESUMED, "a", (0, "s0"))
    store.step("a", 0, "s0", StepState.PENDING)
    assert await dash.refresh() is True
    # One more read of that workflow's row and of its steps (the first read was at start).
    assert store.calls["event_rows"] == 2 and store.calls["step_rows(wf)"] == 2
    assert store.calls["get_workflow"] == 1
    assert dash.approvals.slots[0].key is None
    assert dash._repr_mimebundle_()  # displays as its root widget


# --- with the real engine, queue and MemoryStore --------------------------------------------



@pytest.fixture
async def real(clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue({Priority.MEDIUM: LaneConfig(capacity=50, permits=2)}, clock=clock) as q:
        engine = WorkflowEngine(q, MemoryStore(), worker_id="w1", clock=clock)
        yield engine
        await engine.close()


def approval_workflow(workflow_id: str, seen: list[Any]) -> Workflow:
    async def fetch(ctx: StepContext) -> int:
        return 42

    async def approve(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput(f"send {ctx.previous}?")
        seen.append(ctx.resume_input)
        return ctx.resume_input

    return Workflow(workflow_id, [StepDef("fetch", fetch), StepDef("approve", approve)])


async def kinds(engine: WorkflowEngine, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await engine.store.load_events(workflow_id)]


async def test_bh19_a_double_click_applies_exactly_one_resume(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    result = await real.run(approval_workflow("w", seen))
    assert result.status == "waiting"
    dash = Dashboard(real)
    await dash.refresh()
    slot = dash.approvals.slots[0]
    assert slot.key == ("w", 1) and "send 42?" in slot.label.value
    slot.note.value = "ok"
    slot.approve.click()
    slot.approve.click()
    slot.reject.click()
    assert slot.approve.disabled and slot.reject.disabled
    async with asyncio.timeout(5):
        await dash.approvals.join()
    assert seen == [{"approved": True, "note": "ok"}]
    assert (await kinds(real, "w")).count("StepResumed") == 1
    assert isinstance((await real.status("w"))[1], StepStatus.Completed)
    await dash.refresh()
    assert slot.key is None
    assert dash.steps.html.value.count('data-agentq="step-row" data-workflow="w"') == 2
    assert 'data-status="waiting"' not in dash.steps.html.value.split("<table")[1]
    assert 'data-state="completed"' in dash.timeline.html.value
    assert 'data-outcome="completed"' in dash.approvals.log.value
    await dash.stop()


async def test_bh23_background_runs_show_up_tick_by_tick_and_no_burst_is_lost(
    real: WorkflowEngine, clock: FakeClock
) -> None:
    dash = Dashboard(real, interval=TICK).start()
    await tick(clock)
    seen: list[Any] = []
    runs = [
        asyncio.ensure_future(real.run(approval_workflow(f"burst-{i:02d}", seen)))
        for i in range(30)
    ]
    async with asyncio.timeout(5):
        await asyncio.gather(*runs)  # the cell that started them ended long ago
    await tick(clock)  # one refresh, nothing else
    table = dash.steps.html.value
    assert len(re.findall(r'step-row"[^>]*data-status="waiting"', table)) == 25  # a page
    assert 'data-matches="30"' in dash.steps.page_label.value  # every workflow, none lost
    assert 'waiting 30' in text_of(table)  # the counts line
    assert dash.timeline.html.value.count('data-agentq="timeline-workflow"') == 12
    waits = [e.workflow_id for e in await real.store.load_events() if e.kind == K.STEP_WAITING]
    assert [s.key for s in dash.approvals.slots] == [(w, 1) for w in waits[:5]]  # oldest first
    assert 'data-hidden="25"' in dash.approvals.more.value
    lane = dash.lanes.html.value
    assert 'data-priority="medium" data-running="0" data-permits="2"' in lane
    assert 'data-completed="60" data-failed="0"' in lane  # a wait is not a failure
    await dash.stop()


# --- durable calls and keyed waits ---------------------------------------------------------


def text_of(markup: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", markup))


def agent_events(store: ReadStore, wf: str = "a") -> None:
    """Attempt 1 of s0: a call completes, one fails, one is in doubt (the worker is lost)."""
    started(store, wf, 1)
    s0 = (0, "s0")
    store.event(K.STEP_STARTED, wf, s0, attempt=1, worker_id="w1")
    store.event(K.CALL_STARTED, wf, s0, attempt=1, key="plan", label={"kind": "model"})
    store.event(K.CALL_COMPLETED, wf, s0, attempt=1, key="plan")
    store.event(K.CALL_STARTED, wf, s0, attempt=1, key="search", label={"tool": "search"})
    store.event(K.CALL_FAILED, wf, s0, attempt=1, key="search", reason="down")
    store.event(K.CALL_STARTED, wf, s0, attempt=1, key="pay", label={"tool": "pay"})
    store.event(K.WORKER_RECOVERED, wf, s0, attempt=1)
    store.step(wf, 0, "s0", StepState.PENDING, attempt=1)


async def test_step_table_counts_calls_from_the_events_it_already_reads(
    store: ReadStore,
) -> None:
    agent_events(store)
    table = StepTable(store, clock=FakeClock())
    await table.refresh()
    # No read of its own for calls.
    assert store.calls == {"last_seq": 1, "event_rows": 1, "workflows": 1, "step_rows(wf)": 1}
    assert "3 calls · 1 failed · 1 in doubt" in text_of(table.html.value)
    store.event(K.STEP_STARTED, "a", (0, "s0"), attempt=2, worker_id="w2")
    store.event(K.CALL_STARTED, "a", (0, "s0"), attempt=2, key="search")
    store.event(K.CALL_STARTED, "a", (0, "s0"), attempt=2, key="pay")
    store.step("a", 0, "s0", StepState.LEASED, attempt=2, worker_id="w2")
    assert await table.refresh() is True
    assert store.calls == {"event_rows": 2, "workflows": 1, "get_workflow": 1,
                           "step_rows(wf)": 2, "last_seq": 2}
    assert "3 calls · 2 running" in text_of(table.html.value)
    assert 'data-calls="3" data-runs="5" data-failed="0" data-running="2" data-in-doubt="0"' \
        in table.html.value


async def test_dashboard_shows_call_totals_beside_the_calls_answered_from_the_log(
    store: ReadStore, engine: FakeEngine
) -> None:
    agent_events(store)
    dash = Dashboard(engine)
    await dash.refresh()
    assert 'data-runs="3" data-failed="1" data-in-doubt="1" data-answered="0"' in dash.calls.value
    assert text_of(dash.calls.value) == (
        "durable calls: 3 runs · 1 failed · 1 in doubt · 0 calls and waits replayed from the log"
    )
    assert "1 in doubt" in text_of(dash.steps.html.value)
    # The engine's counter moves with no event: the next tick shows it, and reads nothing more.
    engine.answered_from_log = 4
    reads = dict(store.calls)
    seen = changes(dash.calls)
    assert await dash.refresh() is True
    assert 'data-answered="4"' in dash.calls.value and len(seen) == 1
    assert store.calls["event_rows"] == reads["event_rows"]
    assert await dash.refresh() is False and len(seen) == 1


async def test_the_panel_shows_a_keyed_wait_and_resumes_with_its_key(
    store: ReadStore, engine: FakeEngine
) -> None:
    started(store, "trip", 1)
    store.event(K.STEP_STARTED, "trip", (0, "s0"), attempt=1)
    store.event(K.STEP_WAITING, "trip", (0, "s0"), attempt=1, reason="book it?", key="approve")
    store.step("trip", 0, "s0", StepState.WAITING, reason="book it?", wait_key="approve",
               wait_details={"tool": "book", "args": {"to": "<script>x</script>"}},
               wait_deadline=T0 + 60)
    waiting(store, "plain")  # a step-level wait: no key
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot, plain = panel.slots[0], panel.slots[1]
    assert slot.key == ("trip", 0) and slot.wait_key == "approve" and plain.wait_key is None
    label = slot.label.value
    assert "<script" not in label and "&lt;script&gt;x&lt;/script&gt;" in label
    assert "key approve · tool book" in text_of(label) and "answer by 00:01:00 UTC" in label
    slot.note.value = "go"
    slot.approve.click()
    plain.reject.click()
    await panel.join()
    assert engine.resumes == [
        ("trip", "s0", {"approved": True, "note": "go"}),
        ("plain", "s0", {"approved": False, "note": ""}),
    ]
    assert engine.keys == ["approve", None]
    # The step goes on to its next wait: the slot shows that one, and a click answers it.
    store.event(K.STEP_RESUMED, "trip", (0, "s0"), key="approve")
    store.event(K.STEP_STARTED, "trip", (0, "s0"), attempt=1)
    store.event(K.STEP_WAITING, "trip", (0, "s0"), attempt=1, reason="really?", key="confirm")
    store.step("trip", 0, "s0", StepState.WAITING, reason="really?", wait_key="confirm")
    await panel.refresh()
    assert slot.wait_key == "confirm" and not slot.approve.disabled
    assert "key confirm" in text_of(slot.label.value) and "book" not in slot.label.value
    slot.approve.click()
    await panel.join()
    assert engine.keys == ["approve", None, "confirm"]


async def test_a_real_agent_run_shows_its_calls_and_answers_from_the_log(
    real: WorkflowEngine,
) -> None:
    tools = Tools()
    assert (await real.run(agent_workflow(tools))).status == "waiting"
    dash = Dashboard(real)
    await dash.refresh()
    row_ = dash.steps.html.value.split('data-agentq="step-row"')[1]
    assert 'data-calls="4" data-runs="5" data-failed="0" data-running="0" data-in-doubt="0"' \
        in row_
    assert 'data-agentq="wait" data-key="approve"' in row_ and "tool <b>book</b>" in row_
    answered = real.answered_from_log
    assert answered == 3  # the retry answered plan, tool:0 and tool:1 from the log
    assert f'data-runs="5" data-failed="1" data-in-doubt="0" data-answered="{answered}"' \
        in dash.calls.value
    bars = re.findall(r'data-agentq="call" data-key="([^"]+)" data-tool="([^"]+)" '
                      r'data-outcome="(\w+)"', dash.timeline.html.value)
    assert bars == [
        ("plan", "model", "completed"), ("tool:0", "search", "completed"),
        ("tool:1", "search", "completed"), ("tool:2", "book", "failed"),
        ("tool:2", "book", "completed"),
    ]
    slot = dash.approvals.slots[0]
    assert slot.wait_key == "approve" and "&lt;script&gt;" in slot.label.value
    slot.approve.click()
    async with asyncio.timeout(5):
        await dash.approvals.join()
    assert 'data-outcome="completed"' in slot.status.value
    assert isinstance((await real.status("trip"))[0], StepStatus.Completed)
    assert tools.ran.count("model") == 1 and len(tools.ran) == 5  # nothing ran twice
    await dash.refresh()
    assert real.answered_from_log > answered
    assert f'data-answered="{real.answered_from_log}"' in dash.calls.value
    await dash.stop()


async def test_an_agent_tool_call_gets_an_args_editor_and_edited_args_are_sent(
    store: ReadStore, engine: FakeEngine
) -> None:
    started(store, "run", 1)
    store.event(K.STEP_STARTED, "run", (0, "s0"), attempt=1)
    store.event(K.STEP_WAITING, "run", (0, "s0"), attempt=1, reason="approve?", key="approval:c1")
    store.step("run", 0, "s0", StepState.WAITING, reason="approve?", wait_key="approval:c1",
               wait_details={"tool": "send", "args": {"to": "bob"}, "tool_call_id": "c1"})
    waiting(store, "plain")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot, plain = panel.slots[0], panel.slots[1]
    assert slot.args.layout.display is None and json_of(slot.args.value) == {"to": "bob"}
    assert plain.args.layout.display == "none"
    slot.args.value = '{"to": '  # not JSON: refused in the slot, nothing sent
    slot.approve.click()
    await panel.join()
    assert engine.resumes == [] and not slot.approve.disabled
    assert 'data-outcome="error"' in slot.status.value and "not JSON" in slot.status.value
    slot.args.value = "[1]"
    slot.approve.click()
    assert engine.resumes == [] and "JSON object" in slot.status.value
    await panel.refresh()  # a refresh keeps what is being typed
    assert slot.args.value == "[1]"
    slot.args.value = '{"to": "alice"}'
    slot.approve.click()
    await panel.join()
    assert engine.resumes == [
        ("run", "s0", {"approved": True, "note": "", "override_args": {"to": "alice"}})]
    assert engine.keys == ["approval:c1"]


async def test_unedited_args_and_a_reject_send_no_override(
    store: ReadStore, engine: FakeEngine
) -> None:
    for wf in ("a", "b"):
        started(store, wf, 1)
        store.event(K.STEP_WAITING, wf, (0, "s0"), attempt=1, reason="ok?", key="k")
        store.step(wf, 0, "s0", StepState.WAITING, reason="ok?", wait_key="k",
                   wait_details={"tool": "t", "args": {"x": 1}})
    panel = ApprovalPanel(engine)
    await panel.refresh()
    panel.slots[0].approve.click()
    panel.slots[1].args.value = '{"x": 2}'
    panel.slots[1].note.value = "no"
    panel.slots[1].reject.click()
    await panel.join()
    assert engine.resumes == [("a", "s0", {"approved": True, "note": ""}),
                              ("b", "s0", {"approved": False, "note": "no"})]


def json_of(text: str) -> Any:
    return json.loads(text)


@pytest.mark.parametrize(("text", "said"), [
    ("null", "got null"), ("true", "got true"), ('"x"', 'got a string "x"'),
    ("[1, 2]", "got an array [1, 2]"), ("3.5", "got a number 3.5"),
])
def test_the_args_editor_refuses_a_non_object_in_jsons_words(text: str, said: str) -> None:
    # Review 14 #9: "got None", "got True", "got x" read like Python, not JSON.
    from agentq.widgets.approvals import ApprovalSlot
    from agentq.widgets.live.refresher import widgets

    slot = ApprovalSlot(widgets())
    slot.args_shown = '{"to": "bob"}'
    slot.args.value = text
    with pytest.raises(ValueError, match=rf"must be a JSON object, {re.escape(said)}$"):
        slot.edited_args()
