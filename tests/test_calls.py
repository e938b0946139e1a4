"""Durable calls and waits inside a step: `ctx.call` and `ctx.wait_for_input` (issue 10)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import (
    InputTimeout,
    JobFailed,
    KeyConflictError,
    NotWaitingError,
    PayloadError,
    StepContextError,
)
from agentq.queue import Job, JobOutcomeStore, LaneConfig, Priority, Queue
from agentq.retry import RetryPolicy
from agentq.store import DurableStore, MemoryStore, SqliteStore
from agentq.workflows import (
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowEngine,
)
from agentq.workflows.calls import MAX_WAIT_TIMEOUT, call_queue_key

pytestmark = pytest.mark.timeout(60)

LANES = {
    Priority.MEDIUM: LaneConfig(capacity=50, permits=4),
    Priority.HIGH: LaneConfig(capacity=50, permits=2),
}


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(LANES, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def events(store: DurableStore, workflow_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(str(e.kind), dict(e.data)) for e in await store.load_events(workflow_id)]


class World:
    """The outside world: counts how often each tool really ran."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()
        self.fail_once: set[str] = set()

    async def tool(self, name: str, value: Any = None) -> Any:
        self.ran[name] += 1
        if name in self.fail_once:
            self.fail_once.discard(name)
            raise ConnectionError(f"{name} is down")
        return {"tool": name, "value": value}


async def test_calls_are_recorded_and_a_step_retry_reruns_only_the_failed_call(
    engine: WorkflowEngine,
) -> None:
    world = World()
    world.fail_once.add("c")

    async def body(ctx: StepContext) -> list[Any]:
        a = await ctx.call(Job("a", functools.partial(world.tool, "a", 1)))
        b = await ctx.call(
            Job("b", functools.partial(world.tool, "b", 2), Priority.HIGH),
            label={"kind": "tool", "tool": "b"},
            usage={"tokens": 12},
        )
        c = await ctx.call(Job("c", functools.partial(world.tool, "c", 3)))
        return [a, b, c]

    wf = Workflow("wf-calls", [StepDef("s", body, retry=RetryPolicy(2))])
    result = await engine.run(wf)
    assert result.status is RunStatus.COMPLETED
    assert result.output == [
        {"tool": "a", "value": 1}, {"tool": "b", "value": 2}, {"tool": "c", "value": 3},
    ]
    assert world.ran == Counter({"a": 1, "b": 1, "c": 2})  # only the failed call ran again
    log = await events(engine.store, "wf-calls")
    kinds = [k for k, _ in log]
    assert kinds.count("CallStarted") == 4 and kinds.count("CallCompleted") == 3
    assert kinds.count("CallFailed") == 1
    started_b = next(p for k, p in log if k == "CallStarted" and p["key"] == "b")
    assert started_b["label"] == {"kind": "tool", "tool": "b"}
    assert started_b["lane"] == "high"
    done_b = next(p for k, p in log if k == "CallCompleted" and p["key"] == "b")
    assert done_b["usage"] == {"tokens": 12} and done_b["duration"] >= 0
    failed = next(p for k, p in log if k == "CallFailed")
    assert failed["key"] == "c" and "c is down" in failed["reason"]
    rows = {row.key: row for row in await engine.store.calls("wf-calls")}
    assert {k: r.state for k, r in rows.items()} == {
        "a": "completed", "b": "completed", "c": "completed"
    }


