"""What a step's failure leads to, and what users read about it (issue 9 items 4, 5 and 15).

- One rule for what is retried, shared with queue jobs (`agentq.retry.classify`): waits and
  non-retryable errors inside an `asyncio.TaskGroup`, and ``retryable = False``.
- Reasons read the same live and from the store (capped the same way).
- Messages name the workflow and the step, never an internal job key; "an object".
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.codec import MAX_TEXT_CHARS, encode
from agentq.errors import PayloadError
from agentq.events import EventKind
from agentq.queue import Priority, Queue
from agentq.retry import RetryPolicy
from agentq.store import DurableStore
from agentq.workflows import (
    NonRetryable,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    WaitForInput,
    Workflow,
    WorkflowEngine,
)

pytestmark = pytest.mark.timeout(60)


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


class InvalidCard(Exception):
    """A payment error that no retry can fix."""

    retryable = False


# ------------------------------------------------------------------ items 4 and 5


async def test_an_approval_inside_a_task_group_waits_and_the_sibling_ran_once(
    engine: WorkflowEngine,
) -> None:
    """Field report: the approval became a failed workflow after 3 attempts and the sibling
    tool ran 3 times."""
    tool_runs = 0

    async def agent_turn(ctx: StepContext) -> Any:
        if ctx.resumed:
            return {"sent": ctx.resume_input["approved"]}

        async def lookup() -> str:
            nonlocal tool_runs
            tool_runs += 1
            return "3 hits"

        async def send_email() -> None:
            raise WaitForInput("send 3 results to alice@example.com?")

        async with asyncio.TaskGroup() as group:  # parallel tool calls
            group.create_task(lookup())
            group.create_task(send_email())
        raise AssertionError("the group raises")

    wf = Workflow("wf-tg-wait", [StepDef("turn", agent_turn, retry=RetryPolicy(3))])
    result = await engine.run(wf)
    assert result.status is RunStatus.WAITING, result
    assert result.step == "turn" and result.reason == "send 3 results to alice@example.com?"
    assert tool_runs == 1
    assert "StepFailed" not in await kinds(engine.store, wf.id)
    assert (await engine.status(wf.id))[0] == StepStatus.Waiting(result.reason)
    done = await engine.resume(wf.id, "turn", {"approved": True})
    assert done.status is RunStatus.COMPLETED and done.output == {"sent": True}


async def test_several_waits_in_one_group_wait_for_all_their_reasons(
    engine: WorkflowEngine,
) -> None:
    def approvals(ctx: StepContext) -> Any:  # a plain function, in a thread: the same rule
        if ctx.resumed:
            return ctx.resume_input
        raise ExceptionGroup("tools", [
            WaitForInput("pay 10 EUR?"), ValueError("flaky"), WaitForInput("send mail?"),
        ])

    result = await engine.run(Workflow("wf-tg-waits", [StepDef("s", approvals)]))
    assert result.status is RunStatus.WAITING
    assert result.reason == "pay 10 EUR?; send mail?"
    assert engine.queue.stats()[Priority.MEDIUM].failed == 0  # a wait is not a failed job


@pytest.mark.parametrize(
    ("leaf", "reason"),
    [
        (NonRetryable("card declined"), "card declined"),
        (InvalidCard("card expired"), f"{__name__}.InvalidCard: card expired"),
    ],
    ids=["NonRetryable", "retryable-False"],
)
async def test_a_non_retryable_leaf_in_a_task_group_fails_at_once(
    engine: WorkflowEngine, leaf: Exception, reason: str
) -> None:
    attempts: list[int] = []

    async def pay(ctx: StepContext) -> None:
        attempts.append(ctx.attempt)

        async def charge() -> None:
            raise leaf

        async def log() -> None:
            raise ConnectionError("log server down")

        async with asyncio.TaskGroup() as group:
            group.create_task(log())
            group.create_task(charge())

    wf = Workflow("wf-tg-final", [StepDef("pay", pay, retry=RetryPolicy(5))])
    result = await engine.run(wf)
    assert result.status is RunStatus.FAILED and result.reason == reason
    assert attempts == [1]
    assert "RetryScheduled" not in await kinds(engine.store, wf.id)
    failed = [e for e in await engine.store.load_events(wf.id) if e.kind == "StepFailed"]
    assert failed[0].data["error"]["type"] == "ExceptionGroup"  # the whole group is kept


async def test_retryable_false_is_honoured_by_a_step_as_by_a_job(engine: WorkflowEngine) -> None:
    """Field report: 1 attempt as a job, 5 as a step."""
    attempts: list[int] = []

    async def pay(ctx: StepContext) -> None:
        attempts.append(ctx.attempt)
        raise InvalidCard("card expired")

    result = await engine.run(Workflow("wf-rf", [StepDef("pay", pay, retry=RetryPolicy(5))]))
    assert result.status is RunStatus.FAILED
    assert result.reason == f"{__name__}.InvalidCard: card expired"
    assert attempts == [1]
    assert (await engine.status("wf-rf"))[0] == StepStatus.Failed(result.reason, 1)


async def test_an_ordinary_group_is_an_ordinary_failure(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    attempts: list[int] = []

    async def flaky(ctx: StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ExceptionGroup("tools", [ConnectionError("a"), TimeoutError("b")])
        return "ok"

    result = await engine.run(Workflow("wf-tg-ok", [StepDef("s", flaky, retry=RetryPolicy(3))]))
    assert result.status is RunStatus.COMPLETED and attempts == [1, 2, 3]


async def test_a_body_raising_cancelled_error_by_itself_is_an_ordinary_failure(
    engine: WorkflowEngine,
) -> None:
    """Nobody cancelled it, and the queue is open: not a shutdown, just a failed attempt."""
    attempts: list[int] = []

    async def odd(ctx: StepContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise asyncio.CancelledError  # e.g. re-raised from an inner task it awaited
        return "second time"

    wf = Workflow("wf-self-cancel", [StepDef("s", odd, retry=RetryPolicy(2))])
    result = await engine.run(wf)
    assert result.output == "second time" and attempts == [1, 2]
    failed = [e for e in await engine.store.load_events(wf.id) if e.kind == "StepFailed"]
    assert [e.reason for e in failed] == ["cancelled"]


# ------------------------------------------------------------------ item 15: reasons


async def test_a_live_reason_is_capped_exactly_as_the_stored_one(engine: WorkflowEngine) -> None:
    async def huge(ctx: StepContext) -> None:
        raise ValueError("x" * 1_000_000)

    live = await engine.run(Workflow("wf-huge", [StepDef("s", huge)]))
    assert live.status is RunStatus.FAILED and live.reason is not None
    assert len(live.reason) < MAX_TEXT_CHARS + 40
    left_out = len("ValueError: ") + 1_000_000 - MAX_TEXT_CHARS
    assert live.reason.endswith(f"[{left_out} more characters]")
    stored = await engine.run("wf-huge")  # read back from the store
    assert stored == live


async def test_a_live_wait_reason_reads_as_stored(engine: WorkflowEngine) -> None:
    async def odd(ctx: StepContext) -> None:
        raise WaitForInput("nul \x00 and lone \udc80")

    live = await engine.run(Workflow("wf-odd", [StepDef("s", odd)]))
    assert live.reason == "nul \\x00 and lone \\udc80"
    assert await engine.run("wf-odd") == live


def test_payload_errors_use_the_right_article() -> None:
    class Order:
        def __repr__(self) -> str:
            return "Order()"

    cases = [(object(), "an object"), (Order(), "an Order"), (b"x", "a bytes"), ({1}, "a set")]
    for value, words in cases:
        with pytest.raises(PayloadError) as bad:
            encode({"v": value}, "output")
        assert f"output['v'] is {words} (" in str(bad.value)


async def test_an_unstorable_output_says_an_object(engine: WorkflowEngine) -> None:
    async def bad(ctx: StepContext) -> Any:
        return object()

    result = await engine.run(Workflow("wf-article", [StepDef("s", bad)]))
    assert result.reason is not None and result.reason.startswith("payload: output is an object")


# ------------------------------------------------------------------ item 15: no job keys


async def test_messages_name_the_step_never_its_job_key(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def slow(ctx: StepContext) -> None:
        await clock.sleep(10)

    async def closes_its_queue(ctx: StepContext) -> None:
        await engine.queue.close()  # would wait for this very step: DeadlockError

    async with clock.autojump():
        timed_out = await engine.run(Workflow("wf-keys-1", [StepDef("slow", slow, timeout=1.0)]))
    deadlocked = await engine.run(Workflow("wf-keys-2", [StepDef("closer", closes_its_queue)]))
    assert timed_out.reason == "timeout"
    assert deadlocked.reason is not None and "step 'closer' of workflow 'wf-keys-2'" in (
        deadlocked.reason
    )
    events = [
        *(await engine.store.load_events("wf-keys-1")),
        *(await engine.store.load_events("wf-keys-2")),
    ]
    failed = [e for e in events if e.kind == EventKind.STEP_FAILED]
    assert len(failed) == 2
    assert "step 'slow' of workflow 'wf-keys-1' attempt 1 exceeded its timeout of 1.0 s" in (
        failed[0].data["error"]["message"]
    )
    text = json.dumps([e.data for e in events]) + str(timed_out) + str(deadlocked)
    assert "agentq.step:" not in text


async def test_a_closed_queue_names_the_step_not_its_key(
    store: DurableStore, clock: FakeClock
) -> None:
    started = asyncio.Event()

    async def slow(ctx: StepContext) -> None:
        started.set()
        await clock.sleep(100)

    queue = Queue(clock=clock)
    engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
    run = asyncio.ensure_future(engine.run(Workflow("wf-closed-q", [StepDef("s", slow)])))
    async with asyncio.timeout(5):
        await started.wait()
    await queue.close(drain=False)
    with pytest.raises(Exception, match="step 's' of workflow 'wf-closed-q'") as closed:
        await run
    assert "agentq.step:" not in str(closed.value)
