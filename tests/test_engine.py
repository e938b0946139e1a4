"""WorkflowEngine: the seed scenarios of issue 3 and the field reports on the engine side."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import (
    NotWaitingError,
    PayloadError,
    QueueClosed,
    UnknownStepError,
    UnknownWorkflowError,
    WorkflowClosedError,
    WorkflowMismatchError,
)
from agentq.events import EventKind
from agentq.queue import JobOutcomeStore, Priority, Queue
from agentq.retry import Backoff, RetryPolicy
from agentq.store import DurableStore, MemoryStore
from agentq.workflows import (
    NonRetryable,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
    WorkflowEngine,
    recover,
)
from agentq.workflows.attempts import job_key

pytestmark = pytest.mark.timeout(60)


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


def ok(value: Any) -> StepDef:
    async def body(ctx: StepContext) -> Any:
        return value

    return StepDef(f"ok-{value}", body)


async def test_three_steps_complete_and_context_flows(engine: WorkflowEngine) -> None:
    seen: list[StepContext] = []

    async def first(ctx: StepContext) -> int:
        seen.append(ctx)
        return ctx.input + 1

    def second(ctx: StepContext) -> int:  # plain function: runs in a worker thread
        seen.append(ctx)
        assert threading.current_thread() is not threading.main_thread()
        return ctx.previous * 10

    async def third(ctx: StepContext) -> list[int]:
        seen.append(ctx)
        return [*ctx.outputs, ctx.previous]

    wf = Workflow("wf-ctx", [StepDef("a", first), StepDef("b", second), StepDef("c", third)],
                  input=1)
    result = await engine.run(wf)
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == (2, 20, [2, 20, 20])
    assert result.output == [2, 20, 20]
    assert [c.step_index for c in seen] == [0, 1, 2]
    assert seen[0].previous == 1 and seen[0].outputs == ()
    assert seen[2].outputs == (2, 20)
    assert all(c.attempt == 1 and c.resume_input is None for c in seen)
    assert await kinds(engine.store, "wf-ctx") == [
        "WorkflowStarted",
        "StepStarted", "StepCompleted",
        "StepStarted", "StepCompleted",
        "StepStarted", "StepCompleted",
        "WorkflowCompleted",
    ]
    assert await engine.status("wf-ctx") == [
        StepStatus.Completed(2), StepStatus.Completed(20), StepStatus.Completed([2, 20, 20])
    ]


async def test_retry_after_failure_then_completes(engine: WorkflowEngine, clock: FakeClock) -> None:
    calls: list[int] = []

    async def flaky(ctx: StepContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("first attempt fails")
        return "done"

    wf = Workflow("wf-retry", [StepDef("s", flaky, retry=RetryPolicy(3, Backoff.fixed(5.0)))])
    async with clock.autojump():
        start = clock.time()
        result = await engine.run(wf)
    assert result.status is RunStatus.COMPLETED and result.output == "done"
    assert calls == [1, 2]
    assert clock.time() - start >= 5.0
    assert await kinds(engine.store, "wf-retry") == [
        "WorkflowStarted", "StepStarted", "StepFailed", "RetryScheduled",
        "StepStarted", "StepCompleted", "WorkflowCompleted",
    ]
    failed = [e for e in await engine.store.load_events("wf-retry") if e.kind == "StepFailed"]
    assert failed[0].data["error"]["type"] == "ValueError"
    assert "first attempt fails" in failed[0].data["error"]["traceback"]


async def test_non_retryable_fails_without_retry(engine: WorkflowEngine) -> None:
    async def refuse(ctx: StepContext) -> None:
        raise NonRetryable("card declined")

    wf = Workflow("wf-nr", [StepDef("pay", refuse, retry=RetryPolicy(5)), ok(1)])
    result = await engine.run(wf)
    assert result.status is RunStatus.FAILED
    assert result.step == "pay" and result.reason == "card declined"
    ks = await kinds(engine.store, "wf-nr")
    assert "RetryScheduled" not in ks
    assert ks[-2:] == ["StepFailed", "WorkflowFailed"]
    assert (await engine.status("wf-nr"))[0] == StepStatus.Failed("card declined", 1)


async def test_timeout_on_every_attempt_fails_after_max_attempts(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def slow(ctx: StepContext) -> None:
        await clock.sleep(10)

    wf = Workflow("wf-to", [StepDef("slow", slow, retry=RetryPolicy(3, Backoff.fixed(1.0)),
                                    timeout=2.0)])
    async with clock.autojump():
        result = await engine.run(wf)
    assert result.status is RunStatus.FAILED and result.reason == "timeout"
    ks = await kinds(engine.store, "wf-to")
    assert ks.count("RetryScheduled") == 2
    assert ks.count("StepFailed") == 3
    reasons = [e.reason for e in await engine.store.load_events("wf-to") if e.kind == "StepFailed"]
    assert reasons == ["timeout"] * 3


async def test_wait_resume_then_next_step_runs_once(engine: WorkflowEngine) -> None:
    runs: list[str] = []

    async def approve(ctx: StepContext) -> Any:
        runs.append(f"approve#{ctx.attempt}")
        if ctx.resume_input is None:
            raise WaitForInput("needs a human")
        return ctx.resume_input

    async def after(ctx: StepContext) -> str:
        runs.append("after")
        return f"got {ctx.previous['ok']}"

    wf = Workflow("wf-wait", [StepDef("approve", approve), StepDef("after", after)])
    first = await engine.run(wf)
    assert first.status is RunStatus.WAITING
    assert first.step == "approve" and first.reason == "needs a human"
    assert await engine.status("wf-wait") == [StepStatus.Waiting("needs a human"),
                                             StepStatus.Pending()]
    again = await engine.run("wf-wait")  # a waiting step is not re-run by a second run
    assert again.status is RunStatus.WAITING and runs == ["approve#1"]

    done = await engine.resume("wf-wait", "approve", {"ok": True})
    assert done.status is RunStatus.COMPLETED and done.output == "got True"
    assert runs == ["approve#1", "approve#1", "after"]
    events = await engine.store.load_events("wf-wait")
    resumed = [e for e in events if e.kind == EventKind.STEP_RESUMED]
    assert len(resumed) == 1 and resumed[0].input == {"ok": True}

    # BH-17: a second resume, with different input, is refused and appends nothing.
    before = len(events)
    with pytest.raises(NotWaitingError, match="approve"):
        await engine.resume("wf-wait", "approve", {"ok": False})
    assert len(await engine.store.load_events("wf-wait")) == before
    assert (await engine.run("wf-wait")).outputs == ({"ok": True}, "got True")


async def test_a_queue_with_a_store_runs_workflows_and_keeps_no_step_attempt(
    store: DurableStore, clock: FakeClock
) -> None:
    """Step attempts are jobs with persist=False: their outcome is in the event log, and a
    wait (not JSON) or a step output must not go through the queue's store."""
    assert isinstance(store, JobOutcomeStore)

    async def approve(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("needs a human")
        return ctx.resume_input

    async with Queue(store=store, clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        wf = Workflow("wf-stored", [StepDef("approve", approve), ok(7)])
        assert (await engine.run(wf)).status is RunStatus.WAITING
        done = await engine.resume("wf-stored", "approve", {"ok": True})
        assert done.status is RunStatus.COMPLETED and done.outputs == ({"ok": True}, 7)
        await engine.close()
    stats = queue.stats()[Priority.MEDIUM]
    assert stats.cache_hits == 0 and stats.completed == 3  # nothing was read back
    for token in range(1, 4):  # nor saved, under any attempt's key
        for index in (0, 1):
            key = job_key("wf-stored", index, token)
            assert await store.load_job(key, clock.time()) is None


async def test_concurrent_resumes_exactly_one_wins(engine: WorkflowEngine) -> None:
    async def gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("gate")
        return ctx.resume_input

    wf = Workflow("wf-race", [StepDef("gate", gate)])
    assert (await engine.run(wf)).status is RunStatus.WAITING
    results = await asyncio.gather(
        engine.resume("wf-race", "gate", "a"), engine.resume("wf-race", 0, "b"),
        return_exceptions=True,
    )
    wins = [r for r in results if not isinstance(r, BaseException)]
    losses = [r for r in results if isinstance(r, NotWaitingError)]
    assert len(wins) == 1 and len(losses) == 1
    ks = await kinds(engine.store, "wf-race")
    assert ks.count("StepResumed") == 1 and ks.count("WorkflowCompleted") == 1


async def test_resume_errors_name_workflow_step_and_status(engine: WorkflowEngine) -> None:
    wf = Workflow("wf-err", [ok(1), ok(2)])
    assert (await engine.run(wf)).status is RunStatus.COMPLETED
    n = len(await engine.store.load_events("wf-err"))
    with pytest.raises(UnknownWorkflowError, match="nope"):
        await engine.resume("nope", 0, None)
    with pytest.raises(UnknownStepError, match="missing"):
        await engine.resume("wf-err", "missing", None)
    with pytest.raises((NotWaitingError, WorkflowClosedError), match="wf-err"):
        await engine.resume("wf-err", "ok-1", None)
    with pytest.raises(PayloadError):
        await engine.resume("wf-err", "ok-1", {1, 2})
    assert len(await engine.store.load_events("wf-err")) == n


async def test_resume_of_cancelled_workflow_is_refused(engine: WorkflowEngine) -> None:
    async def gate(ctx: StepContext) -> Any:
        raise WaitForInput("gate")

    wf = Workflow("wf-cw", [StepDef("gate", gate)])
    await engine.run(wf)
    assert await engine.cancel("wf-cw", "user said no")
    n = len(await engine.store.load_events("wf-cw"))
    with pytest.raises(WorkflowClosedError, match="cancelled"):
        await engine.resume("wf-cw", "gate", True)
    assert len(await engine.store.load_events("wf-cw")) == n


async def test_completed_workflow_run_again_appends_nothing(engine: WorkflowEngine) -> None:
    wf = Workflow("wf-again", [ok(1), ok(2)])
    first = await engine.run(wf)
    n = len(await engine.store.load_events("wf-again"))
    second = await engine.run(wf)
    assert second == first
    assert len(await engine.store.load_events("wf-again")) == n
    assert (await kinds(engine.store, "wf-again")).count("WorkflowCompleted") == 1


async def test_two_concurrent_runs_execute_each_step_once(engine: WorkflowEngine) -> None:
    count = {"a": 0, "b": 0}

    async def a(ctx: StepContext) -> int:
        count["a"] += 1
        await asyncio.sleep(0)
        return 1

    async def b(ctx: StepContext) -> int:
        count["b"] += 1
        return 2

    wf = Workflow("wf-twice", [StepDef("a", a), StepDef("b", b)])
    r1, r2 = await asyncio.gather(engine.run(wf), engine.run(wf))
    assert r1 == r2 and r1.status is RunStatus.COMPLETED
    assert count == {"a": 1, "b": 1}


async def test_two_engines_on_one_store_execute_each_step_once(
    store: DurableStore, clock: FakeClock
) -> None:
    count: dict[int, int] = {}

    async def body(ctx: StepContext) -> int:
        count[ctx.step_index] = count.get(ctx.step_index, 0) + 1
        await asyncio.sleep(0)
        return ctx.step_index

    wf = Workflow("wf-two-engines", [StepDef(f"s{i}", body) for i in range(3)])
    async with Queue(clock=clock) as q1, Queue(clock=clock) as q2:
        e1 = WorkflowEngine(q1, store, worker_id="e1", clock=clock, poll_interval=0.5)
        e2 = WorkflowEngine(q2, store, worker_id="e2", clock=clock, poll_interval=0.5)
        async with clock.autojump():
            r1, r2 = await asyncio.gather(e1.run(wf), e2.run(wf))
    assert r1.status is RunStatus.COMPLETED and r2.status is RunStatus.COMPLETED
    assert count == {0: 1, 1: 1, 2: 1}
    assert (await kinds(store, "wf-two-engines")).count("WorkflowCompleted") == 1


async def test_cancel_twice_gives_one_event_and_after_completion_nothing(
    engine: WorkflowEngine,
) -> None:
    async def gate(ctx: StepContext) -> Any:
        raise WaitForInput("gate")

    await engine.run(Workflow("wf-c2", [StepDef("gate", gate)]))
    assert await engine.cancel("wf-c2", "stop") is True
    assert await engine.cancel("wf-c2", "stop again") is False
    assert (await kinds(engine.store, "wf-c2")).count("WorkflowCancelled") == 1
    assert (await engine.run("wf-c2")).status is RunStatus.CANCELLED

    await engine.run(Workflow("wf-c3", [ok(1)]))
    n = len(await engine.store.load_events("wf-c3"))
    assert await engine.cancel("wf-c3", "too late") is False
    assert len(await engine.store.load_events("wf-c3")) == n
    with pytest.raises(UnknownWorkflowError):
        await engine.cancel("never-ran", "x")


async def test_cancel_interrupts_a_running_step_and_never_completes(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    started = asyncio.Event()
    after_ran = False

    async def long(ctx: StepContext) -> str:
        started.set()
        await clock.sleep(1000)
        return "finished"

    async def after(ctx: StepContext) -> str:
        nonlocal after_ran
        after_ran = True
        return "after"

    wf = Workflow("wf-cancel-run", [StepDef("long", long, retry=RetryPolicy(3)),
                                    StepDef("after", after)])
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(10):
        await started.wait()
    assert await engine.cancel("wf-cancel-run", "operator")
    async with asyncio.timeout(10):
        result = await run
    assert result.status is RunStatus.CANCELLED and result.reason == "operator"
    assert not after_ran
    ks = await kinds(engine.store, "wf-cancel-run")
    assert "WorkflowCompleted" not in ks and "StepCompleted" not in ks
    assert ks.count("WorkflowCancelled") == 1


async def test_output_that_is_not_json_fails_the_step_at_once(engine: WorkflowEngine) -> None:
    """BH-14: the step fails naming the field and type; nothing half-applied; work continues."""
    import datetime

    async def bad(ctx: StepContext) -> Any:
        return {"at": datetime.datetime.now(datetime.UTC), "ids": {1, 2}, "raw": b"\x00\xff",
                "obj": object()}

    result = await engine.run(Workflow("wf-json", [StepDef("bad", bad, retry=RetryPolicy(3))]))
    assert result.status is RunStatus.FAILED
    assert result.reason is not None and "output['at']" in result.reason
    assert "datetime" in result.reason
    ks = await kinds(engine.store, "wf-json")
    assert "StepCompleted" not in ks and "RetryScheduled" not in ks
    status = await engine.status("wf-json")
    assert isinstance(status[0], StepStatus.Failed)
    assert (await engine.run(Workflow("wf-json-next", [ok(1)]))).status is RunStatus.COMPLETED


async def test_workflow_id_reused_with_other_steps_is_refused(engine: WorkflowEngine) -> None:
    await engine.run(Workflow("wf-same", [ok(1)]))
    with pytest.raises(WorkflowMismatchError):
        await engine.run(Workflow("wf-same", [ok(1), ok(2)]))
    with pytest.raises(UnknownWorkflowError):
        await engine.run("not-registered")


async def test_backoff_overflow_field_report_bh07(engine: WorkflowEngine, clock: FakeClock) -> None:
    """BH-07: 2000 attempts with exponential backoff capped at 0.01 s: no overflow."""
    attempts = 0

    async def always(ctx: StepContext) -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError(f"attempt {ctx.attempt}")

    policy = RetryPolicy(2000, Backoff.exponential(0.001, 0.01, multiplier=2.0))
    async with clock.autojump(real_delay=0):
        result = await engine.run(Workflow("wf-bh07", [StepDef("s", always, retry=policy)]))
    assert attempts == 2000
    assert result.status is RunStatus.FAILED and "attempt 2000" in (result.reason or "")
    delays = [e.data["delay"] for e in await engine.store.load_events("wf-bh07")
              if e.kind == EventKind.RETRY_SCHEDULED]
    assert len(delays) == 1999 and max(delays) <= 0.01


async def test_thread_step_timeout_never_overlaps_next_attempt(
    store: DurableStore,
) -> None:
    """BH-26: a thread that outlives its timeout delays the next attempt; no overlap."""
    spans: list[tuple[str, float]] = []
    lock = threading.Lock()

    def sleepy(ctx: StepContext) -> str:
        with lock:
            spans.append(("start", time.monotonic()))
        time.sleep(0.3)
        with lock:
            spans.append(("end", time.monotonic()))
        return "late"

    async with Queue() as q:
        eng = WorkflowEngine(q, store, worker_id="w")
        wf = Workflow("wf-bh26", [StepDef("s", sleepy, timeout=0.05,
                                          retry=RetryPolicy(3, Backoff.fixed(0.01)))])
        result = await eng.run(wf)
    assert result.status is RunStatus.FAILED and result.reason == "timeout"
    assert [k for k, _ in spans] == ["start", "end"] * 3
    failed = [e for e in await store.load_events("wf-bh26") if e.kind == EventKind.STEP_FAILED]
    assert [e.reason for e in failed] == ["timeout"] * 3


async def test_a_wait_is_not_counted_as_a_failed_job(engine: WorkflowEngine) -> None:
    async def gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("gate")
        return ctx.resume_input

    def plain_gate(ctx: StepContext) -> Any:  # the same from a worker thread
        if ctx.resume_input is None:
            raise WaitForInput("plain gate")
        return ctx.resume_input

    await engine.run(Workflow("wf-stats", [StepDef("g", gate), StepDef("p", plain_gate)]))
    await engine.resume("wf-stats", "g", 1)
    result = await engine.resume("wf-stats", "p", 2)
    assert result.outputs == (1, 2)
    lane = engine.queue.stats()[Priority.MEDIUM]
    assert lane.failed == 0 and lane.completed == 4


async def test_queue_closing_mid_step_records_nothing_and_recover_finishes(
    store: DurableStore, clock: FakeClock
) -> None:
    """Review finding: a graceful shutdown must leave work recoverable, like a crash does."""
    started = asyncio.Event()

    async def slow(ctx: StepContext) -> str:
        if ctx.attempt == 1 and ctx.step_name == "s" and not started.is_set():
            started.set()
            await clock.sleep(1000)
        return "done"

    wf = Workflow("wf-shutdown", [StepDef("s", slow, retry=RetryPolicy(3))])
    queue = Queue(clock=clock)
    engine = WorkflowEngine(queue, store, worker_id="old", lease_ttl=5.0, clock=clock)
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(10):
        await started.wait()
    await queue.close(drain=False)
    with pytest.raises(QueueClosed, match="handed back"):
        await run
    # No outcome is recorded; the hand-back is (not a crash: it spends no recovery).
    assert await kinds(store, "wf-shutdown") == [
        "WorkflowStarted", "StepStarted", "WorkerRecovered"]
    assert (await store.step_rows("wf-shutdown"))[0].recoveries == 0

    await clock.advance(0.001)  # no need to wait out the 5 s lease: it was handed back
    async with Queue(clock=clock) as fresh:
        rescuer = WorkflowEngine(fresh, store, worker_id="new", lease_ttl=5.0, clock=clock)
        rescuer.register_workflow(wf)
        report = await recover(rescuer)
        results = await report.wait()
    assert results["wf-shutdown"].output == "done"
    assert "StepFailed" not in await kinds(store, "wf-shutdown")


@pytest.mark.parametrize(
    "make_output",
    [
        lambda: 10**5000,
        lambda: (lambda a: (a.append(a), a)[1])([]),
        lambda: functools.reduce(lambda acc, _: [acc], range(10_000), []),
    ],
    ids=["huge-int", "self-reference", "deep-nesting"],
)
async def test_unstorable_outputs_fail_the_step_and_never_leave_it_leased(
    engine: WorkflowEngine, make_output: Any
) -> None:
    runs = 0

    async def body(ctx: StepContext) -> Any:
        nonlocal runs
        runs += 1
        return make_output()

    result = await engine.run(Workflow("wf-unstorable", [StepDef("s", body, retry=RetryPolicy(3))]))
    assert result.status is RunStatus.FAILED and (result.reason or "").startswith("payload:")
    assert isinstance((await engine.status("wf-unstorable"))[0], StepStatus.Failed)
    assert (await engine.run("wf-unstorable")).status is RunStatus.FAILED and runs == 1


async def test_reasons_that_are_not_str_are_converted(engine: WorkflowEngine) -> None:
    async def wait(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput({"question": 1})
        raise NonRetryable(None)

    wf = Workflow("wf-reasons", [StepDef("s", wait)])
    first = await engine.run(wf)
    assert first.status is RunStatus.WAITING and first.reason == "{'question': 1}"
    second = await engine.resume("wf-reasons", "s", True)
    assert second.status is RunStatus.FAILED and second.reason == "None"


async def test_a_step_awaiting_its_own_workflow_fails_instead_of_hanging(
    engine: WorkflowEngine,
) -> None:
    async def selfish(ctx: StepContext) -> Any:
        return await engine.run(ctx.workflow_id)

    result = await asyncio.wait_for(
        engine.run(Workflow("wf-self", [StepDef("s", selfish)])), 10
    )
    assert result.status is RunStatus.FAILED and "DeadlockError" in (result.reason or "")


async def test_cancelling_the_caller_of_resume_never_strands_the_workflow(
    store: DurableStore, clock: FakeClock
) -> None:
    """Review finding: cancelled after StepResumed committed, the run must still go on."""

    async def gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("gate")
        return ctx.resume_input

    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
        for point in range(12):
            wid = f"wf-cancel-resume-{point}"
            await engine.run(Workflow(wid, [StepDef("gate", gate), ok("after")]))
            resume = asyncio.ensure_future(engine.resume(wid, "gate", point))
            for _ in range(point):
                await asyncio.sleep(0)
            resume.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resume
            result = await asyncio.wait_for(engine.run(wid), 10)
            if result.status is RunStatus.WAITING:  # cancelled before the input was stored
                result = await engine.resume(wid, "gate", point)
            assert result.status is RunStatus.COMPLETED, (point, result)
            assert result.outputs == (point, "after")


async def test_engine_arguments_are_checked(store: DurableStore) -> None:
    async with Queue() as queue:
        with pytest.raises(TypeError, match="queue"):
            WorkflowEngine(None, store)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="store"):
            WorkflowEngine(queue, object())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"store must be an instance.*MemoryStore"):
            WorkflowEngine(queue, MemoryStore)  # type: ignore[arg-type]  # the class
        with pytest.raises(ValueError, match="priority"):
            WorkflowEngine(queue, store, priority="urgent")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="lease_ttl"):
            WorkflowEngine(queue, store, lease_ttl=0)
        with pytest.raises(ValueError):
            WorkflowEngine(queue, store, worker_id="")
        engine = WorkflowEngine(queue, store, priority="high")  # type: ignore[arg-type]
        assert engine.priority is Priority.HIGH
        with pytest.raises(TypeError):
            await engine.status(None)  # type: ignore[arg-type]


async def test_closing_the_engine_mid_step_hands_the_lease_back(
    store: DurableStore, clock: FakeClock
) -> None:
    started = asyncio.Event()

    async def slow(ctx: StepContext) -> str:
        if ctx.step_name == "s" and not started.is_set():
            started.set()
            await clock.sleep(1000)
        return "done"

    wf = Workflow("wf-engine-close", [StepDef("s", slow)])
    queue = Queue(clock=clock)
    engine = WorkflowEngine(queue, store, worker_id="old", lease_ttl=30.0, clock=clock)
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(10):
        await started.wait()
    await engine.close()
    with pytest.raises(asyncio.CancelledError):
        await run
    await queue.close(drain=False)  # the dispatched body still sleeps: do not wait for it
    await clock.advance(0.001)
    async with Queue(clock=clock) as fresh:
        rescuer = WorkflowEngine(fresh, store, worker_id="new", clock=clock)
        rescuer.register_workflow(wf)
        report = await recover(rescuer)
        results = await report.wait()
    assert report.recovered == ()  # nothing to take back: "old" handed it back itself
    handed = [e for e in await store.load_events("wf-engine-close") if e.kind == "WorkerRecovered"]
    assert [(e.data["previous_worker"], e.data["crash"]) for e in handed] == [("old", False)]
    assert results["wf-engine-close"].output == "done"
    assert "StepFailed" not in await kinds(store, "wf-engine-close")


async def test_an_approval_racing_the_waiting_transition_is_never_dropped_bh19(
    engine: WorkflowEngine,
) -> None:
    """BH-19: resume sent before, during and just after the wait commits: applied or refused
    with "not waiting yet", and the step stays resumable; never silently dropped."""

    async def slow_gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            for _ in range(3):
                await asyncio.sleep(0)
            raise WaitForInput("approve?")
        return ctx.resume_input

    for offset in range(0, 40, 3):
        wid = f"wf-bh19-{offset}"
        wf = Workflow(wid, [StepDef("gate", slow_gate)])
        engine.register_workflow(wf)
        run = asyncio.ensure_future(engine.run(wf))
        for _ in range(offset):
            await asyncio.sleep(0)
        try:
            result = await engine.resume(wid, "gate", {"ok": offset})
        except (NotWaitingError, UnknownWorkflowError) as refused:
            assert "waiting" in str(refused) or wid in str(refused)
            assert (await run).status is RunStatus.WAITING  # still resumable
            result = await engine.resume(wid, "gate", {"ok": offset})
        assert result.status is RunStatus.COMPLETED and result.output == {"ok": offset}
        await run
        assert (await kinds(engine.store, wid)).count("StepResumed") == 1


async def test_a_closed_queue_starts_no_step_and_burns_no_attempt(
    store: DurableStore, clock: FakeClock
) -> None:
    async def fine(ctx: StepContext) -> int:
        return ctx.attempt

    wf = Workflow("wf-closed", [StepDef("s", fine, retry=RetryPolicy(2))])
    queue = Queue(clock=clock)
    engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
    await queue.close()
    for _ in range(3):
        with pytest.raises(QueueClosed, match="not started"):
            await engine.run(wf)
    assert "StepStarted" not in await kinds(store, "wf-closed")
    async with Queue(clock=clock) as fresh:
        result = await WorkflowEngine(fresh, store, worker_id="w2", clock=clock).run(wf)
    assert result.output == 1  # the first real attempt is attempt 1


async def test_a_refused_rerun_with_another_input_leaves_the_registration_alone(
    engine: WorkflowEngine,
) -> None:
    """Review finding: the refused run must not replace the registered workflow."""

    async def gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("approve")
        return {"to": ctx.input["user"], "ok": ctx.resume_input}

    def wf(user: str) -> Workflow:
        return Workflow("wf-input", [StepDef("gate", gate)], input={"user": user})

    assert (await engine.run(wf("alice"))).status is RunStatus.WAITING
    with pytest.raises(WorkflowMismatchError, match="another input"):
        await engine.run(wf("bob"))
    result = await engine.resume("wf-input", "gate", True)
    assert result.output == {"to": "alice", "ok": True}


async def test_later_steps_see_outputs_as_stored_even_live(engine: WorkflowEngine) -> None:
    """Review finding: a tuple is a list for the next step, on the first run as after a reload."""
    seen: list[Any] = []

    async def first(ctx: StepContext) -> Any:
        return {"pair": (1, 2)}

    async def second(ctx: StepContext) -> Any:
        seen.append(ctx.previous)
        return None

    result = await engine.run(Workflow("wf-norm", [StepDef("a", first), StepDef("b", second)]))
    assert seen == [{"pair": [1, 2]}] and result.outputs[0] == {"pair": [1, 2]}
