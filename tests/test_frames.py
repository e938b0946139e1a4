"""agentq.frames: fixed columns and dtypes (also empty), values, and the docs/frames.md recipes.

Also `calls_frame` (durable calls and waits) from a real engine run with calls and a wait."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from widgets.fakes import T0, ReadStore, Tools, agent_workflow

from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.frames import (
    CALL_DTYPES,
    EVENT_DTYPES,
    LANE_DTYPES,
    STEP_DTYPES,
    calls_frame,
    events_frame,
    lanes_frame,
    steps_frame,
)
from agentq.outcomes import ErrorInfo
from agentq.queue import Job, LaneConfig, Priority, Queue
from agentq.retry import Backoff, RetryPolicy
from agentq.store import EVENT_COLUMNS, CallState, MemoryStore, SqliteStore, StepState
from agentq.workflows import StepContext, StepDef, WaitForInput, Workflow, WorkflowEngine

K = EventKind
DOCS = Path(__file__).resolve().parents[1] / "docs" / "frames.md"


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    return {name: str(dtype) for name, dtype in frame.dtypes.items()}


def history() -> ReadStore:
    """Two workflows: one with a timeout retry and an approval, one that fails."""
    s = ReadStore()
    a, b = "order-1", "order-2"
    s.event(K.WORKFLOW_STARTED, a, at=T0, input={"n": 1})
    s.event(K.STEP_STARTED, a, (0, "fetch"), at=T0, attempt=1, worker_id="w1")
    s.event(K.STEP_FAILED, a, (0, "fetch"), at=T0 + 0.5, attempt=1, worker_id="w1",
            reason="timeout")
    s.event(K.RETRY_SCHEDULED, a, (0, "fetch"), at=T0 + 0.5, attempt=1)
    s.event(K.STEP_STARTED, a, (0, "fetch"), at=T0 + 1, attempt=2, worker_id="w1")
    s.event(K.STEP_COMPLETED, a, (0, "fetch"), at=T0 + 1.25, attempt=2, worker_id="w1",
            output={"hits": [1, 2]})
    s.event(K.STEP_STARTED, a, (1, "send"), at=T0 + 2, attempt=1, worker_id="w1")
    s.event(K.STEP_WAITING, a, (1, "send"), at=T0 + 2, attempt=1, reason="send it?")
    s.event(K.STEP_RESUMED, a, (1, "send"), at=T0 + 62, input={"approved": True, "note": ""})
    s.event(K.STEP_STARTED, a, (1, "send"), at=T0 + 62, attempt=1, worker_id="w1")
    s.event(K.STEP_COMPLETED, a, (1, "send"), at=T0 + 63, attempt=1, output="sent")
    s.event(K.WORKFLOW_COMPLETED, a, at=T0 + 63)
    s.event(K.WORKFLOW_STARTED, b, at=T0 + 3)
    s.event(K.STEP_STARTED, b, (0, "fetch"), at=T0 + 3, attempt=1, worker_id="w2")
    s.event(K.STEP_FAILED, b, (0, "fetch"), at=T0 + 4, attempt=1, reason="ValueError: bad")
    s.event(K.WORKFLOW_FAILED, b, at=T0 + 4, reason="ValueError: bad")
    s.step(a, 0, "fetch", StepState.COMPLETED, attempt=2, worker_id="w1", output={"hits": [1, 2]},
           started_at=T0, finished_at=T0 + 1.25)
    s.step(a, 1, "send", StepState.COMPLETED, attempt=1, worker_id="w1", output="sent",
           started_at=T0 + 2, finished_at=T0 + 63, resumed=True)
    s.step(b, 0, "fetch", StepState.FAILED, attempt=1, worker_id="w2", reason="ValueError: bad",
           error=ErrorInfo("ValueError", "bad"), started_at=T0 + 3, finished_at=T0 + 4)
    s.step(b, 1, "send", StepState.PENDING)
    return s


async def test_empty_frames_have_the_fixed_columns_and_dtypes() -> None:
    ev = await events_frame(ReadStore())
    assert list(ev.columns) == list(EVENT_COLUMNS) and len(ev) == 0
    assert dtypes(ev) == EVENT_DTYPES
    assert list(ev.kind.cat.categories) == [k.value for k in EventKind]
    steps = await steps_frame(ReadStore())
    assert dtypes(steps) == STEP_DTYPES and len(steps) == 0
    assert list(steps.status.cat.categories) == [s.value for s in StepState]


async def test_events_frame_values_and_dtypes() -> None:
    store = history()
    ev = await events_frame(store)
    assert dtypes(ev) == EVENT_DTYPES
    assert list(ev.kind.cat.categories) == [k.value for k in EventKind]
    assert ev.seq.tolist() == list(range(1, 17))
    assert ev["at"].iloc[2] == pd.Timestamp(T0 + 0.5, unit="s", tz="UTC")
    assert ev.step_index.isna().sum() == 4 and ev.step_index.iloc[1] == 0
    assert ev.output.iloc[5] == {"hits": [1, 2]} and ev.output.iloc[0] is None
    assert ev.input.iloc[0] == {"n": 1} and ev.input.iloc[8] == {"approved": True, "note": ""}
    assert ev.reason.iloc[2] == "timeout" and ev.reason.isna().sum() == 12
    assert store.calls == {"event_rows": 1}  # one read, column rows, never Event objects


async def test_events_frame_since_and_workflow_filter() -> None:
    store = history()
    assert (await events_frame(store, since=14)).seq.tolist() == [15, 16]
    assert (await events_frame(store, "order-2")).seq.tolist() == [13, 14, 15, 16]
    assert (await events_frame(store, "order-2", since=15)).seq.tolist() == [16]
    assert len(await events_frame(store, since=16)) == 0
    with pytest.raises(ValueError, match="since"):
        await events_frame(store, since=-1)


async def test_timestamps_are_microsecond_exact_utc() -> None:
    store = ReadStore()
    store.event(K.WORKFLOW_STARTED, "w", at=1_767_225_600.123456)
    ev = await events_frame(store)
    assert ev["at"].iloc[0] == pd.Timestamp("2026-01-01 00:00:00.123456", tz="UTC")


async def test_steps_frame_values() -> None:
    steps = await steps_frame(history())
    assert dtypes(steps) == STEP_DTYPES
    assert steps.status.tolist() == ["completed", "completed", "failed", "pending"]
    assert steps.duration.iloc[0] == pd.Timedelta(seconds=1.25)
    assert pd.isna(steps.duration.iloc[3]) and pd.isna(steps.started_at.iloc[3])
    assert steps.error.iloc[2] == "ValueError: bad" and pd.isna(steps.error.iloc[0])
    assert steps.output.iloc[0] == {"hits": [1, 2]}


# --- the recipes of docs/frames.md, each one line, each with its expected value -------------


def recipe(name: str) -> str:
    """Return the code line that follows the heading `name` in docs/frames.md."""
    text = DOCS.read_text()
    section = text.split(f"### {name}\n", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1, f"recipe {name!r} is not one line: {lines}"
    return lines[0]


def run_recipe(name: str, **frames: pd.DataFrame) -> Any:
    return eval(recipe(name), {"pd": pd}, frames)


async def test_recipe_retries_per_step() -> None:
    ev = await events_frame(history())
    out = run_recipe("Retries per step", ev=ev)
    assert isinstance(out, pd.Series)
    assert out.to_dict() == {("order-1", "fetch"): 1}


async def test_recipe_time_waiting_for_approval() -> None:
    ev = await events_frame(history())
    out = run_recipe("Time spent waiting for approval", ev=ev)
    assert isinstance(out, pd.Series)
    assert out.to_dict() == {("order-1", "send"): pd.Timedelta(seconds=60)}


async def test_recipe_failure_reasons() -> None:
    ev = await events_frame(history())
    out = run_recipe("Failure reasons", ev=ev)
    assert isinstance(out, pd.Series)
    assert out.to_dict() == {"timeout": 1, "ValueError: bad": 1}


async def test_recipe_step_durations() -> None:
    steps = await steps_frame(history())
    out = run_recipe("Step durations", steps=steps)
    assert isinstance(out, pd.DataFrame)
    assert out.loc["fetch", "max"] == pd.Timedelta(seconds=1.25)
    assert out.loc["send", "count"] == 1


def test_frames_need_pandas_and_name_the_extra() -> None:
    code = (
        "import sys, asyncio; sys.modules['pandas'] = None\n"
        "from agentq.frames import events_frame\n"
        "from agentq.errors import MissingExtraError\n"
        "try:\n    asyncio.run(events_frame(None))\n"
        "except MissingExtraError as e:\n    assert \"agentq[notebook]\" in str(e), e\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- on the real stores, filled by the real engine ------------------------------------------



@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    s = MemoryStore() if request.param == "memory" else await SqliteStore.open(tmp_path / "f.db")
    yield s
    await s.close()


async def test_frames_of_a_real_run_on_every_store(store: Any, clock: FakeClock) -> None:
    async def flaky(ctx: StepContext) -> dict[str, Any]:
        if ctx.attempt == 1:
            raise ConnectionError("reset")
        return {"ids": [1, 2], "note": "ünïcode"}

    async def approve(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("ok?")
        return ctx.resume_input

    retry = RetryPolicy(max_attempts=2, backoff=Backoff.fixed(1.0))
    wf = Workflow("w", [StepDef("flaky", flaky, retry=retry), StepDef("approve", approve)])
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", clock=clock)
        run = asyncio.ensure_future(engine.run(wf))
        async with asyncio.timeout(5):
            await clock.wait_for_sleepers(1)
            while not run.done():
                await clock.advance(1.0)
        assert run.result().status == "waiting"
        await clock.advance(60)
        await engine.resume("w", "approve", {"approved": True})
        await engine.close()

    ev = await events_frame(store)
    assert dtypes(ev) == EVENT_DTYPES
    assert ev.kind.tolist() == [
        "WorkflowStarted", "StepStarted", "StepFailed", "RetryScheduled", "StepStarted",
        "StepCompleted", "StepStarted", "StepWaiting", "StepResumed", "StepStarted",
        "StepCompleted", "WorkflowCompleted",
    ]
    assert ev.output.iloc[5] == {"ids": [1, 2], "note": "ünïcode"}
    assert ev.input.iloc[8] == {"approved": True}
    assert (ev["at"].diff().dropna() >= pd.Timedelta(0)).all()
    assert run_recipe("Retries per step", ev=ev).to_dict() == {("w", "flaky"): 1}
    waited = run_recipe("Time spent waiting for approval", ev=ev)
    wait_at = ev["at"][ev.kind == "StepWaiting"].iloc[0]
    resumed_at = ev["at"][ev.kind == "StepResumed"].iloc[0]
    assert waited.to_dict() == {("w", "approve"): resumed_at - wait_at}
    assert waited.iloc[0] >= pd.Timedelta(seconds=60)
    assert run_recipe("Failure reasons", ev=ev).to_dict() == {"ConnectionError: reset": 1}
    steps = await steps_frame(store)
    assert dtypes(steps) == STEP_DTYPES
    assert steps.status.tolist() == ["completed", "completed"]
    assert steps.attempt.tolist() == [2, 1] and steps.worker_id.tolist() == ["w1", "w1"]


async def test_lanes_frame_and_the_throughput_recipe(clock: FakeClock) -> None:
    lanes = {Priority.HIGH: LaneConfig(capacity=5, permits=2)}
    async with Queue(lanes, clock=clock) as queue:
        before = await lanes_frame(queue)
        assert dtypes(before) == LANE_DTYPES
        assert before.priority.tolist() == ["high", "medium", "low"]
        assert list(before.priority.cat.categories) == ["high", "medium", "low"]
        assert before.permits.tolist() == [2, 5, 5] and before.capacity.tolist()[0] == 5
        def one() -> int:
            return 1

        for i in range(6):
            await queue.push_and_wait(Job(f"h{i}", one, Priority.HIGH))
        await queue.push_and_wait(Job("h0", one, Priority.HIGH))  # a cache hit
        after = await lanes_frame(queue)
    assert after.completed.tolist() == [6, 0, 0] and after.cache_hits.tolist() == [1, 0, 0]
    after["at"] = before["at"] + pd.Timedelta(seconds=2)  # as if taken 2 s later
    out = run_recipe("Per-lane throughput", before=before, after=after)
    assert out.per_second.tolist() == [3.0, 0.0, 0.0]


async def test_times_beyond_datetime64_become_nat_instead_of_wrapping() -> None:
    store = MemoryStore()
    await store.start_workflow("far", ["s"], None, 1_767_225_600.0)
    await store.claim_step("far", 0, "w", 1e10, 1_767_225_600.0)  # expires around year 2334
    frame = await steps_frame(store)
    assert frame["lease_expires_at"].isna().all()
    assert frame["started_at"].iloc[0].year == 2026


async def test_steps_frame_shows_the_definition_of_each_workflow() -> None:
    store = MemoryStore()
    await store.start_workflow("plain", ["s"], None, T0)
    await store.start_workflow("made", ["a", "b"], None, T0, definition="order")
    frame = await steps_frame(store)
    assert dtypes(frame) == STEP_DTYPES
    assert frame[["workflow_id", "definition"]].astype(object).where(
        frame[["workflow_id", "definition"]].notna(), None
    ).values.tolist() == [["plain", None], ["made", "order"], ["made", "order"]]


# --- calls_frame: the durable calls and waits ------------------------------------------------


async def test_calls_frame_empty_has_the_fixed_columns_and_dtypes() -> None:
    calls = await calls_frame(MemoryStore())
    assert dtypes(calls) == CALL_DTYPES and len(calls) == 0
    assert list(calls.kind.cat.categories) == ["call", "wait"]
    assert list(calls.status.cat.categories) == [s.value for s in CallState]
    assert run_recipe("Cost per tool", calls=calls).to_dict() == {}
    assert len(run_recipe("Calls in doubt", calls=calls)) == 0


async def test_calls_frame_of_a_real_run_on_every_store(store: Any, clock: FakeClock) -> None:
    tools = Tools()
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", clock=clock)
        assert (await engine.run(agent_workflow(tools))).status == "waiting"
        waiting = await calls_frame(store, "trip")
        await clock.advance(5)
        done = await engine.resume("trip", "agent", {"approved": True}, key="approve")
        assert done.status == "completed" and done.output == {"approved": True}
        await engine.close()
    # The failed booking failed the first attempt; the retry answered the rest from the log.
    assert tools.ran == ["model", "search:0", "search:1", "book:2", "book:2"]

    assert dtypes(waiting) == CALL_DTYPES
    assert waiting.key.tolist() == ["plan", "tool:0", "tool:1", "tool:2", "approve"]
    assert waiting.kind.tolist() == ["call"] * 4 + ["wait"]
    assert waiting.status.tolist() == ["completed"] * 4 + ["waiting"]
    assert waiting.runs.tolist() == [1, 1, 1, 2, 1]
    assert waiting.label_kind.tolist() == ["model", "tool", "tool", "tool", pd.NA]
    assert waiting.tool.tolist() == [pd.NA, "search", "search", "book", pd.NA]
    assert waiting.label.iloc[3] == {"kind": "tool", "tool": "book"}
    assert waiting.label.iloc[4] is None
    assert waiting.lane.tolist() == ["medium", "high", "high", "high", pd.NA]
    assert waiting.attempt.tolist()[:4] == [1, 1, 1, 2]
    assert waiting.usage.iloc[0] == {"tokens": 100} and waiting.usage.iloc[4] is None
    assert waiting.output.iloc[3] == {"tool": "book", "i": 2}
    assert (waiting.step_index == 0).all() and (waiting.workflow_id == "trip").all()
    assert waiting.duration.iloc[:4].notna().all() and pd.isna(waiting.duration.iloc[4])
    assert waiting.started_at.notna().all() and pd.isna(waiting.finished_at.iloc[4])
    wait = waiting.iloc[4]
    assert wait.reason == "book it?"
    assert wait.details == {"tool": "book", "args": {"to": "<script>"}}
    assert wait.deadline - wait.started_at == pd.Timedelta(seconds=60)
    assert run_recipe("Cost per tool", calls=waiting).to_dict() == {"book": 30.0, "search": 30.0}
    assert len(run_recipe("Calls in doubt", calls=waiting)) == 0

    after = await calls_frame(store)
    assert dtypes(after) == CALL_DTYPES
    answered = after.iloc[4]
    assert answered.status == "answered" and answered.output == {"approved": True}
    assert answered.duration == 5.0 and answered.finished_at - answered.started_at == pd.Timedelta(
        seconds=5
    )

    # The event log names each call's key and label.
    ev = await events_frame(store, "trip")
    assert dtypes(ev) == EVENT_DTYPES
    started = ev[ev.kind == "CallStarted"]
    assert started.key.tolist() == ["plan", "tool:0", "tool:1", "tool:2", "tool:2"]
    assert started.label.iloc[1] == {"kind": "tool", "tool": "search"}
    assert ev[ev.kind == "CallFailed"].key.tolist() == ["tool:2"]
    assert ev[ev.kind.isin(["StepWaiting", "StepResumed"])].key.tolist() == ["approve"] * 2
    assert ev[ev.kind == "StepStarted"].key.isna().all() and ev.label.iloc[0] is None


async def test_calls_in_doubt_and_times_beyond_datetime64(store: Any) -> None:
    await store.start_workflow("crashed", ["s"], None, T0)
    claimed = await store.claim_step("crashed", 0, "w1", 10.0, T0)
    ex = claimed.execution
    await store.start_call(ex, "pay", fingerprint=None, lane="high",
                           label={"kind": "tool", "tool": 7, "x": "<b>"}, now=T0)
    await store.start_call(ex, "mail", fingerprint=None, lane=None, label=None, now=T0 + 1)
    await store.complete_call(ex, "mail", output=None, usage=None, duration=0.25, now=T0 + 2)
    await store.wait_step(ex, "later?", T0 + 3, key="far", deadline=1e10)  # year 2286
    calls = await calls_frame(store)
    assert dtypes(calls) == CALL_DTYPES
    assert calls.status.tolist() == ["started", "completed", "waiting"]
    assert calls.tool.tolist() == ["7", pd.NA, pd.NA]  # not a string: its JSON text
    assert pd.isna(calls.duration.iloc[0]) and calls.duration.iloc[1] == 0.25
    assert calls.deadline.isna().all()  # beyond datetime64[ns]: NaT, not wrapped around
    doubt = run_recipe("Calls in doubt", calls=calls)
    assert doubt.key.tolist() == ["pay"] and doubt.tool.tolist() == ["7"]
    assert (await calls_frame(store, "other")).empty
