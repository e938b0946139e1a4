"""`WorkflowEngine.fork`: a new workflow whose history up to a step or a call is another's.

Counters in the step and call bodies say what really ran again; the logs say what was copied.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentq import Job, Queue, RunStatus, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.errors import (
    PayloadError,
    UnknownWorkflowError,
    WorkflowMismatchError,
)
from agentq.events import EventKind
from agentq.store import MemoryStore, SqliteStore, WorkflowState
from agentq.workflows import Workflow

pytestmark = pytest.mark.timeout(30)

RAN: Counter[str] = Counter()
BROKEN: set[str] = set()


async def tool(key: str, n: int) -> dict[str, Any]:
    RAN[key] += 1
    if key in BROKEN:
        raise RuntimeError(f"{key} is broken")
    return {"key": key, "square": n * n}


async def calls(ctx: StepContext) -> list[Any]:
    RAN["step:calls"] += 1
    return [
        await ctx.call(Job(f"call-{n}", functools.partial(tool, f"call-{n}", n)))
        for n in range(1, 5)
    ]


async def total(ctx: StepContext) -> int:
    RAN["step:total"] += 1
    return sum(out["square"] for out in ctx.previous)


async def first(ctx: StepContext) -> str:
    RAN["step:first"] += 1
    return "first"


DEF = WorkflowDef("forked", [StepDef("first", first), StepDef("calls", calls),
                             StepDef("total", total)])


@pytest.fixture
async def engine() -> AsyncIterator[WorkflowEngine]:
    RAN.clear()
    BROKEN.clear()
    async with Queue() as queue, WorkflowEngine(queue, MemoryStore()) as eng:
        eng.register(DEF)
        await eng.start(DEF, "p", {"n": 1})
        result = await eng.run("p")
        assert result.outputs[2] == 1 + 4 + 9 + 16
        RAN.clear()
        yield eng


async def test_fork_at_a_step_runs_from_that_step(engine: WorkflowEngine) -> None:
    result = await engine.fork("p", "f", at="calls")
    assert result.status is RunStatus.COMPLETED and result.outputs[2] == 30
    assert Counter({"step:calls": 1, "step:total": 1, **{f"call-{n}": 1
                                                                 for n in range(1, 5)}}) == RAN
    row = await engine.store.get_workflow("f")
    assert row is not None and row.input == {"n": 1} and row.definition == "forked"
    events = await engine.store.load_events("f")
    forked = [e for e in events if e.kind is EventKind.WORKFLOW_FORKED]
    assert forked[0].data["parent"] == "p" and forked[0].data["at"]["step_name"] == "calls"


async def test_fork_at_a_call_with_a_replaced_tool_result(engine: WorkflowEngine) -> None:
    result = await engine.fork(
        "p", "f", at=(1, "call-3"), replace={"call-2": {"key": "call-2", "square": 100}}
    )
    assert result.outputs[1][1] == {"key": "call-2", "square": 100}
    assert result.outputs[2] == 1 + 100 + 9 + 16
    # call-1 and call-2 answered from the copies; call-3 on ran live; "first" never ran.
    assert Counter({"step:calls": 1, "step:total": 1, "call-3": 1, "call-4": 1}) == RAN
    assert engine.answered_from_log == 2
    # Replacing the call at `at` itself: the fork continues after it with the edit.
    RAN.clear()
    result = await engine.fork("p", "g", at=("calls", "call-3"),
                               replace={"call-3": {"key": "call-3", "square": 0}})
    assert result.outputs[2] == 1 + 4 + 0 + 16
    assert Counter({"step:calls": 1, "step:total": 1, "call-4": 1}) == RAN


async def mail(workflow_id: str, text: str) -> str:
    RAN[text] += 1
    return f"{text} for {workflow_id}"


async def sends(ctx: StepContext) -> list[str]:
    # the workflow id is a natural value for a tool (its own idempotency key): it differs
    # in a fork, whose copied calls must still answer from the log
    return [
        await ctx.call(Job("draft", functools.partial(mail, ctx.workflow_id, "draft"))),
        await ctx.call(Job("send", functools.partial(mail, ctx.workflow_id, "send"))),
    ]


@pytest.mark.parametrize("replace", [None, {"draft": "edited"}])
async def test_a_fork_answers_copied_calls_that_use_the_workflow_id(
    engine: WorkflowEngine, replace: dict[str, Any] | None
) -> None:
    mails = WorkflowDef("mails", [StepDef("s", sends)])
    engine.register(mails)
    assert (await engine.run(mails.workflow("m"))).outputs == (["draft for m", "send for m"],)
    RAN.clear()
    result = await engine.fork("m", "m-fork", at=("s", "send"), replace=replace)
    assert result.status is RunStatus.COMPLETED, result.reason
    draft = "draft for m" if replace is None else "edited"
    assert result.outputs == ([draft, "send for m-fork"],)
    assert Counter({"send": 1}) == RAN  # the copy answered; only the call after it ran
    # and the fork's own replay (a restart) answers the same way
    rerun = await engine.run("m-fork")
    assert rerun.outputs == result.outputs and Counter({"send": 1}) == RAN


async def test_a_fork_of_a_fork(engine: WorkflowEngine) -> None:
    await engine.fork("p", "f", at=("calls", "call-2"),
                      replace={"call-2": {"key": "call-2", "square": 50}})
    RAN.clear()
    result = await engine.fork("f", "ff", at=("calls", "call-4"),
                               replace={"call-4": {"key": "call-4", "square": 7}})
    assert result.outputs[2] == 1 + 50 + 9 + 7  # the edit of "f" is part of its history
    assert Counter({"step:calls": 1, "step:total": 1}) == RAN
    events = await engine.store.load_events("ff")
    live = next(i for i, e in enumerate(events) if e.kind is EventKind.STEP_STARTED)
    assert {e.data.get("forked_from") for e in events[2:live]} == {"f"}
    assert not any("forked_from" in e.data for e in events[live:])


async def test_the_parent_retried_after_the_fork_leaves_the_fork_alone(
    engine: WorkflowEngine,
) -> None:
    await engine.start(DEF, "q", None)
    BROKEN.add("call-4")
    failed = await engine.run("q")
    assert failed.status is RunStatus.FAILED
    BROKEN.clear()
    fork = await engine.fork("q", "qf", at=("calls", "call-4"))
    assert fork.status is RunStatus.COMPLETED and fork.outputs[2] == 30
    before = (await engine.store.load_events("qf"), await engine.store.calls("qf"))
    retried = await engine.retry("q", from_step="first")
    assert retried.status is RunStatus.COMPLETED
    assert (await engine.store.load_events("qf"), await engine.store.calls("qf")) == before
    assert (await engine.run("qf")).outputs == fork.outputs


async def test_refusals_store_nothing(engine: WorkflowEngine) -> None:
    store = engine.store
    seq = await store.last_seq()
    with pytest.raises(ValueError, match="at names step 'nope'"):
        await engine.fork("p", "f", at="nope")
    with pytest.raises(ValueError, match="at names step 7"):
        await engine.fork("p", "f", at=7)
    with pytest.raises(ValueError, match=r"key 'call-9' .*no call or wait"):
        await engine.fork("p", "f", at=("calls", "call-9"))
    with pytest.raises(ValueError, match=r"'call-4' .*not at or before"):
        await engine.fork("p", "f", at=("calls", "call-2"), replace={"call-4": 1})
    with pytest.raises(ValueError, match="step, call_key"):
        await engine.fork("p", "f", at=("calls", 3))  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        await engine.fork("p", "f", at=("calls", "call-2"), replace={"call-1": {1, 2}})
    with pytest.raises(WorkflowMismatchError, match="into itself"):
        await engine.fork("p", "p", at="calls")
    with pytest.raises(UnknownWorkflowError, match="not stored"):
        await engine.fork("nope", "f", at="calls")
    assert await store.last_seq() == seq and await store.get_workflow("f") is None
    await engine.fork("p", "f", at="total")
    seq = await store.last_seq()
    with pytest.raises(WorkflowMismatchError, match="into 'f': a workflow with that id exists"):
        await engine.fork("p", "f", at="calls")
    assert await store.last_seq() == seq


async def test_an_unregistered_definition_or_plain_workflow_is_refused() -> None:
    async with Queue() as queue, WorkflowEngine(queue, MemoryStore()) as engine:
        plain = Workflow("plain", [StepDef("first", first), StepDef("total", lambda ctx: 1)])
        await engine.run(plain)
        with pytest.raises(UnknownWorkflowError, match="pass the Workflow itself"):
            await engine.fork("plain", "pf", at="total")
        result = await engine.fork(plain, "pf", at="total")  # given: its steps are the fork's
        assert result.status is RunStatus.COMPLETED and result.outputs == ("first", 1)
        await engine.start(DEF, "d", None)
        engine.unregister(DEF.name)
        with pytest.raises(UnknownWorkflowError, match="definition 'forked' is not registered"):
            await engine.fork("d", "df", at="calls")
        assert await engine.store.get_workflow("df") is None
        row = await engine.store.get_workflow("pf")
        assert row is not None and row.state is WorkflowState.COMPLETED


def test_agentq_show_names_the_parent(tmp_path: Path) -> None:
    db = tmp_path / "fork.db"

    async def make() -> None:
        async with Queue() as queue, SqliteStore(db) as store:
            engine = WorkflowEngine(queue, store)
            engine.register(DEF)
            await engine.start(DEF, "p", None)
            await engine.run("p")
            replace = {"call-2": {"key": "call-2", "square": 0}}
            result = await engine.fork("p", "f", at=("calls", "call-3"), replace=replace)
            assert result.outputs[2] == 1 + 0 + 9 + 16

    asyncio.run(make())
    result = CliRunner().invoke(cli, ["show", str(db), "f"], obj=Settings(width=200))
    assert result.exit_code == 0, result.output
    assert "forked from p at step 'calls', call 'call-3' (replaced: call-2)" in result.stdout
    result = CliRunner().invoke(cli, ["show", str(db), "p"], obj=Settings(width=200))
    assert "forked from" not in result.stdout
