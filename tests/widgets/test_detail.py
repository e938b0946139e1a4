"""Detail views (issue 14): the pure renderers of a workflow, a step and a call, folded long
values, tracebacks, attempts with timings, usage; escaping of every user string; and the
`DetailPane` selection driving them on a real engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.queue import Job
from agentq.retry import Backoff, RetryPolicy
from agentq.store import MemoryStore
from agentq.widgets import Dashboard
from agentq.widgets.detail import DetailPane
from agentq.widgets.html import (
    call_detail_html,
    json_html,
    step_detail_html,
    workflow_detail_html,
)
from agentq.widgets.models.detail import attempts_of, load_detail
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine

PROBE = "<img src=x onerror=alert(1)>"


def probe_workflow(workflow_id: str = "wf-1") -> Workflow:
    """An XSS probe in a step name, an argument, an error, a call key and label."""

    async def fetch(ctx: StepContext) -> Any:
        if ctx.attempt == 1:
            raise ValueError(f"bad {PROBE}")
        out = await ctx.call(
            Job(f"k{PROBE}", lambda: {"answer": PROBE, "long": "x" * 1000}),
            label={"tool": PROBE}, usage={"input_tokens": 12, "output_tokens": 34},
        )
        return out

    async def approve(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", f"send {PROBE}?", details={"args": {"to": PROBE}})

    return Workflow(
        workflow_id,
        [StepDef(PROBE, fetch, retry=RetryPolicy(2, backoff=Backoff.fixed(0.0))),
         StepDef("approve", approve)],
        input={"arg": PROBE},
    )


def no_probe(html: str) -> None:
    assert PROBE not in html, "an unescaped probe"
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


async def test_details_show_everything_escaped(engine: WorkflowEngine, clock: FakeClock) -> None:
    result = await engine.run(probe_workflow())
    assert result.status == "waiting"
    await engine.resume("wf-1", "approve", {"approved": True, "note": PROBE}, key="ok")
    snap = await load_detail(engine.store, "wf-1")
    assert snap is not None
    now = clock.time()

    wf = workflow_detail_html(snap, now=now)
    no_probe(wf)
    assert 'data-kind="workflow"' in wf and wf.count('data-agentq="detail-step"') == 2
    assert 'data-agentq="detail-call"' in wf

    step = step_detail_html(snap, 0, now=now)
    no_probe(step)
    # Both attempts, the failed one with its error and a folded traceback.
    assert 'data-attempt="1" data-outcome="failed"' in step
    assert 'data-attempt="2" data-outcome="completed"' in step
    assert 'data-agentq="traceback"' in step and "ValueError" in step
    assert 'data-agentq="folded"' in step  # the 1000-character output is folded
    assert "worker" in step and "w1" in step

    wait = step_detail_html(snap, 1, now=now)
    no_probe(wait)
    assert "Resume input" in wait and "&quot;approved&quot;: true" in wait

    key = f"k{PROBE}"
    call = call_detail_html(snap, key, now=now)
    no_probe(call)
    assert 'data-agentq="usage"' in call and "input_tokens" in call and "34" in call


def test_json_html_folds_long_values_and_keeps_short_ones_open() -> None:
    short = json_html({"a": 1})
    assert "<details" not in short and "&quot;a&quot;: 1" in short
    folded = json_html({"text": "y" * 500})
    assert folded.startswith('<details data-agentq="folded"')
    assert "<summary" in folded and "characters" in folded
    many = json_html(list(range(20)))  # short text, many lines
    assert "<details" in many


def test_attempts_of_a_step_that_failed_then_completed() -> None:
    from datetime import UTC, datetime

    from agentq.events import Event, EventKind

    def ev(seq: int, kind: EventKind, at: float, **kw: Any) -> Event:
        return Event(seq, datetime.fromtimestamp(at, UTC), kind, "w", **kw)

    events = [
        ev(1, EventKind.WORKFLOW_STARTED, 0),
        ev(2, EventKind.STEP_STARTED, 1, step_index=0, step_name="s", attempt=1,
           worker_id="a", data={"lease_token": 1}),
        ev(3, EventKind.STEP_FAILED, 3, step_index=0, step_name="s", attempt=1,
           data={"reason": "error", "error": {"type": "E", "message": "m", "traceback": "tb"}}),
        ev(4, EventKind.STEP_STARTED, 4, step_index=0, step_name="s", attempt=2,
           worker_id="b", data={"lease_token": 2}),
        ev(5, EventKind.STEP_STARTED, 9, step_index=0, step_name="s", attempt=2,
           worker_id="c", data={"lease_token": 3}),  # took a lapsed lease over
        ev(6, EventKind.WORKFLOW_CANCELLED, 10, data={"reason": "stop"}),
    ]
    got = [(a.number, a.outcome, a.started, a.ended, a.worker_id, a.lease_token)
           for a in attempts_of(events, 0)]
    assert got == [(1, "failed", 1, 3, "a", 1), (2, "lost", 4, 9, "b", 2),
                   (2, "cancelled", 9, 10, "c", 3)]
    assert attempts_of(events, 0)[0].error == {"type": "E", "message": "m", "traceback": "tb"}


async def test_detail_pane_selection_reads_once_and_renders_items(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    await engine.run(probe_workflow())
    pane = DetailPane(engine.store, clock)
    pane.choices(["wf-1"])
    pane.workflows.value = "wf-1"  # what a click in the list does: a task reads it
    await pane.join()
    assert 'data-kind="workflow"' in pane.html.value
    labels = [label for label, _ in pane.items.options]
    assert labels[1].startswith("step 0 · <img")
    assert any(x.startswith("call k<img") for x in labels)
    pane.items.value = ("step", 1)  # no I/O: rendered from the snapshot
    assert 'data-kind="step"' in pane.html.value and 'data-index="1"' in pane.html.value
    # Live: a resume of the step shown is re-read on the next update.
    await engine.resume("wf-1", "approve", {"approved": False}, key="ok")
    rows = await engine.store.event_rows(after_seq=0)
    assert await pane.update(rows) is True
    assert "Resume input" in pane.html.value
    # A workflow that vanished (or a typo) is said in the pane, nothing raised.
    pane.choices(["nope"])
    pane.workflows.value = "nope"
    await pane.join()
    assert "not in the store" in pane.html.value


async def test_detail_pane_show_from_code_refuses_unknown_parts(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    await engine.run(probe_workflow())
    pane = DetailPane(engine.store, clock)
    await pane.show("wf-1", call=f"k{PROBE}")
    assert 'data-kind="call"' in pane.html.value
    with pytest.raises(KeyError, match="no step 7"):
        await pane.show("wf-1", step=7)


async def test_dashboard_offers_the_workflows_of_its_table(clock: FakeClock) -> None:
    store = MemoryStore()
    from agentq.queue import Queue

    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
        await engine.run(probe_workflow("a"))
        await engine.run(probe_workflow("b"))
        dash = Dashboard(engine)
        await dash.refresh()
        assert {v for _, v in dash.detail.workflows.options} == {"a", "b"}
        await dash.detail.show("a", step=1)
        await engine.resume("a", "approve", {"approved": True}, key="ok")
        await dash.refresh()  # the detail shown follows the new events
        assert "Resume input" in dash.detail.html.value
        await asyncio.wait_for(dash.stop(), 5)


async def test_a_failed_workflow_is_failed_in_the_timeline(engine: WorkflowEngine) -> None:
    # The store's WorkflowFailed names the step that failed; it is still a workflow event
    # (seen in the browser: the timeline said "running" for a failed workflow).
    async def boom(ctx: StepContext) -> Any:
        raise RuntimeError("down")

    await engine.run(Workflow("f", [StepDef("s", boom, retry=RetryPolicy(1))]))
    dash = Dashboard(engine)
    await dash.refresh()
    assert dash.timeline.model.get("f").state == "failed"  # type: ignore[union-attr]
    assert 'data-workflow="f" data-state="failed"' in dash.timeline.html.value
    snap = await load_detail(engine.store, "f")
    assert snap is not None
    assert [a.outcome for a in attempts_of(snap.events, 0)] == ["failed"]
    await dash.stop()


async def test_a_slow_selection_overtaken_by_the_next_one_is_dropped(
    clock: FakeClock,
) -> None:
    class Gated(MemoryStore):
        gate = asyncio.Event()

        async def get_workflow(self, workflow_id: str) -> Any:
            if workflow_id == "a":
                await self.gate.wait()
            return await super().get_workflow(workflow_id)

    from agentq.queue import Queue

    store = Gated()
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
        await engine.run(probe_workflow("a"))
        await engine.run(probe_workflow("b"))
        pane = DetailPane(store, clock)
        pane.choices(["a", "b"])
        pane.workflows.value = "a"  # its read waits
        await asyncio.sleep(0)
        shown = asyncio.Event()
        pane.html.observe(
            lambda c: shown.set() if 'data-workflow="b"' in c["new"] else None, names="value"
        )
        pane.workflows.value = "b"
        async with asyncio.timeout(2):  # b is read and shown while a's read still waits
            await shown.wait()
        Gated.gate.set()
        await pane.join()
        assert pane.snapshot is not None and pane.snapshot.workflow.workflow_id == "b"
        assert 'data-workflow="b"' in pane.html.value


async def test_a_workflows_deadline_is_in_its_detail(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def nap(ctx: StepContext) -> str:
        await ctx.sleep(60)
        return "woke"

    for wid, timeout in (("with", 600.0), ("without", None)):
        wf = Workflow(wid, [StepDef("nap", nap)], timeout=timeout)
        assert (await engine.run(wf)).status == "waiting"
    shown = await load_detail(engine.store, "with")
    bare = await load_detail(engine.store, "without")
    assert shown is not None and bare is not None
    html = workflow_detail_html(shown, now=clock.time())
    assert ">deadline<" in html and ">deadline<" not in workflow_detail_html(bare, now=0.0)
    assert "sleeping until" in step_detail_html(shown, 0, now=clock.time())