async def test_a_failed_call_raises_job_failed_with_the_cause(engine: WorkflowEngine) -> None:
    async def boom() -> None:
        raise KeyError("nope")

    seen: list[BaseException] = []

    async def body(ctx: StepContext) -> str:
        try:
            await ctx.call(Job("boom", boom))
        except JobFailed as exc:
            seen.append(exc)
        return "handled"

    result = await engine.run(Workflow("wf-fail", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED
    assert isinstance(seen[0].__cause__, KeyError)
    assert seen[0].key == "boom"


async def test_resume_answers_completed_calls_from_the_log(engine: WorkflowEngine) -> None:
    world = World()

    async def body(ctx: StepContext) -> Any:
        draft = await ctx.call(Job("draft", functools.partial(world.tool, "draft")))
        answer = await ctx.wait_for_input(
            "approve", "send it?", details={"tool": "send", "args": {"to": "alice"}}
        )
        if not answer["approved"]:
            return "skipped"
        return await ctx.call(Job("send", functools.partial(world.tool, "send", draft)))

    wf = Workflow("wf-wait", [StepDef("s", body)])
    first = await engine.run(wf)
    assert first.status is RunStatus.WAITING and first.reason == "send it?"
    status = (await engine.status("wf-wait"))[0]
    assert status.key == "approve"  # type: ignore[attr-defined]
    assert status.details == {"tool": "send", "args": {"to": "alice"}}  # type: ignore[attr-defined]
    assert world.ran == Counter({"draft": 1})
    # another key is not refused any more: the input is kept for a later wait "another"
    kept = await engine.resume("wf-wait", "s", {"approved": True}, key="another")
    assert kept.status is RunStatus.WAITING
    assert [m.key for m in await engine.store.messages("wf-wait")] == ["another"]
    done = await engine.resume("wf-wait", "s", {"approved": True}, key="approve")
    assert done.status is RunStatus.COMPLETED
    assert world.ran == Counter({"draft": 1, "send": 1})
    assert done.output["value"] == {"tool": "draft", "value": None}


async def test_several_waits_in_one_step_each_under_its_key(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> list[Any]:
        first = await ctx.wait_for_input("one", "first question")
        second = await ctx.wait_for_input("two", "second question")
        return [first, second]

    wf = Workflow("wf-two-waits", [StepDef("s", body)])
    assert (await engine.run(wf)).reason == "first question"
    assert (await engine.resume("wf-two-waits", "s", 1)).reason == "second question"
    done = await engine.resume("wf-two-waits", "s", 2, key="two")
    assert done.output == [1, 2]


async def test_a_wait_key_reused_for_another_question_conflicts(engine: WorkflowEngine) -> None:
    questions = iter(["pay 10?", "pay 1000?"])

    async def body(ctx: StepContext) -> Any:
        answer = await ctx.wait_for_input("pay", next(questions))
        return answer

    wf = Workflow("wf-reuse-wait", [StepDef("s", body)])
    await engine.run(wf)
    result = await engine.resume("wf-reuse-wait", "s", True)
    assert result.status is RunStatus.FAILED
    assert "asked" in (result.reason or "")


async def test_the_same_key_for_another_call_conflicts(engine: WorkflowEngine) -> None:
    world = World()
    seen: list[BaseException] = []

    async def body(ctx: StepContext) -> str:
        await ctx.call(Job("k", functools.partial(world.tool, "a")))
        try:
            await ctx.call(Job("k", functools.partial(world.tool, "b")))
        except KeyConflictError as exc:
            seen.append(exc)
        try:
            await ctx.wait_for_input("k", "a wait under a call's key")
        except KeyConflictError as exc:
            seen.append(exc)
        return "ok"

    await engine.run(Workflow("wf-conflict", [StepDef("s", body)]))
    assert len(seen) == 2 and world.ran == Counter({"a": 1})


async def test_a_non_json_output_fails_the_call_naming_it(engine: WorkflowEngine) -> None:
    seen: list[JobFailed] = []

    async def body(ctx: StepContext) -> str:
        try:
            await ctx.call(Job("obj", lambda: {"when": object()}))
        except JobFailed as exc:
            seen.append(exc)
        return "ok"

    await engine.run(Workflow("wf-json", [StepDef("s", body)]))
    assert isinstance(seen[0].__cause__, PayloadError)
    assert "when" in str(seen[0].__cause__)
    rows = await engine.store.calls("wf-json")
    assert [r.state for r in rows] == ["failed"]


async def test_an_output_that_cannot_be_stored_fails_the_step_at_once(
    engine: WorkflowEngine,
) -> None:
    """A charge whose output holds a datetime: retrying the step could only charge again."""
    from datetime import UTC, datetime

    charged: list[int] = []

    async def charge() -> dict[str, Any]:
        charged.append(500)
        return {"id": "ch_1", "at": datetime(2026, 1, 1, tzinfo=UTC)}

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("charge", charge, fingerprint=("charge",)))

    workflow = Workflow("wf-charge", [StepDef("pay", body, retry=RetryPolicy(3))])
    result = await engine.run(workflow)
    assert result.status is RunStatus.FAILED and charged == [500]
    assert result.reason is not None
    assert "['at']" in result.reason and "datetime" in result.reason
    [row] = await engine.store.calls("wf-charge")
    assert row.state == "failed" and row.error is not None
    assert row.error.type.endswith("PayloadError") and "['at']" in row.error.message
    [step] = await engine.store.step_rows("wf-charge")
    assert step.attempt == 1
    # The user may still retry it by hand: the call runs again (and fails the same way).
    again = await engine.retry(workflow)
    assert again.status is RunStatus.FAILED and charged == [500, 500]


async def test_ctx_outside_its_attempt_refuses(engine: WorkflowEngine) -> None:
    kept: list[StepContext] = []

    async def body(ctx: StepContext) -> str:
        kept.append(ctx)
        return "ok"

    await engine.run(Workflow("wf-kept", [StepDef("s", body)]))
    with pytest.raises(StepContextError):
        await kept[0].call(Job("late", lambda: 1))
    with pytest.raises(StepContextError):
        await kept[0].wait_for_input("late", "too late")
    by_hand = StepContext("w", 0, "s", 1, None, (), None)
    with pytest.raises(StepContextError):
        await by_hand.call(Job("x", lambda: 1))


async def test_bad_arguments_are_refused_before_anything_runs(engine: WorkflowEngine) -> None:
    world = World()
    errors: list[type[BaseException]] = []

    async def body(ctx: StepContext) -> str:
        for bad in (
            lambda: ctx.call("not a job"),  # type: ignore[arg-type]
            lambda: ctx.call(Job("x", functools.partial(world.tool, "x")), label=["a"]),  # type: ignore[arg-type]
            lambda: ctx.wait_for_input("", "empty key"),
            lambda: ctx.wait_for_input("w", "r", timeout=-1),
            lambda: ctx.wait_for_input("w", "r", details={1: 2}),  # type: ignore[dict-item]
        ):
            try:
                await bad()
            except (TypeError, ValueError) as exc:
                errors.append(type(exc))
        return "ok"

    await engine.run(Workflow("wf-bad", [StepDef("s", body)]))
    assert len(errors) == 5 and world.ran == Counter()


async def test_wait_times_out_through_the_live_engine_timer(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def body(ctx: StepContext) -> str:
        try:
            return str(await ctx.wait_for_input("ok", "proceed?", timeout=60))
        except InputTimeout:
            return "timed out"

    wf = Workflow("wf-timeout", [StepDef("s", body)])
    first = await engine.run(wf)
    assert first.status is RunStatus.WAITING
    status = (await engine.status("wf-timeout"))[0]
    assert status.deadline == pytest.approx(clock.time() + 60)  # type: ignore[attr-defined]
    await clock.advance(61)
    for _ in range(200):
        if (await engine.status("wf-timeout"))[0] == await _completed("timed out"):
            break
        await asyncio.sleep(0)
    assert [k for k, _ in await events(engine.store, "wf-timeout")].count("WaitTimedOut") == 1
    again = await engine.run("wf-timeout")
    assert again.output == "timed out"


async def _completed(output: Any) -> Any:
    from agentq.workflows import StepStatus

    return StepStatus.Completed(output)


async def test_wait_times_out_on_the_next_run_after_a_restart(
    db_path: Path, clock: FakeClock
) -> None:
    async def body(ctx: StepContext) -> str:
        try:
            return str(await ctx.wait_for_input("ok", "proceed?", timeout=60))
        except InputTimeout:
            return "timed out"

    wf = Workflow("wf-restart-timeout", [StepDef("s", body)])
    async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="first", clock=clock)
        assert (await engine.run(wf)).status is RunStatus.WAITING
        await engine.close()
    later = FakeClock(clock.time() + 3600)
    async with Queue(LANES, clock=later) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="second", clock=later)
        result = await engine.run(wf)
        assert result.output == "timed out"
        await engine.close()


async def test_completed_calls_answer_from_the_log_in_a_new_process(
    db_path: Path, clock: FakeClock
) -> None:
    world = World()

    async def body(ctx: StepContext) -> Any:
        paid = await ctx.call(Job("pay", functools.partial(world.tool, "pay", 10)))
        ok = await ctx.wait_for_input("confirm", "confirm the receipt?")
        return [paid, ok]

    wf = Workflow("wf-kernel-restart", [StepDef("s", body)])
    async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="kernel-1", clock=clock)
        assert (await engine.run(wf)).status is RunStatus.WAITING
        await engine.close()
    # A new kernel: a new queue (empty cache), a new engine, the same file.
    async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
        engine = WorkflowEngine(q, store, worker_id="kernel-2", clock=clock)
        engine.register_workflow(wf)
        result = await engine.resume("wf-kernel-restart", "s", "yes")
        assert result.status is RunStatus.COMPLETED
        assert result.output == [{"tool": "pay", "value": 10}, "yes"]
        await engine.close()
    assert world.ran == Counter({"pay": 1})


