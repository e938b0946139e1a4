"""Child runs: `ctx.child` and `ctx.children` (on MemoryStore and SqliteStore).

The parent's step starts a child once, waits for it holding no lease (the step is Waiting on
``child:<key>``), and returns its output; the store answers that wait in the transaction
that ends the child. Failures and cancels of the child raise `ChildFailed` in the parent; a
cancel of the parent cancels its children; a replay of the parent joins the same child.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentq import (
    ChildFailed,
    Job,
    NonRetryable,
    Queue,
    RetryPolicy,
    RunStatus,
    StepContext,
    StepDef,
    WaitForInput,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.errors import KeyConflictError, NotWaitingError, UnknownWorkflowError
from agentq.events import EventKind
from agentq.store import CallState, DurableStore, SqliteStore, StepState, WorkflowState

pytestmark = pytest.mark.timeout(60)


def doubler(runs: Counter[str] | None = None) -> WorkflowDef:
    """A one-step child definition: doubles its input, counting its runs by workflow id."""

    async def double(ctx: StepContext) -> Any:
        if runs is not None:
            runs[ctx.workflow_id] += 1
        if ctx.input == "boom":
            raise NonRetryable("the child refuses 'boom'")
        return ctx.input * 2

    return WorkflowDef("double", [StepDef("double", double)])


def parent_of_one(child: WorkflowDef, value: Any, log: list[str]) -> WorkflowDef:
    async def body(ctx: StepContext) -> Any:
        log.append("body")
        try:
            got = await ctx.child(child, value, key="c")
        except ChildFailed as failed:
            return {"failed": failed.child_id, "state": failed.state, "reason": failed.reason}
        return {"got": got}

    return WorkflowDef("parent", [StepDef("ask", body)])


async def kinds(store: DurableStore, workflow_id: str) -> list[EventKind]:
    return [e.kind for e in await store.load_events(workflow_id)]


async def test_a_parent_with_one_child_completes_with_its_output(engine: WorkflowEngine) -> None:
    runs: Counter[str] = Counter()
    log: list[str] = []
    parent = parent_of_one(doubler(runs), 21, log)
    await engine.start(parent, "p1")
    result = await engine.run("p1")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"got": 42},)
    assert runs == Counter({"p1/c": 1})
    child = await engine.store.get_workflow("p1/c")
    assert child is not None and child.state is WorkflowState.COMPLETED
    assert child.definition == "double"
    started = (await engine.store.load_events("p1/c"))[0]
    assert started.data["parent"] == {"workflow_id": "p1", "step": 0, "key": "child:c"}
    wait = {r.key: r for r in await engine.store.calls("p1")}["child:c"]
    assert wait.kind == "wait" and wait.state == "answered"
    assert wait.details == {"child": "p1/c", "definition": "double"}
    assert wait.output == {"child": "p1/c", "state": "completed", "output": 42}
    assert await kinds(engine.store, "p1") == [
        EventKind.WORKFLOW_STARTED,
        EventKind.STEP_STARTED,
        EventKind.CHILD_STARTED,
        EventKind.STEP_WAITING,
        EventKind.STEP_RESUMED,
        EventKind.STEP_STARTED,
        EventKind.STEP_COMPLETED,
        EventKind.WORKFLOW_COMPLETED,
    ]
    assert log == ["body", "body"]
    assert engine.tables()["children"] == 0


async def test_a_failed_child_raises_child_failed_in_the_parent(engine: WorkflowEngine) -> None:
    parent = parent_of_one(doubler(), "boom", [])
    await engine.start(parent, "p2")
    result = await engine.run("p2")
    assert result.status is RunStatus.COMPLETED
    (out,) = result.outputs
    assert out["failed"] == "p2/c" and out["state"] == "failed"
    assert "refuses 'boom'" in out["reason"]


async def test_an_uncaught_child_failure_fails_the_parent_step(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> Any:
        return await ctx.child(doubler(), "boom", key="c")

    retries = RetryPolicy(max_attempts=5)  # a ChildFailed is final: one attempt only
    await engine.start(WorkflowDef("strict", [StepDef("s", body, retry=retries)]), "p3")
    result = await engine.run("p3")
    assert result.status is RunStatus.FAILED
    step = (await engine.store.step_rows("p3"))[0]
    assert step.attempt == 1
    assert step.error is not None and step.error.type == "agentq.errors.ChildFailed"
    assert step.error.message == "child run 'p3/c' failed: the child refuses 'boom'"


def gated(gate: asyncio.Event, started: asyncio.Event) -> WorkflowDef:
    async def hold(ctx: StepContext) -> Any:
        started.set()
        await gate.wait()
        return ctx.input

    return WorkflowDef("gated", [StepDef("hold", hold)])


async def test_cancel_of_the_parent_cancels_the_running_child(engine: WorkflowEngine) -> None:
    gate, started = asyncio.Event(), asyncio.Event()
    parent = parent_of_one(gated(gate, started), 1, [])
    await engine.start(parent, "p4")
    run = asyncio.ensure_future(engine.run("p4"))
    await started.wait()
    assert await engine.cancel("p4", reason="stop") is True
    result = await run
    assert result.status is RunStatus.CANCELLED
    child = await engine.store.get_workflow("p4/c")
    assert child is not None and child.state is WorkflowState.CANCELLED
    assert child.reason == "its parent workflow 'p4' was cancelled"
    step = (await engine.store.step_rows("p4/c"))[0]
    assert step.state is StepState.FAILED  # its lease revoked in the same transaction
    events = await engine.store.load_events()
    cancelled = [e for e in events if e.kind is EventKind.WORKFLOW_CANCELLED]
    assert [e.workflow_id for e in cancelled] == ["p4", "p4/c"]
    assert cancelled[0].seq + 1 == cancelled[1].seq  # one transaction
    assert (await engine.run("p4/c")).status is RunStatus.CANCELLED
    gate.set()


async def test_a_cancelled_child_raises_child_failed_saying_so(engine: WorkflowEngine) -> None:
    async def hold(ctx: StepContext) -> Any:
        raise WaitForInput("hold")  # the child waits: the parent's run ends waiting too

    parent = parent_of_one(WorkflowDef("holder", [StepDef("hold", hold)]), 1, [])
    await engine.start(parent, "p5")
    assert (await engine.run("p5")).status is RunStatus.WAITING
    step = (await engine.store.step_rows("p5"))[0]
    assert step.state is StepState.WAITING and step.wait_key == "child:c"
    assert step.lease_expires_at is None and step.wait_details == {
        "child": "p5/c", "definition": "holder"
    }
    await engine.cancel("p5/c", reason="not needed")
    result = await engine.run("p5")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"failed": "p5/c", "state": "cancelled", "reason": "not needed"},)


async def test_a_replay_after_a_resume_joins_the_same_child(engine: WorkflowEngine) -> None:
    runs: Counter[str] = Counter()
    bodies: list[int] = []

    async def body(ctx: StepContext) -> Any:
        bodies.append(ctx.attempt)
        got = await ctx.child(doubler(runs), 5, key="c")
        ok = await ctx.wait_for_input("ok", "approve?")
        return [got, ok]

    await engine.start(WorkflowDef("resumed", [StepDef("s", body)]), "p6")
    assert (await engine.run("p6")).status is RunStatus.WAITING
    result = await engine.resume("p6", "s", "yes", key="ok")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ([10, "yes"],)
    assert runs == Counter({"p6/c": 1})
    assert len(bodies) == 3  # start, after the child, after the resume
    events = await engine.store.load_events()
    assert sum(1 for e in events if e.kind is EventKind.CHILD_STARTED) == 1


async def test_a_child_named_by_its_registered_definition(engine: WorkflowEngine) -> None:
    engine.register(doubler())

    async def body(ctx: StepContext) -> Any:
        return await ctx.child("double", 4, key="c")

    await engine.start(WorkflowDef("named", [StepDef("s", body)]), "p7")
    result = await engine.run("p7")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == (8,)


async def test_bad_child_keys_and_definitions_are_refused(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> Any:
        errors = []
        for call in (
            lambda: ctx.child(doubler(), 1, key="a/b"),
            lambda: ctx.child("nope", 1, key="a"),
            lambda: ctx.child(42, 1, key="a"),  # type: ignore[arg-type]
            lambda: ctx.children(doubler(), {"a": 1}, limit=0),
        ):
            try:
                await call()
            except (ValueError, TypeError, UnknownWorkflowError) as exc:
                errors.append(type(exc).__name__)
        return errors

    await engine.start(WorkflowDef("bad", [StepDef("s", body)]), "p8")
    result = await engine.run("p8")
    assert result.outputs == (
        ["ValueError", "UnknownWorkflowError", "TypeError", "ValueError"],
    )
    assert await engine.store.get_workflow("p8/a") is None


async def test_a_child_key_used_by_a_wait_is_a_conflict(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> Any:
        if ctx.resumed:
            try:
                await ctx.child(doubler(), 1, key="x")
            except KeyConflictError as exc:
                return str(exc)
        return await ctx.wait_for_input("child:x", "a wait that looks like a child")

    await engine.start(WorkflowDef("conflict", [StepDef("s", body)]), "p9")
    await engine.run("p9")
    result = await engine.resume("p9", "s", 1, key="child:x")
    assert "child:x" in result.outputs[0]


async def test_children_with_a_limit_never_run_more_at_once(engine: WorkflowEngine) -> None:
    running, most = 0, 0

    async def work(ctx: StepContext) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(5):
            await asyncio.sleep(0)
        running -= 1
        return ctx.input + 100

    child = WorkflowDef("work", [StepDef("w", work)])

    async def body(ctx: StepContext) -> Any:
        return await ctx.children(child, {f"k{i}": i for i in range(5)}, limit=2)

    await engine.start(WorkflowDef("fan", [StepDef("s", body)]), "p10")
    result = await engine.run("p10")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({f"k{i}": i + 100 for i in range(5)},)
    assert most <= 2
    open_, peak = 0, 0  # children started and not ended, in the order of the log
    for event in await engine.store.load_events():
        if event.workflow_id.startswith("p10/"):
            if event.kind is EventKind.WORKFLOW_STARTED:
                open_ += 1
            elif event.kind is EventKind.WORKFLOW_COMPLETED:
                open_ -= 1
            peak = max(peak, open_)
    assert peak == 2
    for i in range(5):
        row = await engine.store.get_workflow(f"p10/k{i}")
        assert row is not None and row.state is WorkflowState.COMPLETED


async def test_children_that_end_while_the_step_waits_on_another_cost_no_replay(
    engine: WorkflowEngine,
) -> None:
    """The step parks on the first child; the others end meanwhile: each end answers its
    wait row (`ChildEnded`, the step waits on another key), so the step's next run reads
    every output at once: two runs of the body (four before: a park per ended child)."""
    others_done = asyncio.Event()
    ended: list[str] = []

    async def work(ctx: StepContext) -> Any:
        if ctx.workflow_id.endswith("/a"):
            await others_done.wait()
        ended.append(ctx.workflow_id)
        if len(ended) == 2:
            others_done.set()
        return ctx.input * 10

    child = WorkflowDef("gated", [StepDef("w", work)])
    runs = 0

    async def body(ctx: StepContext) -> Any:
        nonlocal runs
        runs += 1
        return await ctx.children(child, {"a": 1, "b": 2, "c": 3})

    await engine.start(WorkflowDef("fan3", [StepDef("s", body)]), "p16")
    result = await engine.run("p16")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ({"a": 10, "b": 20, "c": 30},)
    assert ended[-1] == "p16/a" and runs == 2
    events = [(str(e.kind), e.data.get("key")) for e in await engine.store.load_events("p16")]
    assert ("ChildEnded", "child:b") in events and ("ChildEnded", "child:c") in events
    assert ("StepResumed", "child:a") in events
    assert {r.key: r.state for r in await engine.store.calls("p16")} == {
        "child:a": CallState.ANSWERED, "child:b": CallState.ANSWERED,
        "child:c": CallState.ANSWERED,
    }


async def test_children_without_a_limit_and_a_failure(engine: WorkflowEngine) -> None:
    async def body(ctx: StepContext) -> Any:
        try:
            return await ctx.children(doubler(), {"a": 1, "b": "boom", "c": 3})
        except ChildFailed as failed:
            return [failed.key, failed.state]

    await engine.start(WorkflowDef("fan2", [StepDef("s", body)]), "p11")
    result = await engine.run("p11")
    assert result.outputs == (["b", "failed"],)
    assert (await engine.store.get_workflow("p11/c")) is not None  # all three started at once


async def test_show_and_frames_give_the_parent_child_link(
    engine: WorkflowEngine, store: DurableStore
) -> None:
    from rich.console import Console

    from agentq.cli.views import workflow_json, workflow_view  # the cli extra is installed

    await engine.start(parent_of_one(doubler(), 2, []), "p12")
    await engine.run("p12")
    wf, child = await store.get_workflow("p12"), await store.get_workflow("p12/c")
    assert wf is not None and child is not None
    console = Console(width=200, record=True)
    console.print(workflow_view(wf, await store.step_rows("p12"), await store.calls("p12")))
    assert "child runs: p12/c (answered)" in console.export_text()
    console.print(workflow_view(child, await store.step_rows("p12/c"), [], "p12"))
    assert "child run of: p12" in console.export_text()
    shown = json.loads(workflow_json(child, [], [], "p12"))
    assert shown["parent"] == "p12"
    from agentq.frames import calls_frame, events_frame
    from agentq.widgets.models.detail import load_detail

    calls = await calls_frame(store, "p12")
    assert list(calls.key) == ["child:c"] and calls.details[0]["child"] == "p12/c"
    events = await events_frame(store, "p12")
    assert "ChildStarted" in set(events.kind.astype(str))
    assert await load_detail(store, "p12") is not None  # the notebook view reads it too


def run_on_file(db: Path, definition: WorkflowDef, workflow_id: str, until: RunStatus) -> None:
    """Start `definition` as `workflow_id` on the SQLite file `db` and run it (in a loop of
    its own, as a program before the command line reads the file) until `until`."""

    async def make() -> None:
        async with Queue() as queue, await SqliteStore.open(db) as store:
            engine = WorkflowEngine(queue, store, worker_id="w1")
            await engine.start(definition, workflow_id)
            assert (await engine.run(workflow_id)).status is until

    asyncio.run(make())


def agentq(db: Path, command: str, *args: str) -> Result:
    """``agentq COMMAND DB ARGS...`` (200 columns wide)."""
    return CliRunner().invoke(cli, [command, str(db), *args], obj=Settings(width=200))


def test_agentq_show_names_the_parent_of_a_child_run(tmp_path: Path) -> None:
    run_on_file(tmp_path / "a.db", parent_of_one(doubler(), 3, []), "fam", RunStatus.COMPLETED)

    def show(*args: str) -> str:
        result = agentq(tmp_path / "a.db", "show", *args)
        assert result.exit_code == 0, result.output
        return result.stdout

    assert "child run of: fam" in show("fam/c")
    assert "child runs: fam/c (completed)" in show("fam")  # the child run's state
    assert json.loads(show("fam/c", "--json"))["parent"] == "fam"
    assert json.loads(show("fam", "--json"))["parent"] is None


async def test_a_child_ended_by_another_engine_lets_the_parent_continue_there(
    engine: WorkflowEngine, store: DurableStore, clock: Any
) -> None:
    """The parent's engine leaves a waiting child (and so a waiting parent); another engine
    (another process, as far as registrations go) answers the child: the store resumes the
    parent in that transaction, and the other engine's run of the parent finishes it."""

    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "go on?") + ctx.input

    asker = WorkflowDef("asker", [StepDef("ask", ask)])
    await engine.start(parent_of_one(asker, 1, []), "p13")
    assert (await engine.run("p13")).status is RunStatus.WAITING
    async with Queue(clock=clock) as queue:
        other = WorkflowEngine(queue, store, worker_id="w2", clock=clock)
        other.register(asker)
        other.register(parent_of_one(asker, 1, []))
        assert (await other.resume("p13/c", "ask", 41, key="ok")).status is RunStatus.COMPLETED
        step = (await store.step_rows("p13"))[0]
        assert step.state is StepState.PENDING  # resumed by the child's end
        result = await other.run("p13")
        await other.close()
    assert result.status is RunStatus.COMPLETED and result.outputs == ({"got": 42},)


