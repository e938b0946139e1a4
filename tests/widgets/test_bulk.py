"""Approve / deny all waits that match a filter (`WaitFilter`, `answer_waits`, `BulkBar`), on
the real engine, queue and MemoryStore: the filter, the count, exactly the waits confirmed,
waits answered meanwhile skipped, a failing resume not stopping the others, escaping."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import NotWaitingError, PayloadError
from agentq.store import StepRow, StepState
from agentq.widgets import ApprovalPanel, WaitFilter, answer_waits, pending_waits
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

from .test_widgets import real

PROBE = "<img src=x onerror=alert(1)>"
__all__ = ["real"]  # the fixture: the real engine, queue and MemoryStore on a FakeClock


def tool_call(workflow_id: str, tool: str, args: dict[str, Any], seen: list[Any]) -> Workflow:
    """One step that asks before calling `tool` with `args`, as an agent's approval does."""

    async def ask(ctx: StepContext) -> Any:
        answer = await ctx.wait_for_input(
            f"approval:{tool}", f"run {tool}?", details={"tool": tool, "args": args}
        )
        seen.append((workflow_id, answer))
        return answer

    return Workflow(workflow_id, [StepDef("agent", ask)])


async def start(engine: WorkflowEngine, seen: list[Any], *specs: tuple[str, str, Any]) -> None:
    for workflow_id, tool, args in specs:
        result = await engine.run(tool_call(workflow_id, tool, args, seen))
        assert result.status == RunStatus.WAITING


def row(workflow_id: str, step: str = "agent", **kw: Any) -> StepRow:
    return StepRow(workflow_id, 0, step, StepState.WAITING, **kw)


def test_the_filter_matches_workflow_id_tool_or_step_and_argument_text() -> None:
    refund = row("order-7", wait_key="approval:refund", reason="run refund?",
                 wait_details={"tool": "refund", "args": {"amount": 42, "to": "Alice"}})
    email = row("order-8", step="notify", reason="send it?")
    assert WaitFilter().matches(refund) and WaitFilter().matches(email)
    assert WaitFilter(workflow="ORDER-7").matches(refund)
    assert not WaitFilter(workflow="order-8").matches(refund)
    assert WaitFilter(tool="Refund").matches(refund) and WaitFilter(tool="notif").matches(email)
    assert not WaitFilter(tool="refund").matches(email)
    assert WaitFilter(text="alice").matches(refund) and WaitFilter(text='"amount": 42').matches(
        refund)
    assert WaitFilter(text="send it").matches(email)  # the reason counts for a plain wait
    assert not WaitFilter(workflow="order", tool="refund", text="bob").matches(refund)
    with pytest.raises(TypeError, match="WaitFilter tool must be a str, got 3"):
        WaitFilter(tool=3)  # type: ignore[arg-type]


async def test_the_bar_lists_and_counts_the_matching_waits_and_asks_with_the_count(
    real: WorkflowEngine,
) -> None:
    seen: list[Any] = []
    await start(real, seen, ("order-1", "refund", {"amount": 10}),
                ("order-2", "refund", {"amount": 99}), ("order-3", "email", {"to": "bob"}),
                ("other-4", "refund", {"amount": 5}))
    panel = ApprovalPanel(real, slots=2)
    await panel.refresh()
    bar = panel.bulk
    assert not bar.matching and bar.approve.disabled  # nothing read before a filter is used
    bar.workflow.value = "order"
    bar.tool.value = "refund"
    await bar.join()
    assert [r.workflow_id for r in bar.matching] == ["order-1", "order-2"]
    assert 'data-agentq="bulk-matches" data-count="2"' in bar.matches.value
    assert "2 waits match" in bar.matches.value and not bar.approve.disabled
    bar.deny.click()
    assert 'data-count="2"' in bar.question.value and "Deny the 2 waits listed?" in (
        bar.question.value)
    assert bar.yes.description == "Yes, deny 2" and bar.approve.disabled
    bar.no.click()
    await bar.join()
    assert bar.asked is None and not bar.approve.disabled and seen == []
    await panel.stop()


