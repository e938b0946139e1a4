"""The path of a durable call the log does not answer (issue 25): its output as stored, the
usage function's view of it, and a call still waiting for its step's permit when the step is
cancelled (the call runs in its own task, with no second task around its job)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.errors import JobFailed, PayloadError
from agentq.queue import Job, LaneConfig, Priority, Queue
from agentq.retry import Backoff, RetryPolicy
from agentq.store import CallRow, DurableStore
from agentq.workflows import RunStatus, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.workflows.calling import rekeyed

pytestmark = pytest.mark.timeout(60)

LANES = {Priority.MEDIUM: LaneConfig(capacity=50, permits=2)}


@pytest.fixture
async def engine(store: DurableStore, clock: FakeClock) -> AsyncIterator[WorkflowEngine]:
    async with Queue(LANES, clock=clock) as q:
        eng = WorkflowEngine(q, store, worker_id="w1", lease_ttl=30.0, clock=clock)
        yield eng
        await eng.close()


async def test_a_call_returns_its_output_as_stored_never_the_bodys_object(
    engine: WorkflowEngine,
) -> None:
    made: dict[str, Any] = {"ids": (1, 2), "nested": {"n": 1}}

    async def tool() -> dict[str, Any]:
        return made

    seen: list[Any] = []

    async def body(ctx: StepContext) -> Any:
        out = await ctx.call(Job("t", tool, fingerprint="t"))
        seen.append(out)
        made["nested"]["n"] = 99  # the tool's own object changes after the call returned
        return out

    result = await engine.run(Workflow("wf-stored", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED
    assert seen == [{"ids": [1, 2], "nested": {"n": 1}}]  # tuples come back as lists
    assert seen[0] is not made and seen[0]["nested"] is not made["nested"]
    [row] = await engine.store.calls("wf-stored")
    assert row.output == {"ids": [1, 2], "nested": {"n": 1}}


async def test_a_usage_function_is_given_the_output_as_stored(engine: WorkflowEngine) -> None:
    given: list[Any] = []

    async def tool() -> dict[str, Any]:
        return {"usage": {"total_tokens": 3}, "parts": ("a", "b")}

    def usage(out: Any) -> dict[str, Any]:
        given.append(out)
        return dict(out["usage"])

    async def body(ctx: StepContext) -> Any:
        return await ctx.call(Job("t", tool, fingerprint="t"), usage=usage)

    result = await engine.run(Workflow("wf-usage-view", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED
    assert given == [{"usage": {"total_tokens": 3}, "parts": ["a", "b"]}]
    [row] = await engine.store.calls("wf-usage-view")
    assert row.usage == {"total_tokens": 3} and row.output == given[0]


async def test_a_call_job_waiting_for_its_lane_after_a_cancel_never_runs(
    engine: WorkflowEngine,
) -> None:
    """Two calls of one step in its own lane take turns on the step's permit (the lane's
    other permit is held): the second waits, and a cancel then stops it before it starts."""
    hold, release = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def holder() -> None:
        await hold.wait()

    async def first() -> str:
        ran.append("first")
        await release.wait()
        return "first"

    async def second() -> str:
        ran.append("second")
        return "second"

    held = await engine.queue.push(Job("holder", holder))  # the lane's other permit
    both = asyncio.Event()

    async def body(ctx: StepContext) -> Any:
        a = asyncio.ensure_future(ctx.call(Job("first", first, fingerprint="1")))
        b = asyncio.ensure_future(ctx.call(Job("second", second, fingerprint="2")))
        both.set()
        return await asyncio.gather(a, b)

    run = asyncio.create_task(engine.run(Workflow("wf-turns", [StepDef("s", body)])))
    await both.wait()
    for _ in range(200):  # until both are recorded as started and the first one runs
        if len(await engine.store.calls("wf-turns")) == 2 and ran == ["first"]:
            break
        await asyncio.sleep(0)
    assert ran == ["first"]
    assert await engine.cancel("wf-turns")
    release.set()
    result = await run
    assert result.status is RunStatus.CANCELLED
    hold.set()
    await held.handle  # type: ignore[union-attr]
    rows: dict[str, CallRow] = {}
    for _ in range(200):  # until the first one's outcome is recorded
        rows = {row.key: row for row in await engine.store.calls("wf-turns")}
        if rows["first"].state == "completed":
            break
        await asyncio.sleep(0)
    assert ran == ["first"]  # the second never reached the world
    assert rows["first"].state == "completed"
    assert rows["second"].state == "failed" and rows["second"].reason == "cancelled"


async def test_a_caller_mutating_a_calls_output_changes_no_later_answer_of_its_key(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    """Review finding (session 7): the caller was given the call log's own row object, so a
    repeat of the key in the same attempt (and the step's output) saw the caller's mutation,
    and a live run and its replay saw different values."""
    runs: list[int] = []
    seen: list[Any] = []

    async def tool() -> dict[str, Any]:
        runs.append(1)
        return {"v": [1]}

    async def body(ctx: StepContext) -> Any:
        first = await ctx.call(Job("m", tool, fingerprint="m"))
        first["v"].append(len(seen) + 2)  # the caller's own copy, changed
        again = await ctx.call(Job("m", tool, fingerprint="m"))  # answered from the log
        seen.append((first, again))
        assert first is not again
        if len(seen) == 1:
            raise RuntimeError("fail the first attempt: the retry answers both from the log")
        return again

    retry = RetryPolicy(2, Backoff.fixed(1.0))
    async with clock.autojump():
        result = await engine.run(Workflow("wf-mutate", [StepDef("s", body, retry=retry)]))
    assert result.status is RunStatus.COMPLETED, result
    assert runs == [1]
    assert [again for _, again in seen] == [{"v": [1]}, {"v": [1]}]
    assert result.outputs[-1] == {"v": [1]}
    [row] = await engine.store.calls("wf-mutate")
    assert row.output == {"v": [1]}


async def test_a_label_that_is_not_json_is_refused_naming_the_call_before_it_starts(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    """The store alone encodes a label that goes to `start_call` (checked once, issue 25):
    a bad one is still refused before anything is recorded or run, named as ``ctx.call``
    names it; a call answered from the log, or joining the same key running, checks it
    here (the store never sees that label)."""
    ran: list[str] = []
    errors: list[str] = []
    gate, running = asyncio.Event(), asyncio.Event()

    async def tool() -> str:
        ran.append("t")
        running.set()
        await gate.wait()
        return "ok"

    async def body(ctx: StepContext) -> Any:
        bad = {"to": {1, 2}}
        try:
            await ctx.call(Job("new", tool, fingerprint="n"), label=bad)
        except PayloadError as exc:
            errors.append(str(exc))
        first = asyncio.ensure_future(ctx.call(Job("t", tool, fingerprint="t")))
        await running.wait()
        try:
            await ctx.call(Job("t", tool, fingerprint="t"), label=bad)  # joins "t"
        except PayloadError as exc:
            errors.append(str(exc))
        gate.set()
        await first
        try:
            await ctx.call(Job("t", tool, fingerprint="t"), label=bad)  # from the log
        except PayloadError as exc:
            errors.append(str(exc))
        return await ctx.call(Job("t", tool, fingerprint="t"), label={"kind": "tool"})

    result = await engine.run(Workflow("wf-label", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED, result
    assert len(errors) == 3 and all(
        e.startswith("label of call ") and "['to'] is a set" in e for e in errors
    ), errors
    assert "label of call 'new'" in errors[0] and "label of call 't'" in errors[2]
    assert ran == ["t"]
    assert [row.key for row in await engine.store.calls("wf-label")] == ["t"]


async def test_a_usage_function_is_given_a_stored_form_output_itself_no_copy(
    engine: WorkflowEngine,
) -> None:
    """An output already as stored (what a JSON codec hands back: a model response) goes to
    the usage function as it is, not through a JSON round trip (issue 25); the caller still
    gets a copy of its own, equal to the row."""
    made: dict[str, Any] = {"usage": {"total_tokens": 5}, "parts": [{"text": "hi"}]}
    given: list[Any] = []

    async def tool() -> dict[str, Any]:
        return made

    def usage(out: Any) -> dict[str, Any]:
        given.append(out)
        return dict(out["usage"])

    async def body(ctx: StepContext) -> Any:
        out = await ctx.call(Job("m", tool, fingerprint="m"), usage=usage)
        assert out == made and out is not made and out["parts"] is not made["parts"]
        return out

    result = await engine.run(Workflow("wf-usage-same", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED, result
    assert len(given) == 1 and given[0] is made
    [row] = await engine.store.calls("wf-usage-same")
    assert row.usage == {"total_tokens": 5} and row.output == made


async def test_a_failed_call_tried_again_at_once_with_its_key_runs_again(
    engine: WorkflowEngine,
) -> None:
    """The first caller is answered as its call ends, before the call's task is done
    (issue 25: no shield around it); the key has left the running calls by then, so the
    same key called again at once runs a new call instead of joining the failed one."""
    tries: list[int] = []

    async def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("first try fails")
        return "ok"

    async def body(ctx: StepContext) -> Any:
        try:
            await ctx.call(Job("f", flaky, fingerprint="f"))
        except JobFailed as failed:
            assert isinstance(failed.__cause__, ConnectionError)
        return await ctx.call(Job("f", flaky, fingerprint="f"))

    result = await engine.run(Workflow("wf-again", [StepDef("s", body)]))
    assert result.status is RunStatus.COMPLETED, result
    assert result.outputs == ("ok",) and len(tries) == 2
    [row] = await engine.store.calls("wf-again")
    assert row.state == "completed" and row.runs == 2


def test_a_rekeyed_job_keeps_every_field_but_its_key_fingerprint_and_persist() -> None:
    """The job a durable call runs under its queue key is a copy of the checked one through
    its slots (session 10): every field is the job's but those three."""
    policy = RetryPolicy(max_attempts=2)

    async def work() -> str:
        return "done"

    job = Job(
        "call", work, Priority.HIGH, timeout=3, retry=policy, fingerprint="f", name="n",
        tokens=7,
    )
    new = rekeyed(job, "agentq.call:0123", ("x", "y"))
    expected = dataclasses.replace(
        job, key="agentq.call:0123", fingerprint=("x", "y"), persist=False
    )
    assert new == expected and new is not job
    assert job.key == "call" and job.persist is True  # the original is unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.key = "other"  # type: ignore[misc]
