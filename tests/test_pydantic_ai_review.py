"""`agentq.integrations.pydantic_ai`: what a fresh-user review found (review 11), as tests.

A scripted support agent (`FunctionModel`): ``lookup`` (no approval), then ``refund`` (needs
approval), then an answer quoting the last tool return. `Effects` counts what really ran.
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, CallDeferred
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.errors import NotWaitingError, UnknownWorkflowError
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import DurableStore, SqliteStore


@dataclass
class Bank:
    name: str
    refunds: list[str] = field(default_factory=list)


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    n = sum(isinstance(m, ModelResponse) for m in messages)
    if n == 0:
        return ModelResponse(parts=[ToolCallPart("lookup", {"order_id": 42}, "c-lookup")])
    if n == 1:
        return ModelResponse(
            parts=[ToolCallPart("refund", {"order_id": 42, "amount": 120}, "c-refund")])
    rets = [p.content for m in messages for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(f"Done: {rets[-1]}")])


def support(effects: list[str]) -> Agent[Bank | None, str]:
    agent: Agent[Bank | None, str] = Agent(FunctionModel(scripted), name="support")

    @agent.tool_plain
    def lookup(order_id: int) -> dict[str, int]:
        effects.append(f"lookup {order_id}")
        return {"order_id": order_id, "total": 120}

    @agent.tool(requires_approval=True)
    def refund(ctx: RunContext[Bank | None], order_id: int, amount: int) -> str:
        bank = ctx.deps
        assert bank is not None, "refund needs its Bank deps"
        bank.refunds.append(f"{order_id} {amount}")
        effects.append(f"refund {order_id} {amount}")
        return f"refunded {amount} via {bank.name}"

    return agent


def contents(messages: list[ModelMessage]) -> list[list[tuple[str, object]]]:
    """Each message's parts as (kind, content or args): what a rebuild must give back."""
    return [[(p.part_kind, getattr(p, "content", getattr(p, "args", None))) for p in m.parts]
            for m in messages]


# --- 2: deps for a run continued where run(deps=) was not called ------------------------------

async def test_approve_after_a_restart_takes_deps(tmp_path: Path, clock: FakeClock) -> None:
    db, effects = tmp_path / "a.db", []
    async with Queue(clock=clock) as q, SqliteStore(db) as s:
        engine = WorkflowEngine(q, s, clock=clock)
        await DurableAgent(support(effects), engine).run("refund", run_id="u", deps=Bank("a"))
    async with Queue(clock=clock) as q, SqliteStore(db) as s:  # a kernel restart
        durable = DurableAgent(support(effects), WorkflowEngine(q, s, clock=clock))
        bank = Bank("acme")
        done = await durable.approve("u", deps=bank)
    assert done.status is RunStatus.COMPLETED, done.reason
    assert done.output == "Done: refunded 120 via acme" and bank.refunds == ["42 120"]


async def test_deps_factory_serves_runs_continued_by_the_engine(engine: WorkflowEngine) -> None:
    effects: list[str] = []
    banks: dict[str, Bank] = {}

    def factory(run_id: str) -> Bank:
        return banks.setdefault(run_id, Bank(f"bank-of-{run_id}"))

    durable = DurableAgent(support(effects), engine, deps_factory=factory)
    assert (await durable.run("refund", run_id="f")).status is RunStatus.WAITING
    # Answered by engine.resume (the panel's path): no deps were given in this process.
    result = await engine.resume("f", "agent", True, key="approval:1.0:c-refund")
    assert result.status is RunStatus.COMPLETED, result.reason
    assert banks["f"].refunds == ["42 120"]


async def test_run_with_deps_on_a_failed_run_keeps_them_for_the_retry(
    engine: WorkflowEngine,
) -> None:
    effects: list[str] = []
    durable = DurableAgent(support(effects), engine)
    await durable.run("refund", run_id="r")
    failed = await durable.approve("r")  # no deps anywhere: the tool fails
    assert failed.status is RunStatus.FAILED and "Bank" in (failed.reason or "")
    bank = Bank("late")
    again = await durable.run("refund", run_id="r", deps=bank)
    assert again.status is RunStatus.FAILED  # run() reports; the retry continues
    assert (await engine.retry("r")).status is RunStatus.COMPLETED
    assert bank.refunds == ["42 120"] and effects.count("lookup 42") == 1