async def test_yes_answers_exactly_the_waits_listed_when_confirmed(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, ("a-1", "refund", {}), ("a-2", "refund", {}))
    panel = ApprovalPanel(real)
    await panel.refresh()
    bar = panel.bulk
    bar.tool.value = "refund"
    await bar.join()
    bar.note.value = "batch ok"
    bar.approve.click()
    await start(real, seen, ("a-3", "refund", {}))  # starts waiting after the question
    await panel.refresh()
    await bar.join()
    assert "Approve the 2 waits listed?" in bar.question.value  # the question's set is kept
    bar.yes.click()
    bar.yes.click()  # a second click does nothing
    await bar.join()
    assert sorted(seen) == [("a-1", {"approved": True, "note": "batch ok"}),
                            ("a-2", {"approved": True, "note": "batch ok"})]
    assert bar.report is not None and bar.report.summary() == "2 approved"
    assert 'data-agentq="bulk-summary" data-answered="2" data-skipped="0"' in bar.status.value
    assert [(await real.store.get_workflow(w)).state.value  # type: ignore[union-attr]
            for w in ("a-1", "a-2", "a-3")] == ["completed", "completed", "waiting"]
    assert [r.workflow_id for r in bar.matching] == ["a-3"]  # the list is read again after
    await panel.stop()


async def test_a_wait_answered_meanwhile_is_skipped_and_reported(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, ("b-1", "refund", {}), ("b-2", "refund", {}),
                ("b-3", "refund", {}), ("b-4", "refund", {}))
    waits = await pending_waits(real.store, WaitFilter(tool="refund"))
    assert len(waits) == 4
    # Someone else answers b-2 first (a click, a script, another person).
    await real.resume("b-2", "agent", {"approved": False, "note": "no"}, key="approval:refund")
    report = await answer_waits(real, waits, approved=True, note="")
    assert report.summary() == "3 approved, 1 answered elsewhere"
    assert [o.outcome for o in report.outcomes] == ["approved", "skipped", "approved",
                                                     "approved"]
    assert report.outcomes[1].detail == "answered elsewhere"
    assert seen.count(("b-2", {"approved": False, "note": "no"})) == 1  # not answered twice


async def test_a_wait_that_ends_between_the_check_and_the_resume_is_skipped(
    real: WorkflowEngine,
) -> None:
    seen: list[Any] = []
    await start(real, seen, ("c-1", "refund", {}))
    waits = await pending_waits(real.store)

    class Racing:  # answers the wait just before the bulk resume does
        store = real.store

        async def resume(self, *args: Any, **kw: Any) -> Any:
            await real.resume(*args, **kw)
            return await real.resume(*args, **kw)

    report = await answer_waits(Racing(), waits, approved=True)
    assert report.summary() == "0 approved, 1 answered elsewhere"
    assert isinstance(report.outcomes[0].error, NotWaitingError)


async def test_a_failing_resume_does_not_stop_the_others(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, ("d-1", "refund", {}), ("d-2", "refund", {}),
                ("d-3", "refund", {}))

    class Flaky:  # d-2's resume fails: a refused payload, then a bug
        store, clock = real.store, real.clock
        error: Exception = PayloadError("too large")

        async def resume(self, workflow_id: str, *args: Any, **kw: Any) -> Any:
            if workflow_id == "d-2":
                raise self.error
            return await real.resume(workflow_id, *args, **kw)

    flaky = Flaky()
    panel = ApprovalPanel(flaky)
    report = await panel.approve_matching(WaitFilter(workflow="d-"))
    assert report.summary() == "2 approved, 1 failed"
    assert [o.outcome for o in report.outcomes] == ["approved", "failed", "approved"]
    assert "PayloadError: too large" in panel.bulk.status.value
    assert 'data-failed="1"' in panel.bulk.status.value and panel.error is None
    flaky.error = RuntimeError("a bug")  # not an outcome: shown, and re-raised by stop()
    report = await panel.deny_matching(WaitFilter(workflow="d-2"), note="sorry")
    assert report.failed == 1
    with pytest.raises(RuntimeError, match="a bug"):
        await panel.stop()


async def test_a_probe_in_a_tool_argument_shows_as_text_in_the_list_and_summary(
    real: WorkflowEngine,
) -> None:
    seen: list[Any] = []
    await start(real, seen, (f"x-{PROBE}", PROBE, {"q": PROBE}))
    panel = ApprovalPanel(real)
    await panel.refresh()
    panel.bulk.text.value = "onerror"
    await panel.bulk.join()
    shown = panel.bulk.matches.value
    assert "1 wait matches" in shown and "<img" not in shown
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown
    report = await panel.deny_matching(WaitFilter(text="onerror"), note=PROBE)
    assert report.summary() == "1 denied" and "<img" not in panel.bulk.status.value
    assert seen == [(f"x-{PROBE}", {"approved": False, "note": PROBE})]
    await panel.stop()