async def test_a_child_resumed_later_continues_its_parent_in_the_background(
    engine: WorkflowEngine,
) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "go on?")

    asker = WorkflowDef("asker", [StepDef("ask", ask)])
    await engine.start(parent_of_one(asker, 0, []), "p14")
    assert (await engine.run("p14")).status is RunStatus.WAITING
    assert (await engine.resume("p14/c", "ask", 7, key="ok")).status is RunStatus.COMPLETED
    assert engine.running("p14")  # the child's end started the parent's run here
    result = await engine.run("p14")  # joins the run the child's end started
    assert result.status is RunStatus.COMPLETED and result.outputs == ({"got": 7},)
    assert engine.tables()["children"] == 0


async def test_start_child_starts_once_without_parking_and_child_reads_its_end(
    engine: WorkflowEngine,
) -> None:
    runs: Counter[str] = Counter()
    child = doubler(runs)
    seen: list[Any] = []

    async def body(ctx: StepContext) -> Any:
        child_id = await ctx.start_child(child, 4, key="c")
        again = await ctx.start_child(child, 4, key="c")  # the same child, not a second
        seen.append((child_id, again))
        waited = await engine.run(child_id)  # the caller awaits it while the step runs
        seen.append(waited.status)
        # Ended: its end answered the wait (the step ran): ctx.child reads the output
        # without parking the step.
        return await ctx.child(child, 4, key="c")

    await engine.start(WorkflowDef("starter", [StepDef("go", body)]), "s1")
    result = await engine.run("s1")
    assert result.status is RunStatus.COMPLETED and result.outputs == (8,)
    assert seen == [("s1/c", "s1/c"), RunStatus.COMPLETED]  # one run of the step
    assert runs == Counter({"s1/c": 1})  # one child, run once
    [wait] = await engine.store.calls("s1")
    assert wait.state is CallState.ANSWERED and wait.output["output"] == 8
    kinds = [str(e.kind) for e in await engine.store.load_events("s1")]
    assert "ChildEnded" in kinds and "StepWaiting" not in kinds
    started = (await engine.store.load_events("s1/c"))[0]
    assert started.data["parent"] == {"workflow_id": "s1", "step": 0, "key": "child:c"}