def gated_payment() -> tuple[asyncio.Event, asyncio.Event, Any]:
    """A step body whose one call ("pay") sets `started` and returns once `release` is set."""
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_payment() -> str:
        started.set()
        await release.wait()
        return "paid"

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("pay", slow_payment, Priority.HIGH))

    return started, release, body


async def test_cancel_while_a_call_runs_still_records_its_outcome(
    engine: WorkflowEngine,
) -> None:
    started, release, body = gated_payment()
    run = asyncio.create_task(engine.run(Workflow("wf-cancel-call", [StepDef("s", body)])))
    await started.wait()
    assert await engine.cancel("wf-cancel-call")
    release.set()
    result = await run
    assert result.status is RunStatus.CANCELLED
    for _ in range(100):
        rows = await engine.store.calls("wf-cancel-call")
        if rows and rows[0].state == "completed":
            break
        await asyncio.sleep(0)
    assert rows[0].state == "completed" and rows[0].output == "paid"


async def test_engine_close_after_a_cancel_waits_for_the_call_and_records_it(
    store: DurableStore, clock: FakeClock
) -> None:
    """Finding 1: a call running when its workflow is cancelled (here or elsewhere) keeps its
    outcome: the engine's close waits for it, so the store never closes under it."""
    for where in ("here", "elsewhere"):
        wid = f"wf-close-{where}"
        started, release, body = gated_payment()
        async with Queue(LANES, clock=clock) as q:
            engine = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
            run = asyncio.create_task(engine.run(Workflow(wid, [StepDef("s", body)])))
            await started.wait()
            if where == "here":
                assert await engine.cancel(wid)
            else:
                other = WorkflowEngine(q, store, worker_id="w2", lease_ttl=30.0, clock=clock)
                assert await other.cancel(wid)
                await clock.advance(10.0)  # the owner's renewal sees the cancel
            assert (await run).status is RunStatus.CANCELLED
            closing = asyncio.create_task(engine.close())
            for _ in range(20):
                await asyncio.sleep(0)
            assert not closing.done()  # the call still runs: close waits for it
            release.set()
            await closing
        [row] = await store.calls(wid)
        assert row.state == "completed" and row.output == "paid"


