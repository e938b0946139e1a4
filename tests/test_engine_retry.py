"""WorkflowEngine.retry and cancel before a start (issue 9 items 11 and 12)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq import (
    FakeClock,
    NonRetryable,
    NotRetryableError,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    UnknownStepError,
    UnknownWorkflowError,
    WaitForInput,
    Workflow,
    WorkflowEngine,
    WorkflowMismatchError,
)
from agentq.events import EventKind
from agentq.store import DurableStore

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(clock=clock) as queue:
        eng = WorkflowEngine(queue, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


class Flaky:
    """Three steps a, b, c; b fails for good (NonRetryable) while `broken`."""

    def __init__(self, wid: str = "wf") -> None:
        self.broken = True
        self.runs: Counter[str] = Counter()
        self.attempts: list[tuple[str, int]] = []
        self.workflow = Workflow(wid, [self.step("a"), self.step("b"), self.step("c")],
                                 input={"n": 1})

    def step(self, name: str) -> StepDef:
        async def body(ctx: StepContext) -> str:
            self.runs[name] += 1
            self.attempts.append((name, ctx.attempt))
            if name == "b" and self.broken:
                raise NonRetryable("b is broken")
            return f"{name}{self.runs[name]}"

        return StepDef(name, body)


# ---------------------------------------------------------------- cancel before a start (11)


async def test_a_registered_workflow_can_be_cancelled_before_it_starts(
    engine: WorkflowEngine,
) -> None:
    flaky = Flaky("wf-early")
    engine.register_workflow(flaky.workflow)
    assert await engine.cancel("wf-early", "not today")
    assert await kinds(engine.store, "wf-early") == ["WorkflowStarted", "WorkflowCancelled"]
    result = await engine.run("wf-early")
    assert (result.status, result.reason, result.outputs) == (
        RunStatus.CANCELLED, "not today", ())
    assert not flaky.runs  # no step ever ran
    assert not await engine.cancel("wf-early")  # idempotent
    assert await engine.status("wf-early") == [StepStatus.Pending()] * 3


async def test_a_workflow_object_can_be_cancelled_before_it_is_registered(
    engine: WorkflowEngine,
) -> None:
    flaky = Flaky("wf-object")
    assert await engine.cancel(flaky.workflow, "stop")
    assert (await engine.run(flaky.workflow)).status is RunStatus.CANCELLED
    other = Workflow("wf-object", [StepDef("x", lambda ctx: 1)])
    with pytest.raises(WorkflowMismatchError):
        await engine.cancel(other)


async def test_cancel_of_an_unknown_workflow_says_so(engine: WorkflowEngine) -> None:
    with pytest.raises(UnknownWorkflowError, match=r"'ghost' is neither registered.*nor in"):
        await engine.cancel("ghost")
    with pytest.raises(TypeError):
        await engine.cancel(42)  # type: ignore[arg-type]
    assert await engine.store.last_seq() == 0


# ---------------------------------------------------------------- retry (12)


async def test_retry_runs_a_failed_workflow_again_from_its_failed_step(
    engine: WorkflowEngine,
) -> None:
    flaky = Flaky()
    failed = await engine.run(flaky.workflow)
    assert (failed.status, failed.step, failed.outputs) == (RunStatus.FAILED, "b", ("a1",))
    flaky.broken = False  # the cause is fixed
    # the failed run dropped its registration: step bodies are code, so pass the Workflow
    assert engine.registered("wf") is None
    result = await engine.retry(flaky.workflow)
    assert result.status is RunStatus.COMPLETED and result.outputs == ("a1", "b2", "c1")
    assert flaky.runs == Counter({"a": 1, "b": 2, "c": 1})  # a kept its output
    assert flaky.attempts == [("a", 1), ("b", 1), ("b", 1), ("c", 1)]  # counted anew
    events = await engine.store.load_events("wf")
    [retried] = [e for e in events if e.kind is EventKind.WORKFLOW_RETRIED]
    assert (retried.step_index, retried.step_name) == (1, "b")
    assert retried.data == {"from_step": 1, "previous_state": "failed",
                            "previous_reason": "b is broken"}
    assert [str(e.kind) for e in events].count("WorkflowCompleted") == 1


async def test_retry_from_an_earlier_step_runs_it_again(engine: WorkflowEngine) -> None:
    flaky = Flaky()
    await engine.run(flaky.workflow)
    flaky.broken = False
    result = await engine.retry(flaky.workflow, from_step="a")
    assert result.outputs == ("a2", "b2", "c1")
    flaky2 = Flaky("wf2")
    await engine.run(flaky2.workflow)
    flaky2.broken = False
    assert (await engine.retry(flaky2.workflow, from_step=1)).outputs == ("a1", "b2", "c1")


async def test_retry_of_a_cancelled_workflow_continues_where_it_stopped(
    engine: WorkflowEngine,
) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def slow(ctx: StepContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            started.set()
            await release.wait()  # interrupted by the cancel
        return "slow done"

    wf = Workflow("wf-cancel", [StepDef("first", lambda ctx: "one"), StepDef("slow", slow)])
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(10):
        await started.wait()
    assert await engine.cancel("wf-cancel", "changed my mind")
    # retried at once, while the cancelled run may still be on its way out
    async with asyncio.timeout(10):
        result = await engine.retry("wf-cancel")
        cancelled = await run
    assert cancelled.status is RunStatus.CANCELLED
    assert result.status is RunStatus.COMPLETED and result.outputs == ("one", "slow done")
    assert calls == [1, 1]
    ks = await kinds(engine.store, "wf-cancel")
    assert ks.index("WorkflowCancelled") < ks.index("WorkflowRetried") < ks.index(
        "WorkflowCompleted")


async def test_retry_of_a_workflow_that_did_not_fail_is_refused_at_once(
    engine: WorkflowEngine,
) -> None:
    done = Workflow("wf-done", [StepDef("s", lambda ctx: 1)])
    await engine.run(done)
    with pytest.raises(NotRetryableError, match="'wf-done': it is completed"):
        await engine.retry("wf-done")

    async def gate(ctx: StepContext) -> Any:
        if ctx.resume_input is None:
            raise WaitForInput("approve?")
        return ctx.resume_input

    await engine.run(Workflow("wf-wait", [StepDef("g", gate)]))
    with pytest.raises(NotRetryableError, match="it is waiting"):
        await engine.retry("wf-wait")

    release, started = asyncio.Event(), asyncio.Event()

    async def busy(ctx: StepContext) -> str:
        started.set()
        await release.wait()
        return "busy"

    run = asyncio.ensure_future(engine.run(Workflow("wf-busy", [StepDef("s", busy)])))
    async with asyncio.timeout(10):
        await started.wait()
        with pytest.raises(NotRetryableError, match="it is running"):  # no wait for the run
            await engine.retry("wf-busy")
    release.set()
    assert (await run).output == "busy"
    assert "WorkflowRetried" not in await kinds(engine.store, "wf-busy")


async def test_retry_argument_errors(engine: WorkflowEngine) -> None:
    flaky = Flaky()
    await engine.run(flaky.workflow)
    n = await engine.store.last_seq()
    with pytest.raises(UnknownStepError, match="no step 'zz'"):
        await engine.retry(flaky.workflow, from_step="zz")
    with pytest.raises(NotRetryableError, match=r"from step 'c' \(#2\).*'b' \(#1\), is failed"):
        await engine.retry(flaky.workflow, from_step="c")
    never = Workflow("wf-never", [StepDef("s", lambda ctx: 1)])
    with pytest.raises(UnknownWorkflowError, match="never ran"):
        await engine.retry(never)
    with pytest.raises(UnknownWorkflowError, match="'nope' is not in the store"):
        await engine.retry("nope")
    assert await engine.store.last_seq() == n


async def test_retry_of_an_unregistered_id_asks_for_the_workflow(
    store: DurableStore, clock: FakeClock
) -> None:
    """Step bodies are code: another engine (a restarted program) needs the Workflow."""
    flaky = Flaky()
    async with Queue(clock=clock) as queue:
        await WorkflowEngine(queue, store, worker_id="a", clock=clock).run(flaky.workflow)
        later = WorkflowEngine(queue, store, worker_id="b", clock=clock)
        with pytest.raises(UnknownWorkflowError, match="'wf' is failed in the store.*pass the "
                                                       r"Workflow, engine\.retry\(workflow\)"):
            await later.retry("wf")
        flaky.broken = False
        result = await later.retry(flaky.workflow)
    assert result.outputs == ("a1", "b2", "c1")


async def test_a_run_during_a_retry_joins_it_and_cancelling_the_caller_keeps_it(
    engine: WorkflowEngine,
) -> None:
    flaky = Flaky()
    await engine.run(flaky.workflow)
    flaky.broken = False
    retry = asyncio.ensure_future(engine.retry(flaky.workflow))
    await asyncio.sleep(0)
    joined = asyncio.ensure_future(engine.run("wf"))
    await asyncio.sleep(0)
    retry.cancel()  # the caller gives up; the retried run goes on
    async with asyncio.timeout(10):
        result = await joined
    assert result.status is RunStatus.COMPLETED
    assert flaky.runs == Counter({"a": 1, "b": 2, "c": 1})  # one run, not two
    assert (await kinds(engine.store, "wf")).count("WorkflowRetried") == 1


async def test_a_retried_step_gets_its_crash_budget_back(
    store: DurableStore, clock: FakeClock
) -> None:
    """Retry after a workflow failed for lost attempts: the counters start over."""

    async def fine(ctx: StepContext) -> tuple[int, int]:
        return (ctx.attempt, ctx.recoveries)

    wf = Workflow("wf-crashy", [StepDef("s", fine, max_recoveries=0)])
    await store.start_workflow(wf.id, wf.step_names, None, clock.time())
    await store.claim_step(wf.id, 0, "doomed", 1.0, clock.time())
    await clock.advance(2.0)  # its worker died: the attempt is lost
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
        failed = await engine.run(wf)
        assert "lost to 1 crash" in (failed.reason or "")
        result = await engine.retry(wf)
    assert result.output == [1, 0]