async def test_start_child_refuses_a_key_with_a_slash_and_another_input(
    engine: WorkflowEngine,
) -> None:
    child = doubler()
    errors: list[str] = []

    async def body(ctx: StepContext) -> Any:
        with pytest.raises(ValueError, match="holds no '/'"):
            await ctx.start_child(child, 1, key="a/b")
        await ctx.start_child(child, 1, key="c")
        try:
            await ctx.start_child(child, 2, key="c")
        except Exception as exc:
            errors.append(type(exc).__name__)
        return "ok"

    await engine.start(WorkflowDef("starter2", [StepDef("go", body)]), "s2")
    result = await engine.run("s2")
    assert result.status is RunStatus.COMPLETED, result.reason
    assert errors == ["WorkflowMismatchError"]


async def test_a_resume_of_the_parents_child_wait_is_refused_naming_the_child(
    engine: WorkflowEngine,
) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "go on?")

    asker = WorkflowDef("asker", [StepDef("ask", ask)])
    await engine.start(parent_of_one(asker, 0, []), "p20")
    assert (await engine.run("p20")).status is RunStatus.WAITING
    before = await engine.store.load_events()
    for key in ("child:c", None):
        with pytest.raises(NotWaitingError, match=r"child run 'p20/c'; answer that run"):
            await engine.resume("p20", "ask", {"approved": False}, key=key)
        with pytest.raises(NotWaitingError, match=r"child run 'p20/c'"):
            await engine.store.resume_step("p20", 0, False, 0.0, key=key)
    with pytest.raises(NotWaitingError, match=r"child run 'p20/other'"):
        await engine.store.resume_step("p20", 0, False, 0.0, key="child:other")
    assert await engine.store.load_events() == before  # nothing stored
    assert (await engine.resume("p20/c", "ask", 7, key="ok")).status is RunStatus.COMPLETED
    result = await engine.run("p20")
    assert result.status is RunStatus.COMPLETED and result.outputs == ({"got": 7},)