async def test_thousands_of_calls_in_one_step_replay_from_one_read(
    engine: WorkflowEngine,
) -> None:
    world = World()
    flaky = {"left": 1}

    async def body(ctx: StepContext) -> int:
        total = 0
        for i in range(2000):
            out = await ctx.call(Job(f"c{i}", functools.partial(world.tool, "t", i)))
            total += out["value"]
        if flaky["left"]:
            flaky["left"] -= 1
            raise ConnectionError("the step fails once after all its calls")
        return total

    result = await engine.run(
        Workflow("wf-many", [StepDef("s", body, retry=RetryPolicy(2))])
    )
    assert result.output == sum(range(2000))
    assert world.ran["t"] == 2000  # the retry answered every call from the log


async def test_a_tool_that_keeps_state_is_still_the_same_call_on_a_retry(
    engine: WorkflowEngine,
) -> None:
    """A tool's own state (a cache, a log of what it sent) changes as calls run; a retried
    step's calls must still answer from the log rather than conflict with their records."""
    sent: list[str] = []
    cache: dict[str, str] = {}
    flaky = {"left": 1}

    async def send(to: str) -> str:
        sent.append(to)
        cache[to] = f"sent to {to}"
        return cache[to]

    async def body(ctx: StepContext) -> list[str]:
        out = [
            await ctx.call(Job("mail:alice", functools.partial(send, "alice"))),
            await ctx.call(Job("mail:bob", lambda: send("bob"))),
        ]
        if flaky["left"]:
            flaky["left"] -= 1
            raise ConnectionError("the step fails once after its calls")
        return out

    wf = Workflow("wf-stateful-tool", [StepDef("s", body, retry=RetryPolicy(2))])
    result = await engine.run(wf)
    assert result.status is RunStatus.COMPLETED, result.reason
    assert result.output == ["sent to alice", "sent to bob"]
    assert sent == ["alice", "bob"]  # the retry answered both calls from the log
    assert engine.answered_from_log == 2


