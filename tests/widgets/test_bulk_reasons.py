"""Review s4 of "approve / deny all that match": step-level waits never answered in bulk,
precise skip reasons, workflows that fail after the answer, argument types, the filter's
text, no re-read while answering, a store failure mid-answer, a stopped bar's buttons."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import StoreError, WaitForInput
from agentq.events import EventKind
from agentq.store import StepRow, StepState
from agentq.widgets import ApprovalPanel, WaitFilter, answer_waits, pending_waits
from agentq.widgets.bulk import BulkBar
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine

from .test_bulk import start
from .test_widgets import real

__all__ = ["real"]


def asking(workflow_id: str, *, timeout: float | None = None, fail_after: bool = False) -> Workflow:
    """A keyed wait for tool ``refund`` (with a deadline if `timeout`), then maybe a failure."""

    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("approval:refund", "refund?",
                                        details={"tool": "refund"}, timeout=timeout)

    async def pay(ctx: StepContext) -> Any:
        raise RuntimeError("payment API down")

    steps = [StepDef("ask", ask)] + ([StepDef("pay", pay)] if fail_after else [])
    return Workflow(workflow_id, steps)


async def test_a_step_level_wait_is_never_answered_in_bulk(real: WorkflowEngine) -> None:
    async def plain(ctx: StepContext) -> Any:
        if not ctx.resumed or ctx.resume_input.get("round") != "final":
            raise WaitForInput("approve s-1?")
        return ctx.resume_input

    await real.run(Workflow("s-1", [StepDef("plain", plain)]))
    assert await pending_waits(real.store) == []  # not listed: a resume cannot name it
    listed = [r for r in await real.store.step_rows("s-1") if r.state is StepState.WAITING]
    # A colleague answers and the step asks again: the listed row now names no live wait.
    await real.resume("s-1", "plain", {"round": 1})
    report = await answer_waits(real, listed, approved=False, note="bulk deny")
    assert report.summary() == "0 denied, 1 step-level (not answered)"
    assert report.outcomes[0].detail == "step-level wait: answer it on its own"
    resumed = [e for e in await real.store.load_events("s-1") if e.kind is EventKind.STEP_RESUMED]
    assert len(resumed) == 1  # only the colleague's


async def test_skip_reasons_tell_timed_out_cancelled_and_answered_elsewhere(
    real: WorkflowEngine, clock: FakeClock,
) -> None:
    await real.run(asking("t-1", timeout=5))
    await real.run(asking("c-1"))
    await real.run(asking("a-1"))
    await real.run(asking("d-1", timeout=60))
    waits = await pending_waits(real.store, WaitFilter(tool="refund"))
    assert [r.workflow_id for r in waits] == ["t-1", "c-1", "a-1", "d-1"]
    later = clock.time() + 61  # d-1's deadline passed: not listed, whether or not timed out
    assert [r.workflow_id for r in await pending_waits(real.store, now=later)] == [
        "c-1", "a-1"]
    await real.cancel("c-1", "changed my mind")
    await real.resume("a-1", "ask", {"approved": True}, key="approval:refund")
    await clock.advance(6)  # t-1 times out (the engine's timer)
    report = await answer_waits(real, waits[:3], approved=True)
    assert [o.detail for o in report.outcomes] == [
        "timed out", "workflow cancelled", "answered elsewhere"]
    assert report.summary() == "0 approved, 1 timed out, 1 workflow cancelled, 1 answered elsewhere"


async def test_the_summary_says_when_approved_workflows_then_failed(real: WorkflowEngine) -> None:
    for wid in ("p-0", "p-1"):
        await real.run(asking(wid, fail_after=True))
    panel = ApprovalPanel(real)
    report = await panel.approve_matching(WaitFilter(tool="refund"))
    assert report.summary() == "2 approved (2 workflows then failed)"
    html = panel.bulk.status.value
    assert 'data-then-failed="2"' in html and html.count('data-agentq="bulk-outcome"') == 2
    await panel.stop()


async def test_wrong_argument_types_raise_a_type_error_naming_the_value(
    real: WorkflowEngine,
) -> None:
    panel = ApprovalPanel(real)  # an empty store: still refused up front
    for where in ("refund", {"tool": "refund"}):
        with pytest.raises(TypeError, match="where must be a WaitFilter or None, got"):
            await pending_waits(real.store, where)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=repr(where).replace("{", r"\{")):
            await panel.approve_matching(where)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"waits must hold StepRows .*got \('w-1', 'approve'\)"):
        await answer_waits(real, [("w-1", "approve")], approved=True)  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"waits must be StepRows .*got 'w-1'"):
        await answer_waits(real, "w-1", approved=True)  # type: ignore[arg-type]
    await panel.stop()


def test_the_filter_strips_casefolds_and_matches_the_decoded_argument_values() -> None:
    row = StepRow("order-1", 0, "agent", StepState.WAITING, wait_key="approval:x",
                  wait_details={"args": {"memo": 'say "hi"', "path": "C:\\tmp",
                                         "city": "İstanbul", "street": "Straße"}})
    for text in ('say "hi"', "C:\\tmp", "istanbul", "strasse", '"memo"'):
        assert WaitFilter(text=text).matches(row), text
    assert WaitFilter(workflow="order-1 ").matches(row)
    assert WaitFilter(workflow=" ") == WaitFilter()  # spaces only: empty, matches all
    assert not WaitFilter(text="bob").matches(row)


class Gated:
    """An engine whose resumes wait for `gate`, counting the store's step reads."""

    def __init__(self, engine: WorkflowEngine) -> None:
        self.engine, self.clock, self.gate, self.reads = engine, engine.clock, asyncio.Event(), 0
        self.store = self
        self._store = engine.store

    async def step_rows(self, workflow_id: str | None = None) -> list[StepRow]:
        self.reads += 1
        return await self._store.step_rows(workflow_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def resume(self, *args: Any, **kw: Any) -> Any:
        await self.gate.wait()
        return await self.engine.resume(*args, **kw)


async def test_no_reread_of_the_list_while_an_answer_runs(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, *((f"g-{i}", "refund", {}) for i in range(3)))
    gated = Gated(real)
    bar = BulkBar(gated, input_for=lambda a, n: {"approved": a, "note": n})
    bar.tool.value = "refund"
    await bar.join()
    assert len(bar.matching) == 3 and gated.reads == 3
    bar.approve.click()
    bar.note_rows([(0, 0, 0, 0, 0, EventKind.STEP_WAITING)])  # frozen while asked
    bar.yes.click()
    for _ in range(5):
        await asyncio.sleep(0)
    bar.note_rows([(0, 0, 0, 0, 0, EventKind.STEP_RESUMED)])  # frozen while answering
    bar.workflow.value = "g-"
    await asyncio.sleep(0)
    assert gated.reads == 3
    gated.gate.set()
    await bar.join()
    assert bar.report is not None and bar.report.summary() == "3 approved"
    assert gated.reads == 3  # one read at the end: no waiting workflow is left to read


async def test_a_store_failure_mid_answer_tells_recorded_failed_and_unknown(
    real: WorkflowEngine,
) -> None:
    seen: list[Any] = []
    await start(real, seen, ("r-1", "refund", {}), ("f-1", "refund", {}), ("u-1", "refund", {}))
    waits = await pending_waits(real.store)

    class Broken:
        clock = real.clock

        def __init__(self) -> None:
            self.store = self

        async def calls(self, workflow_id: str, step_index: int | None = None) -> Any:
            if workflow_id == "u-1":
                raise StoreError("store closed")
            return await real.store.calls(workflow_id, step_index)

        async def resume(self, workflow_id: str, *args: Any, **kw: Any) -> Any:
            if workflow_id == "r-1":
                await real.resume(workflow_id, *args, **kw)  # recorded, then the store fails
            raise StoreError("store closed")

    report = await answer_waits(Broken(), waits, approved=True)
    assert [o.outcome for o in report.outcomes] == ["approved", "failed", "unknown"]
    assert report.outcomes[0].detail == "recorded; then StoreError: store closed"
    assert report.summary() == (
        "1 approved (1 workflow then failed), 1 failed, 1 unknown (maybe recorded)")


async def test_a_stopped_panels_buttons_do_nothing(real: WorkflowEngine) -> None:
    seen: list[Any] = []
    await start(real, seen, ("s-4", "refund", {}))
    panel = ApprovalPanel(real)
    await panel.refresh()
    bar = panel.bulk
    bar.workflow.value = "s-4"
    await bar.join()
    bar.approve.click()
    await panel.stop()
    assert bar.yes.disabled and bar.approve.disabled and bar.workflow.disabled
    bar.yes.click()
    bar.approve.click()
    bar.no.click()
    await bar.join()
    assert bar.report is None and seen == []
    assert [r.workflow_id for r in await pending_waits(real.store)] == ["s-4"]


def test_a_bidi_control_in_a_skipped_waits_names_cannot_reverse_the_summary() -> None:
    """Like every other view (markup.esc_text): an RLO in a workflow id, a step name or a
    skip's detail is isolated in <bdi>, so the summary's own words read left to right."""
    from agentq.widgets import BulkOutcome, BulkReport
    from agentq.widgets.bulk import _summary_html

    rlo = "\u202eorder"
    report = BulkReport(approved=True, outcomes=(
        BulkOutcome(rlo, f"ask{rlo}", "k", "skipped", f"answered elsewhere {rlo}"),
    ))
    page = _summary_html(report)
    assert page.count("<bdi>") == 3 and "</bdi> · <bdi>" in page