def test_agentq_show_and_approve_point_a_child_wait_to_the_child_run(tmp_path: Path) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", "go on?")

    asker = WorkflowDef("asker", [StepDef("ask", ask)])
    run_on_file(tmp_path / "a.db", parent_of_one(asker, 0, []), "fam", RunStatus.WAITING)

    def invoke(command: str, *args: str) -> Result:
        return agentq(tmp_path / "a.db", command, *args)

    shown = invoke("show", "fam")
    assert shown.exit_code == 0, shown.output
    assert "waiting for child runs" in shown.stdout and "waiting for input" not in shown.stdout
    assert "waiting for child run fam/c" in shown.stdout
    refused = invoke("approve", "fam")
    assert refused.exit_code != 0
    assert "child run 'fam/c'; answer that run" in refused.output
    assert "waiting for input" in invoke("show", "fam/c").stdout


async def test_a_resume_of_an_answered_child_wait_says_it_is_answered(
    engine: WorkflowEngine,
) -> None:
    async def kid(ctx: StepContext) -> Any:
        return {"kid": ctx.input}

    flow = parent_of_one(WorkflowDef("kid", [StepDef("k", kid)]), 5, [])
    await engine.start(flow, "p21")
    assert (await engine.run("p21")).status is RunStatus.COMPLETED
    before = await engine.store.load_events()
    with pytest.raises(NotWaitingError, match=r"'child:c': it is answered, not waiting \(its "
                       r"child run 'p21/c' ended\)"):
        await engine.resume("p21", "ask", {"fake": 1}, key="child:c")
    assert await engine.store.load_events() == before  # nothing stored