async def test_cancel_while_a_call_waits_for_its_lane_records_it_cancelled(
    engine: WorkflowEngine,
) -> None:
    """A call still waiting for a lane permit never reached the world: it is cancelled
    before it starts, recorded as failed with reason ``cancelled``, and its body never runs."""
    release = asyncio.Event()
    ran: list[str] = []

    async def hold() -> None:
        await release.wait()

    async def pay() -> str:
        ran.append("pay")
        return "paid"

    holders = [
        await engine.queue.push(Job(f"holder-{i}", hold, Priority.HIGH)) for i in range(2)
    ]  # both HIGH permits taken
    entered = asyncio.Event()

    async def body(ctx: StepContext) -> Any:
        entered.set()
        return await ctx.call(Job("pay", pay, Priority.HIGH))

    run = asyncio.create_task(engine.run(Workflow("wf-cancel-pending", [StepDef("s", body)])))
    await entered.wait()
    for _ in range(200):  # until the call is recorded as started and waits in its lane
        rows = await engine.store.calls("wf-cancel-pending")
        if rows and engine.queue.stats()[Priority.HIGH].queued == 1:
            break
        await asyncio.sleep(0)
    assert [r.state for r in rows] == ["started"]
    assert await engine.cancel("wf-cancel-pending")
    result = await run
    assert result.status is RunStatus.CANCELLED
    release.set()
    for holder in holders:
        await holder.handle  # type: ignore[union-attr]
    [row] = await engine.store.calls("wf-cancel-pending")
    assert row.state == "failed" and row.reason == "cancelled"
    assert ran == []  # the body never ran


