"""Durable calls and waits inside a step: `ctx.call` and `ctx.wait_for_input` (issue 10)."""

from __future__ import annotations

import asyncio
import functools
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
from agentq.workflows.calls import call_queue_key

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
    with pytest.raises(NotWaitingError):
        await engine.resume("wf-wait", "s", {"approved": True}, key="another")
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


async def test_cancel_while_a_call_runs_still_records_its_outcome(
    engine: WorkflowEngine,
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow_payment() -> str:
        started.set()
        await release.wait()
        return "paid"

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("pay", slow_payment, Priority.HIGH))

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