async def test_a_retry_answers_the_wait_of_a_child_a_call_awaited_when_cancelled(
    engine: WorkflowEngine,
) -> None:
    """A durable call starts a child and awaits it; the parent is cancelled while the child
    runs (cancelling it), and the call completes with the child's cancelled end. A retry of
    the parent answers the call from the log (the child is not started again) and answers
    the child's wait row with the child's outcome: no row waits in a completed workflow."""
    gate, started = asyncio.Event(), asyncio.Event()
    kid = gated(gate, started)

    async def body(ctx: StepContext) -> Any:
        async def delegate() -> str:
            child_id = await ctx.start_child(kid, 1, key="sub")
            return (await engine.run(child_id)).status.value

        return await ctx.call(Job("delegate", delegate))

    await engine.start(WorkflowDef("par", [StepDef("p", body)]), "P")
    run = asyncio.ensure_future(engine.run("P"))
    await started.wait()
    assert await engine.cancel("P", reason="stop")
    assert (await run).status is RunStatus.CANCELLED
    gate.set()
    result = await engine.retry("P")
    assert result.status is RunStatus.COMPLETED and result.outputs == ("cancelled",)
    rows = {c.key: (c.state, c.output) for c in await engine.store.calls("P")}
    why = "its parent workflow 'P' was cancelled"
    assert rows == {
        "delegate": (CallState.COMPLETED, "cancelled"),
        "child:sub": (CallState.ANSWERED, {"child": "P/sub", "state": "cancelled", "reason": why}),
    }