class CountingStore(MemoryStore):
    """A MemoryStore that counts its reads of the recorded calls."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def calls(self, workflow_id: str | None = None, step_index: int | None = None) -> Any:
        self.reads += 1
        return await super().calls(workflow_id, step_index)


async def test_the_recorded_calls_are_read_once_per_attempt_that_uses_them(
    clock: FakeClock,
) -> None:
    """A step that makes no durable call costs no read; one that makes many costs one, also
    when its first calls run concurrently."""
    world = World()
    store = CountingStore()

    async def plain(ctx: StepContext) -> str:
        return "no calls"

    async def many(ctx: StepContext) -> list[Any]:
        first = await asyncio.gather(
            *(ctx.call(Job(f"c{i}", functools.partial(world.tool, "t", i))) for i in range(3))
        )
        rest = [await ctx.call(Job(f"d{i}", functools.partial(world.tool, "t", i)))
                for i in range(5)]
        return [*first, *rest]

    async with Queue(LANES, clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="w1", clock=clock)
        wf = Workflow("wf-reads", [StepDef("a", plain), StepDef("b", plain), StepDef("c", many)])
        result = await engine.run(wf)
        await engine.close()
    assert result.status is RunStatus.COMPLETED and len(result.output) == 8
    assert store.reads == 1


async def test_a_queue_store_keeps_neither_the_calls_nor_the_step_jobs(
    store: DurableStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow's log answers durable calls; a `Queue(store=...)` never saves them."""
    assert isinstance(store, JobOutcomeStore)
    world = World()
    pushed: list[str] = []
    saved: list[str] = []
    save_job = store.save_job

    async def spy(key: str, *args: Any, **kwargs: Any) -> Any:
        saved.append(key)
        return await save_job(key, *args, **kwargs)

    monkeypatch.setattr(store, "save_job", spy)

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("lookup", functools.partial(world.tool, "lookup", 7)))

    async with Queue(LANES, clock=clock, store=store) as q:
        q.subscribe(lambda event: pushed.append(event.key))
        engine = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        result = await engine.run(Workflow("wf-queue-store", [StepDef("s", body)]))
        assert await q.push_and_wait(Job("plain", functools.partial(world.tool, "p"))) == {
            "tool": "p", "value": None}
        await engine.close()
    assert result.output == {"tool": "lookup", "value": 7}
    assert call_queue_key("wf-queue-store", "lookup") in pushed
    assert len(set(pushed)) == 3  # the step's attempt, the call, the plain job
    assert saved == ["plain"]  # only the plain job was persisted


# ---------------------------------------------------------------- review 10 findings


async def test_a_usage_function_that_fails_never_loses_the_completed_call(
    engine: WorkflowEngine, caplog: pytest.LogCaptureFixture
) -> None:
    # Review 10 #2: usage(output) raised before complete_call, the call stayed "started" (in
    # doubt) and the next attempt sent the paid request again.
    world = World()

    async def body(ctx: StepContext) -> list[Any]:
        a = await ctx.call(
            Job("plan", functools.partial(world.tool, "plan")), usage=lambda out: out["usage"]
        )
        b = await ctx.call(
            Job("more", functools.partial(world.tool, "more")),
            usage=lambda out: {"when": {1, 2}},  # not JSON
        )
        c = await ctx.call(
            Job("last", functools.partial(world.tool, "last")),
            usage=lambda out: ["a list"],  # type: ignore[arg-type,return-value]
        )
        return [a, b, c]

    wf = Workflow("wf-usage", [StepDef("s", body, retry=RetryPolicy(2))])
    with caplog.at_level(logging.WARNING, logger="agentq"):
        result = await engine.run(wf)
    assert result.status is RunStatus.COMPLETED
    assert world.ran == Counter({"plan": 1, "more": 1, "last": 1})
    rows = {row.key: row for row in await engine.store.calls("wf-usage")}
    assert {k: (r.state, r.usage, r.runs) for k, r in rows.items()} == {
        "plan": ("completed", None, 1), "more": ("completed", None, 1),
        "last": ("completed", None, 1),
    }
    warned = [r.getMessage() for r in caplog.records if "without usage" in r.getMessage()]
    assert len(warned) == 3 and "KeyError" in warned[0] and "'plan'" in warned[0]


