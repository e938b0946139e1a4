"""Messages between runs: `engine.send` and `ctx.receive` (issue 24), and an approval given
before its wait exists. On the MemoryStore and SQLite; the store contract is in
``tests/store/test_messages.py``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentq import recover
from agentq.clock import FakeClock
from agentq.errors import (
    InputTimeout,
    NotWaitingError,
    PayloadError,
    UnknownWorkflowError,
    WorkflowClosedError,
)
from agentq.events import EventKind
from agentq.queue import Queue
from agentq.retry import RetryPolicy
from agentq.store import DurableStore, SqliteStore, WorkflowState
from agentq.workflows import RunStatus, StepContext, StepDef, StepStatus, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)


def gated(name: str, then: Any) -> Workflow:
    """A workflow whose first step waits on the key "gate", then runs `then`."""

    async def gate(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("gate", "open the gate?")

    return Workflow(name, [StepDef("gate", gate), StepDef("then", then)])


async def settle(engine: WorkflowEngine, workflow_id: str) -> None:
    """Let the background run a send started reach its end (no clock involved)."""
    for _ in range(1000):
        row = await engine.store.get_workflow(workflow_id)
        if row is not None and row.state is not WorkflowState.RUNNING:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"workflow {workflow_id!r} is still running")


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


async def test_a_message_sent_before_its_receiver_waits_is_kept(engine: WorkflowEngine) -> None:
    async def then(ctx: StepContext) -> Any:
        return [await ctx.receive("go"), await ctx.receive("go"), await ctx.receive("other")]

    wf = gated("before", then)
    assert (await engine.run(wf)).status is RunStatus.WAITING
    assert await engine.send("before", "go", {"n": 1}) is True
    assert await engine.send("before", "other", "o") is True
    assert await engine.send("before", "go", {"n": 2}) is True
    result = await engine.resume("before", "gate", "open", key="gate")
    assert result.status is RunStatus.COMPLETED, result
    assert result.outputs[1] == [{"n": 1}, {"n": 2}, "o"]  # first in first out per topic
    assert all(m.consumed for m in await engine.store.messages("before"))


async def test_a_send_wakes_the_waiting_receiver(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> Any:
        return await ctx.receive("go")

    wf = Workflow("during", [StepDef("recv", body)])
    first = await engine.run(wf)
    assert (first.status, first.reason) == (RunStatus.WAITING, "waiting for a message on go")
    [status] = await engine.status("during")
    assert isinstance(status, StepStatus.Waiting)
    assert await engine.send("during", "go", "hello") is True  # the engine continues it
    await settle(engine, "during")
    assert (await engine.run("during")).outputs == ("hello",)
    assert (await kinds(engine.store, "during")).count("StepStarted") == 2


async def test_a_message_sent_after_the_receive_was_answered_waits_for_the_next(
    engine: WorkflowEngine,
) -> None:
    got: list[Any] = []

    async def body(ctx: StepContext) -> Any:
        got.append(await ctx.receive("go"))
        return await ctx.wait_for_input("more", "more?")

    await engine.run(Workflow("after", [StepDef("recv", body)]))
    await engine.send("after", "go", 1)
    await settle(engine, "after")
    await engine.send("after", "go", 2)  # nobody receives it now: kept
    assert [m.consumed for m in await engine.store.messages("after")] == [True, False]
    assert got[-1] == 1


async def test_a_replayed_step_gets_the_same_message_and_takes_no_other(
    engine: WorkflowEngine,
) -> None:
    seen: list[Any] = []

    async def then(ctx: StepContext) -> Any:
        message = await ctx.receive("go")
        seen.append(message)
        if ctx.attempt == 1:
            raise ConnectionError("flaky after the receive")
        return message

    wf = Workflow(
        "replay",
        [StepDef("gate", gated("x", then).steps[0].fn),
         StepDef("then", then, retry=RetryPolicy(max_attempts=3))],
    )
    await engine.run(wf)
    await engine.send("replay", "go", "first")
    await engine.send("replay", "go", "second")
    result = await engine.resume("replay", "gate", None, key="gate")
    assert result.outputs[1] == "first" and seen == ["first", "first"]
    assert [m.consumed for m in await engine.store.messages("replay")] == [True, False]


async def test_a_fresh_engine_on_the_same_file_replays_the_receive(
    db_path: Path, clock: FakeClock
) -> None:
    gate = asyncio.Event()
    seen: list[Any] = []

    async def body(ctx: StepContext) -> Any:
        message = await ctx.receive("go")
        seen.append((ctx.recoveries, message))
        if ctx.recoveries == 0:
            gate.set()
            await asyncio.Future()  # the first process "dies" here
        return message

    wf = Workflow("crash", [StepDef("recv", body)])
    store_a = await SqliteStore.open(db_path)
    queue_a = Queue(clock=clock)
    a = WorkflowEngine(queue_a, store_a, worker_id="a", lease_ttl=5.0, clock=clock)
    await a.run(wf)  # waits for the message
    await a.send("crash", "go", "only")
    await asyncio.wait_for(gate.wait(), 10)  # engine a took it and hangs after it
    # A second engine, later than a's lease, on the same file (a is never heard from again).
    later = FakeClock(start=clock.time() + 60)
    async with Queue(clock=later) as queue_b, SqliteStore(db_path) as store_b:
        b = WorkflowEngine(queue_b, store_b, worker_id="b", lease_ttl=5.0, clock=later)
        await b.send("crash", "go", "spare")
        b.register_workflow(wf)
        report = await recover(b)
        results = await report.wait()
        assert report.resumed == ("crash",)
        assert results["crash"].outputs == ("only",)
        assert seen == [(0, "only"), (1, "only")]
        assert [m.consumed for m in await store_b.messages("crash")] == [True, False]
    for task in asyncio.all_tasks():
        if task.get_name().startswith("agentq.run:crash"):
            task.cancel()
    await a.close()
    await queue_a.close()
    await store_a.close()


async def test_a_duplicate_key_is_a_no_op(engine: WorkflowEngine) -> None:
    await engine.run(gated("dup", lambda ctx: None))
    assert await engine.send("dup", "go", 1, key="k") is True
    assert await engine.send("dup", "go", 2, key="k") is False
    assert [m.payload for m in await engine.store.messages("dup")] == [1]
    assert (await kinds(engine.store, "dup")).count("MessageSent") == 1


async def test_a_receive_times_out_on_the_fake_clock(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def body(ctx: StepContext) -> Any:
        try:
            return await ctx.receive("go", timeout=60)
        except InputTimeout as exc:
            return f"timed out: {exc.key}"

    first = await engine.run(Workflow("timeout", [StepDef("recv", body)]))
    assert first.status is RunStatus.WAITING
    await clock.advance(61)
    await settle(engine, "timeout")
    result = await engine.run("timeout")
    assert result.outputs == ("timed out: receive:0:go:0",)
    assert EventKind.WAIT_TIMED_OUT in {e.kind for e in await engine.store.load_events("timeout")}
    with pytest.raises(WorkflowClosedError, match="completed"):
        await engine.send("timeout", "go", "too late")


async def test_bad_sends_are_refused(engine: WorkflowEngine) -> None:
    with pytest.raises(UnknownWorkflowError):
        await engine.send("missing", "go", 1)
    await engine.run(gated("bad", lambda ctx: None))
    with pytest.raises(PayloadError):
        await engine.send("bad", "go", {1, 2})

    async def body(ctx: StepContext) -> Any:
        return await ctx.receive("go", timeout=-1)

    result = await engine.run(Workflow("bad-timeout", [StepDef("recv", body)]))
    assert result.status is RunStatus.FAILED
    assert await engine.store.messages("bad") == []


async def test_an_approval_sent_before_its_wait_is_kept(engine: WorkflowEngine) -> None:
    async def then(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("approve", "ship it?")

    await engine.run(gated("early", then))
    early = await engine.resume("early", "then", {"ok": True}, key="approve")
    assert early.status is RunStatus.WAITING  # still at the gate
    with pytest.raises(NotWaitingError, match="given before"):
        await engine.resume("early", "then", {"ok": False}, key="approve")
    with pytest.raises(NotWaitingError, match="not waiting"):
        await engine.resume("early", "then", {"ok": False})  # without a key: as before
    result = await engine.resume("early", "gate", None, key="gate")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs[1] == {"ok": True}


def test_send_from_another_process(db_path: Path) -> None:
    async def first() -> None:
        async with Queue() as q, SqliteStore(db_path) as store:
            engine = WorkflowEngine(q, store)

            async def body(ctx: StepContext) -> Any:
                return await ctx.receive("go")

            assert (await engine.run(Workflow("far", [StepDef("r", body)]))).status is (
                RunStatus.WAITING
            )

    asyncio.run(first())
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "agentq", "send", str(db_path), "far", "go", '{"n": 5}']
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "delivered" in done.stdout
    again = subprocess.run(
        [*cmd, "--key", "k"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert again.returncode == 0, again.stderr

    async def second() -> Any:
        async with Queue() as q, SqliteStore(db_path) as store:
            engine = WorkflowEngine(q, store)

            async def body(ctx: StepContext) -> Any:
                return await ctx.receive("go")

            result = await engine.run(Workflow("far", [StepDef("r", body)]))
            return result.outputs, [m.payload for m in await store.messages("far")]

    assert asyncio.run(second()) == (({"n": 5},), [{"n": 5}, {"n": 5}])


def test_agentq_send_refusals_and_output(db_path: Path) -> None:
    from click.testing import CliRunner

    from agentq.cli import cli
    from agentq.cli.group import Settings

    def send(*args: str) -> Any:
        return CliRunner().invoke(cli, ["send", str(db_path), *args], obj=Settings(width=200))

    async def make() -> None:
        async with SqliteStore(db_path) as store:
            await store.start_workflow("wf\x1b", ["a"], None, 0.0)
            await store.start_workflow("done", ["a"], None, 0.0)
            await store.cancel_workflow("done", "stop", 0.0)

    asyncio.run(make())
    kept = send("wf\x1b", "go", "[1]", "--key", "k")
    assert kept.exit_code == 0 and "kept until a receive takes it" in kept.stdout
    assert "\x1b" not in kept.stdout  # printed literally (agentq.cli.literal)
    again = send("wf\x1b", "go", "[2]", "--key", "k")
    assert again.exit_code == 0 and "nothing recorded" in again.stdout
    missing = send("nope", "go", "1")
    assert missing.exit_code == 1 and "agentq: workflow 'nope' is not in the store" in (
        missing.stderr
    )
    closed = send("done", "go", "1")
    assert closed.exit_code == 1 and "cancelled" in closed.stderr
    bad = send("wf\x1b", "go", "{not json")
    assert bad.exit_code == 2 and "not JSON" in bad.stderr