async def test_a_call_run_again_rejoins_a_child_retried_by_hand(engine: WorkflowEngine) -> None:
    """A durable call starts a child and awaits it; the child fails on its own and the call
    raises (the parent fails). The child, retried by hand, completes; the parent's retry
    runs the call again, whose `start_child` re-joins the child: the wait row answered with
    the failure is re-opened and answered with the outcome the call now reads."""
    fail = {"on": True}

    async def work(ctx: StepContext) -> Any:
        if fail["on"]:
            raise NonRetryable("kid boom")
        return "kid ok"

    kid = WorkflowDef("kid", [StepDef("work", work)])

    async def body(ctx: StepContext) -> Any:
        async def delegate() -> str:
            run = await engine.run(await ctx.start_child(kid, 1, key="sub"))
            if run.status is not RunStatus.COMPLETED:
                raise NonRetryable(f"kid ended {run.status.value}")
            return str(run.outputs[-1])

        return await ctx.call(Job("delegate", delegate))

    await engine.start(WorkflowDef("par", [StepDef("p", body)]), "P")
    assert (await engine.run("P")).status is RunStatus.FAILED
    fail["on"] = False
    assert (await engine.retry("P/sub")).status is RunStatus.COMPLETED
    [wait] = [c for c in await engine.store.calls("P") if c.key == "child:sub"]
    assert wait.runs == 1 and wait.output["state"] == "failed"  # the retry alone: untouched
    result = await engine.retry("P")
    assert result.status is RunStatus.COMPLETED and result.outputs == ("kid ok",)
    [wait] = [c for c in await engine.store.calls("P") if c.key == "child:sub"]
    assert wait.state is CallState.ANSWERED and wait.runs == 2
    assert wait.output == {"child": "P/sub", "state": "completed", "output": "kid ok"}