async def test_a_static_usage_that_is_not_json_is_refused_before_the_call_runs(
    engine: WorkflowEngine,
) -> None:
    world = World()

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("x", functools.partial(world.tool, "x")), usage={"t": {1}})

    result = await engine.run(Workflow("wf-static-usage", [StepDef("s", body)]))
    assert result.status is RunStatus.FAILED and "usage of call 'x'" in (result.reason or "")
    assert world.ran == Counter() and await engine.store.calls("wf-static-usage") == []


@pytest.mark.parametrize(
    ("details", "words"),
    [
        ({"to": {"alice", "bob"}}, r"details of wait 'ok'\['to'\] is a set"),
        ({"blob": "x" * 1_100_000}, "details of wait 'ok'"),
    ],
)
async def test_bad_wait_details_fail_the_step_and_release_its_lease(
    engine: WorkflowEngine, details: dict[str, Any], words: str
) -> None:
    # Review 10 #3: a non-JSON value inside details (or > 1 MB) escaped engine.run as a
    # PayloadError and left the step leased by the live engine.
    async def body(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "send?", details=details)

    wf = Workflow("wf-details", [StepDef("s", body, retry=RetryPolicy(2))])
    result = await asyncio.wait_for(engine.run(wf), 10)
    assert result.status is RunStatus.FAILED
    assert re.search(words, result.reason or "") and "PayloadError" in (result.reason or "")
    kinds = [k for k, _ in await events(engine.store, "wf-details")]
    assert kinds.count("StepFailed") == 2 and "StepWaiting" not in kinds  # per its policy
    assert await engine.store.calls("wf-details") == []
    assert (await engine.store.step_rows("wf-details"))[0].state == "failed"