async def test_new_events_keep_the_list_current_once_a_filter_is_set(
    real: WorkflowEngine,
) -> None:
    seen: list[Any] = []
    panel = ApprovalPanel(real)
    await panel.refresh()
    panel.bulk.tool.value = "refund"
    await panel.bulk.join()
    assert "0 waits match" in panel.bulk.matches.value and panel.bulk.approve.disabled
    await start(real, seen, ("e-1", "refund", {}))
    await panel.refresh()
    await panel.bulk.join()
    assert [r.workflow_id for r in panel.bulk.matching] == ["e-1"]
    await panel.stop()


async def test_answer_waits_checks_its_arguments(real: WorkflowEngine) -> None:
    with pytest.raises(TypeError, match="approved must be a bool, got 'yes'"):
        await answer_waits(real, [], approved="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="note must be a str, got None"):
        await answer_waits(real, [], approved=True, note=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be >= 1, got 0"):
        await answer_waits(real, [], approved=True, concurrency=0)
    assert (await answer_waits(real, [], approved=True)).summary() == "0 approved"


async def test_at_most_concurrency_resumes_run_at_once(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, *((f"f-{i}", "refund", {}) for i in range(5)))
    running, most = 0, 0
    gate, two = asyncio.Event(), asyncio.Event()

    class Slow:
        store = real.store

        async def resume(self, *args: Any, **kw: Any) -> Any:
            nonlocal running, most
            running += 1
            most = max(most, running)
            if running == 2:
                two.set()
            await gate.wait()
            running -= 1
            return await real.resume(*args, **kw)

    task = asyncio.create_task(
        answer_waits(Slow(), await pending_waits(real.store), approved=True, concurrency=2)
    )
    await two.wait()
    for _ in range(5):  # let any further resume start, if the limit did not hold
        await asyncio.sleep(0)
    gate.set()
    assert (await task).summary() == "5 approved" and most == 2


async def test_the_panels_join_waits_for_the_bulk_bars_work_too(real: WorkflowEngine) -> None:
    """`ApprovalPanel.join` is what the dashboard awaits before its last refresh: the bulk
    bar's reads and answers count, not only the slots' resumes."""
    seen: list[Any] = []
    await start(real, seen, ("j-1", "refund", {}))
    panel = ApprovalPanel(real)
    await panel.refresh()
    panel.bulk.tool.value = "refund"  # starts a read of the matching waits, as a task
    await panel.join()
    assert [r.workflow_id for r in panel.bulk.matching] == ["j-1"]
    assert "1 wait matches" in panel.bulk.matches.value
    await panel.stop()


async def test_a_filtered_list_is_read_again_on_idle_ticks_when_no_event_says_so(
    real: WorkflowEngine,
) -> None:
    """A wait whose deadline passes ends without an event until an engine records it: the
    filtered list drops it at the first idle tick `REREAD_SECONDS` later (and a read that
    raced an answer is mended the same way)."""
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("approval:refund", "refund?", timeout=3.0,
                                        details={"tool": "refund", "args": {}})

    result = await real.run(Workflow("d-1", [StepDef("agent", ask)]))
    assert result.status == RunStatus.WAITING
    panel = ApprovalPanel(real)
    await panel.refresh()
    panel.bulk.tool.value = "refund"
    await panel.bulk.join()
    assert [r.workflow_id for r in panel.bulk.matching] == ["d-1"]
    panel.tick()  # the first timed read starts the count
    await panel.bulk.join()
    clock = real.clock
    assert isinstance(clock, FakeClock)
    await clock.advance(4.0)  # the deadline passed; no event yet, and no tick is due
    panel.tick()
    await panel.bulk.join()
    assert [r.workflow_id for r in panel.bulk.matching] == ["d-1"]
    await clock.advance(1.0)  # 5 s since the last timed read
    panel.tick()
    await panel.bulk.join()
    assert panel.bulk.matching == () and "0 waits match" in panel.bulk.matches.value
    await panel.stop()