# --- 6: deps released when a run ends by any path ----------------------------------------------

async def test_deps_are_released_when_the_run_ends_through_approve_or_resume(
    store: DurableStore, clock: FakeClock
) -> None:
    # max_keys=1: the queue forgets finished jobs (whose step closures hold the run's
    # context) at once, so only the agent could keep the deps alive.
    async with Queue(clock=clock, max_keys=1) as queue:
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(support([]), engine)
        refs = []
        for i in range(3):
            bank = Bank(str(i))
            refs.append(weakref.ref(bank))
            await durable.run("refund", run_id=f"t{i}", deps=bank)
        assert (await durable.approve("t0")).status is RunStatus.COMPLETED
        assert (await durable.deny("t1")).status is RunStatus.COMPLETED
        result = await engine.resume("t2", "agent", True, key="approval:1.0:c-refund")
        assert result.status is RunStatus.COMPLETED
        await durable.run("refund", run_id="t3")  # a later job pushes the last ones out
        del bank, result
        gc.collect()
        assert [r() for r in refs] == [None, None, None]


# --- 3: a run's messages are not its stored result ---------------------------------------------

async def test_a_run_bigger_than_the_payload_limit_completes_and_keeps_its_messages(
    engine: WorkflowEngine,
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < 3:
            return ModelResponse(parts=[ToolCallPart("fetch_page", {"n": n}, f"c{n}")])
        if n == 3:
            return ModelResponse(parts=[ToolCallPart("send", {}, "c-send")])
        return ModelResponse(parts=[TextPart("summary sent")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="big")
    sent: list[str] = []

    @agent.tool_plain
    def fetch_page(n: int) -> str:
        return f"page {n} " + "lorem ipsum " * 40_000  # ~480 KB each, 1.4 MB in all

    @agent.tool_plain
    def send() -> str:
        sent.append("email")
        return "sent"

    durable = DurableAgent(agent, engine)
    run = await durable.run("summarise three pages and email me", run_id="big")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "summary sent" and sent == ["email"]
    assert len(run.messages) == 10 and run.usage.requests == 5
    [step] = await engine.status("big")
    assert "messages" not in step.output  # type: ignore[union-attr]
    # Read back (a re-run of the completed id): the messages are rebuilt, nothing runs.
    again = await durable.run("summarise three pages and email me", run_id="big")
    assert contents(again.messages) == contents(run.messages) and sent == ["email"]


# --- 4: override_args are the complete arguments, checked against the tool's schema ------------

async def test_approve_refuses_partial_override_args_before_recording(
    engine: WorkflowEngine,
) -> None:
    effects: list[str] = []
    durable = DurableAgent(support(effects), engine)
    await durable.run("refund", run_id="o", deps=Bank("b"))
    for bad, field_name in [({"amount": 40}, "order_id"), ({}, "order_id"),
                            ({"order_id": 42, "amount": "x"}, "amount"),
                            ({"order_id": 42, "amount": 1, "extra": 1}, "extra")]:
        with pytest.raises(ValueError, match=field_name):
            await durable.approve("o", override_args=bad)
    [pending] = await durable.pending_approvals("o")
    assert pending.key == "approval:1.0:c-refund"  # nothing recorded
    done = await durable.approve("o", override_args={"order_id": 42, "amount": 40})
    assert done.status is RunStatus.COMPLETED and effects[-1] == "refund 42 40"


async def test_a_partial_override_through_resume_is_asked_again(engine: WorkflowEngine) -> None:
    effects: list[str] = []
    durable = DurableAgent(support(effects), engine, deps_factory=lambda _: Bank("b"))
    await durable.run("refund", run_id="p")
    answer = {"approved": True, "override_args": {"amount": 40}}
    again = await engine.resume("p", "agent", answer, key="approval:1.0:c-refund")
    assert again.status is RunStatus.WAITING
    [pending] = await durable.pending_approvals("p")
    assert pending.key == "approval:1.0:c-refund#1" and "order_id" in pending.reason
    assert effects == ["lookup 42"]


# --- 5: message_history checked before anything is stored --------------------------------------

async def test_a_bad_message_history_is_refused_and_nothing_is_stored(
    engine: WorkflowEngine,
) -> None:
    durable = DurableAgent(Agent(TestModel(), name="chat"), engine)
    prev = await durable.run("hi", run_id="turn-1")
    bad: list[tuple[Any, type[Exception], str]] = [
        ("hello", TypeError, "'hello'"),
        (prev, TypeError, ".messages"),
        ([{"role": "user", "content": "hi"}], ValueError, r"message_history\[0\]"),
        ([*prev.messages, 5], TypeError, r"message_history\[2\] is 5"),
    ]
    for i, (history, error, match) in enumerate(bad):
        with pytest.raises(error, match=match):
            await durable.run("again", run_id=f"bad-{i}", message_history=history)
        assert await engine.store.get_workflow(f"bad-{i}") is None
    good = await durable.run("again", run_id="bad-0", message_history=prev.messages)
    assert good.status is RunStatus.COMPLETED


# --- 8: a stuck tool is bounded by tool_timeout -------------------------------------------------

async def test_tool_timeout_bounds_a_stuck_tool(engine: WorkflowEngine, clock: FakeClock) -> None:
    import asyncio

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("fetch", {}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), name="stuck")
    started = asyncio.Event()

    @agent.tool_plain
    async def fetch() -> str:
        started.set()
        await asyncio.Event().wait()  # never returns
        return "ok"

    with pytest.raises(ValueError, match="-1"):
        DurableAgent(agent, engine, tool_timeout=-1)
    durable = DurableAgent(agent, engine, tool_timeout=5.0)
    task = asyncio.create_task(durable.run("go", run_id="h"))
    await started.wait()
    await clock.advance(5.0)
    run = await asyncio.wait_for(task, 10)
    assert run.status is RunStatus.FAILED and "timeout" in (run.reason or "").lower()
    [call] = [r for r in await engine.store.calls("h") if r.key == "tool:0.0:c1"]
    assert call.state == "failed"


# --- 10: approve / deny say why nothing waits ----------------------------------------------------

async def test_approve_on_an_unknown_or_finished_run_says_so(engine: WorkflowEngine) -> None:
    durable = DurableAgent(support([]), engine, deps_factory=lambda _: Bank("b"))
    with pytest.raises(UnknownWorkflowError, match="'no-such-run'"):
        await durable.approve("no-such-run")
    await durable.run("refund", run_id="done")
    await durable.approve("done")
    with pytest.raises(NotWaitingError, match="'done' is completed"):
        await durable.deny("done")
    await durable.run("refund", run_id="w")
    with pytest.raises(LookupError, match="c-refund"):
        await durable.approve("w", "not-a-call")


# --- 11: RequestInput waits are listed, and a bad payload is asked again -------------------------

async def test_a_request_input_wait_is_listed_and_a_bad_payload_asked_again(
    engine: WorkflowEngine,
) -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="ext",
                                    capabilities=[RequestInput(lambda *a: None)])

    @agent.tool_plain
    def ship(parcel: str) -> str:
        raise CallDeferred

    durable = DurableAgent(agent, engine)
    run = await durable.run("ship it", run_id="ev")
    assert run.status is RunStatus.WAITING
    [wait] = run.pending
    assert (wait.kind, wait.key, wait.tool) == (
        "event", "event:deferred_tool_calls:0", "deferred_tool_calls")
    assert "key='event:deferred_tool_calls:0'" in wait.reason
    assert await durable.pending_approvals("ev") == [wait]
    with pytest.raises(NotWaitingError, match="event:deferred_tool_calls:0"):
        await durable.approve("ev")

    again = await engine.resume("ev", "agent", "garbage", key=wait.key)
    assert again.status is RunStatus.WAITING
    [wait] = await durable.pending_approvals("ev")
    assert wait.key == "event:deferred_tool_calls:0#1" and "'garbage'" in wait.reason
    [call] = [r.label["tool_call_id"] for r in await engine.store.calls("ev")
              if r.key.startswith("tool:") and r.label]
    payload = {"calls": {call: "shipped by hand"}}
    done = await engine.resume("ev", "agent", payload, key=wait.key)
    assert done.status is RunStatus.COMPLETED, done.reason