async def test_a_wait_store_refusal_is_a_step_failure_not_a_held_lease(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> None:
        raise PayloadError("details too large for this store")

    monkeypatch.setattr(engine.store, "wait_step", refuse)

    async def body(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "send?")

    result = await asyncio.wait_for(engine.run(Workflow("wf-refused", [StepDef("s", body)])), 10)
    assert result.status is RunStatus.FAILED and "too large" in (result.reason or "")
    assert (await engine.store.step_rows("wf-refused"))[0].state == "failed"


async def test_a_wait_swallowed_by_the_body_still_waits(engine: WorkflowEngine) -> None:
    # Review 10 #6: `except Exception` around a wait (or gather(return_exceptions=True))
    # completed the step at once on its default path: nobody was asked.
    caught: list[str] = []

    async def broad(ctx: StepContext) -> str:
        try:
            ok = await ctx.wait_for_input("approve-pay", "pay 500 EUR?", timeout=3600)
        except Exception as exc:  # meant for InputTimeout or a flaky tool
            caught.append(type(exc).__name__)
            return "skipped"
        return "paid" if ok else "rejected"

    async def swallow(ctx: StepContext) -> str:
        try:
            await ctx.wait_for_input("ok", "really?")
        except BaseException:  # the footgun under test
            caught.append("base")
        return "went on"

    async def gathered(ctx: StepContext) -> list[Any]:
        return await asyncio.gather(
            ctx.wait_for_input("a", "first?"),
            ctx.wait_for_input("b", "second?"),
            return_exceptions=True,
        )

    r1 = await engine.run(Workflow("wf-broad", [StepDef("s", broad)]))
    assert r1.status is RunStatus.WAITING and caught == []  # the signal is no Exception
    assert (await engine.resume("wf-broad", "s", True, key="approve-pay")).output == "paid"
    r2 = await engine.run(Workflow("wf-swallow", [StepDef("s", swallow)]))
    assert r2.status is RunStatus.WAITING and r2.reason == "really?" and caught == ["base"]
    assert [c.state for c in await engine.store.calls("wf-swallow")] == ["waiting"]
    r3 = await engine.run(Workflow("wf-gathered", [StepDef("s", gathered)]))
    assert r3.status is RunStatus.WAITING and r3.reason == "first?"  # one at a time
    r3 = await engine.resume("wf-gathered", "s", 1, key="a")
    assert r3.status is RunStatus.WAITING and r3.reason == "second?"
    assert (await engine.resume("wf-gathered", "s", 2, key="b")).output == [1, 2]


async def test_ctx_call_from_a_plain_def_step_is_refused_before_anything_is_recorded(
    engine: WorkflowEngine,
) -> None:
    # Review 10 #10: the error spoke of the Queue's event loop, and CallStarted was already
    # committed for a job that never ran (in doubt forever).
    def step(ctx: StepContext) -> Any:
        return asyncio.run(ctx.call(Job("x", lambda: 1)))

    def waits(ctx: StepContext) -> Any:
        return asyncio.run(ctx.wait_for_input("k", "ok?"))

    for wid, fn in (("wf-sync-call", step), ("wf-sync-wait", waits)):
        result = await engine.run(Workflow(wid, [StepDef("s", fn)]))
        assert result.status is RunStatus.FAILED
        assert "StepContextError" in (result.reason or "")
        assert "async def step" in (result.reason or "")
        assert await engine.store.calls(wid) == []


@pytest.mark.parametrize("seconds", [1e12, 1e300, 10 * 366 * 24 * 3600.0])
async def test_a_wait_timeout_beyond_ten_years_is_refused(
    engine: WorkflowEngine, seconds: float
) -> None:
    # Review 10 #11: timeout=1e12 was accepted, and calls_frame showed its deadline as NaT.
    async def body(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("k", "ok?", timeout=seconds)

    result = await engine.run(Workflow("wf-long", [StepDef("s", body)]))
    assert result.status is RunStatus.FAILED
    assert "at most 315576000" in (result.reason or "") and repr(seconds) in (result.reason or "")
    assert MAX_WAIT_TIMEOUT == 10 * 365.25 * 24 * 3600


async def test_a_ten_year_wait_shows_its_deadline_in_the_frame(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    from agentq import frames

    async def body(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("k", "ok?", timeout=MAX_WAIT_TIMEOUT)

    assert (await engine.run(Workflow("wf-ten", [StepDef("s", body)]))).status is RunStatus.WAITING
    frame = await frames.calls_frame(engine.store)
    assert not frame["deadline"].isna().any()


async def test_a_late_resume_is_refused_the_same_with_or_without_a_timer(
    db_path: Path, clock: FakeClock
) -> None:
    # Review 10 #8: after a restart (no timer fired) the late resume was accepted; with a
    # live engine it was refused. Now both refuse, saying the wait timed out at its deadline.
    async def body(ctx: StepContext) -> Any:
        try:
            return {"input": await ctx.wait_for_input("ok", "approve?", timeout=60)}
        except InputTimeout:
            return "timed out"

    words = r"its wait 'ok' timed out at 20\d\d-.*the step continues with InputTimeout"
    for wid, restart in (("wf-late-restart", True), ("wf-late-live", False)):
        wf = Workflow(wid, [StepDef("s", body)])
        async with Queue(LANES, clock=clock) as q, SqliteStore(db_path) as store:
            engine = WorkflowEngine(q, store, worker_id="first", clock=clock)
            assert (await engine.run(wf)).status is RunStatus.WAITING
            if restart:
                await engine.close()  # nobody alive at the deadline
                await clock.advance(61)
                engine = WorkflowEngine(q, store, worker_id="second", clock=clock)
                engine.register_workflow(wf)
            else:
                await clock.advance(61)  # the live timer times the wait out
                for _ in range(200):
                    if (await engine.status(wid))[0] == await _completed("timed out"):
                        break
                    await asyncio.sleep(0)
                assert (await engine.status(wid))[0] == await _completed("timed out")
            with pytest.raises(NotWaitingError, match=words):
                await engine.resume(wid, "s", True, key="ok")
            async with asyncio.timeout(10):
                result = await engine.run(wid)
            assert result.output == "timed out", wid
            kinds = [k for k, _ in await events(store, wid)]
            assert kinds.count("WaitTimedOut") == 1 and "StepResumed" not in kinds
            await engine.close()
