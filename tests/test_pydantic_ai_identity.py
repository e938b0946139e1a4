"""A durable agent call's identity (its place in the run, tool and arguments), tool returns that
cannot be stored, and the tool calls of one response running concurrently.

Scripted with `FunctionModel`: each test says which tool calls each model response holds.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import agent_crash_child as child
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.queue import LaneConfig, Priority
from agentq.store import CallState, SqliteStore

Script = Sequence[Sequence[ToolCallPart]]


def scripted(turns: Script) -> FunctionModel:
    """A model answering request n with the tool calls ``turns[n]``, then with the returns."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < len(turns):
            return ModelResponse(parts=list(turns[n]))
        returns = [str(p.content) for m in messages if isinstance(m, ModelRequest)
                   for p in m.parts if p.part_kind == "tool-return"]
        return ModelResponse(parts=[TextPart(" | ".join(returns))])

    return FunctionModel(respond)


def call_rows(rows: Sequence[Any]) -> list[str]:
    """The keys of a run's calls and waits, in the order they were first recorded."""
    return [r.key for r in rows]


# ------------------------------------------------------------------ identity (20.1)


async def test_a_reused_tool_call_id_in_a_later_response_is_another_call(
    engine: WorkflowEngine,
) -> None:
    agent: Agent[None, str] = Agent(scripted([
        [ToolCallPart("lookup_order", {"order": 1}, "call_0")],
        [ToolCallPart("lookup_order", {"order": 2}, "call_0")],
    ]), name="orders")
    ran: list[int] = []

    @agent.tool_plain
    def lookup_order(order: int) -> str:
        ran.append(order)
        return f"order {order}"

    durable = DurableAgent(agent, engine)
    run = await durable.run("look both up", run_id="reuse")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "order 1 | order 2" and ran == [1, 2]
    assert call_rows(await engine.store.calls("reuse")) == [
        "model:0", "tool:0.0:call_0", "model:1", "tool:1.0:call_0", "model:2"]
    # The messages rebuild from the log, each call with its own return.
    returns = [p.content for m in await durable.messages("reuse")
               for p in getattr(m, "parts", []) if p.part_kind == "tool-return"]
    assert returns == ["order 1", "order 2"] and ran == [1, 2]


async def test_a_reused_tool_call_id_is_put_up_for_approval_again(
    engine: WorkflowEngine,
) -> None:
    agent: Agent[None, str] = Agent(scripted([
        [ToolCallPart("refund", {"amount": 5}, "call_0")],
        [ToolCallPart("refund", {"amount": 500}, "call_0")],
    ]), name="refunds")
    refunds: list[int] = []

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        refunds.append(amount)
        return f"refunded {amount}"

    durable = DurableAgent(agent, engine)
    run = await durable.run("refund", run_id="twice")
    assert run.status is RunStatus.WAITING
    assert [(p.args, p.key) for p in run.pending] == [({"amount": 5}, "approval:0.0:call_0")]
    run = await durable.approve("twice")
    assert run.status is RunStatus.WAITING, run.reason  # 500 is another call: asked again
    assert [(p.args, p.key) for p in run.pending] == [({"amount": 500}, "approval:1.0:call_0")]
    assert refunds == [5]
    run = await durable.deny("twice", "call_0", note="too much")
    assert run.status is RunStatus.COMPLETED and refunds == [5]
    assert run.output == "refunded 5 | too much"


async def test_the_same_id_twice_in_one_response_fails_as_pydantic_ai_does(
    engine: WorkflowEngine,
) -> None:
    agent: Agent[None, str] = Agent(scripted([[
        ToolCallPart("lookup_order", {"order": 1}, "call_0"),
        ToolCallPart("lookup_order", {"order": 2}, "call_0"),
    ]]), name="dupes")
    ran: list[int] = []

    @agent.tool_plain
    def lookup_order(order: int) -> str:
        ran.append(order)
        return f"order {order}"

    run = await DurableAgent(agent, engine).run("look up", run_id="dup")
    # Plain pydantic-ai refuses such a response before running any call; so does the run,
    # rather than answering one call with the other's result.
    assert run.status is RunStatus.FAILED and ran == []
    assert "unique `tool_call_id`" in (run.reason or "")


@dataclass
class Rewrite(AbstractCapability[None]):
    """Changes the arguments ``lookup_order`` runs with (as a changed hook would)."""

    async def before_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: dict[str, Any]
    ) -> dict[str, Any]:
        return {**args, "order": 7} if call.tool_name == "lookup_order" else args


async def test_other_arguments_on_replay_are_a_divergence(engine: WorkflowEngine) -> None:
    def build(*capabilities: AbstractCapability[None]) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(scripted([
            [ToolCallPart("lookup_order", {"order": 1}, "c1")],
            [ToolCallPart("refund", {"amount": 5}, "c2")],
        ]), name="args", capabilities=list(capabilities))
        agent.tool_plain(name="lookup_order")(lambda order: f"order {order}")
        agent.tool_plain(name="refund", requires_approval=True)(lambda amount: "refunded")
        return agent

    run = await DurableAgent(build(), engine).run("go", run_id="args")
    assert run.status is RunStatus.WAITING
    # Deployed meanwhile: a hook that changes the arguments of `lookup_order`.
    done = await DurableAgent(build(Rewrite()), engine).approve("args")
    assert done.status is RunStatus.FAILED
    assert done.reason is not None and "\n" not in done.reason
    assert ("diverged from its log at position 1: the log has tool call `lookup_order` "
            "(tool:0.0:c1) with other arguments") in done.reason


async def test_a_log_written_with_the_old_keys_still_replays(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Keys ``tool:<id>`` and ``approval:<id>`` (before a call's place was in its key)."""
    side, db = tmp_path / "side.txt", tmp_path / "agent.db"
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(child.build_agent(side, approval=True), engine)
        assert (await durable.run(child.PROMPT, run_id="old")).status is RunStatus.WAITING
    # Rewrite the log as the old code wrote it: its keys, its labels; then rebuild the rows.
    old = {"tool:0.0:a1": "tool:a1", "tool:0.1:a2": "tool:a2", "tool:1.0:m1": "tool:m1",
           "approval:2.0:s1": "approval:s1"}
    with sqlite3.connect(db) as con:
        guards = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                             "AND tbl_name = 'events'").fetchall()
        for name, _ in guards:  # the log is append-only: lifted for this rewrite only
            con.execute(f'DROP TRIGGER "{name}"')
        for seq, data in con.execute("SELECT seq, data FROM events").fetchall():
            event = json.loads(data)
            if event.get("key") in old:
                event["key"] = old[event["key"]]
            label = event.get("label")
            if isinstance(label, dict):
                event["label"] = {k: v for k, v in label.items()
                                  if k in ("kind", "tool", "request")}
            con.execute("UPDATE events SET data = ? WHERE seq = ?", (json.dumps(event), seq))
        for _, sql in guards:
            con.execute(sql)
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        await store.rebuild_projection()
        assert [r.key for r in await store.calls("old")] == [
            "model:0", "tool:a1", "tool:a2", "model:1", "tool:m1", "model:2", "approval:s1"]
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(child.build_agent(side, approval=True), engine)
        [pending] = await durable.pending_approvals()
        assert pending.key == "approval:s1"
        done = await durable.approve("old", "s1")
        assert done.status is RunStatus.COMPLETED, done.reason
        answered = engine.answered_from_log
        keys = [r.key for r in await store.calls("old")]
    runs = Counter(line.rsplit(" ", 1)[0] for line in side.read_text().splitlines())
    assert all(n == 1 for n in runs.values()), runs
    assert runs["tool send bob"] == 1
    assert answered == 7  # the six recorded calls and the approval, by their old keys
    assert keys[:7] == ["model:0", "tool:a1", "tool:a2", "model:1", "tool:m1", "model:2",
                        "approval:s1"]
    assert keys[7:] == ["tool:2.0:s1:approved", "model:3"]  # new calls: new keys


# ------------------------------------------------------------------ a return not JSON (20.2)


class Receipt:
    """Not JSON: pydantic cannot serialise it."""


async def test_a_tool_return_that_is_not_json_fails_the_run_with_a_payload_error(
    engine: WorkflowEngine,
) -> None:
    agent: Agent[None, str] = Agent(scripted([
        [ToolCallPart("charge", {"cents": 500}, "c1")],
    ]), name="charges")
    charged: list[int] = []

    @agent.tool_plain
    def charge(cents: int) -> Any:
        charged.append(cents)
        return Receipt()

    run = await DurableAgent(agent, engine).run("charge", run_id="pay")
    assert run.status is RunStatus.FAILED and charged == [500]
    assert run.reason is not None
    assert "PayloadError" in run.reason and "`charge`" in run.reason and "Receipt" in run.reason
    [row] = [r for r in await engine.store.calls("pay") if r.key.startswith("tool:")]
    assert row.state is CallState.FAILED and row.error is not None
    assert row.error.type.endswith("PayloadError")
    [step] = await engine.store.step_rows("pay")
    assert step.attempt == 1  # failed at once, not retried


async def test_a_step_retry_policy_never_runs_a_tool_whose_return_cannot_be_stored_again(
    engine: WorkflowEngine,
) -> None:
    """The agent's step in a workflow that retries it three times: the tool runs once."""
    from agentq.integrations.pydantic_ai._capability import AgentqDurability
    from agentq.integrations.pydantic_ai._step import AgentStep
    from agentq.retry import RetryPolicy
    from agentq.workflows import StepDef, Workflow

    agent: Agent[None, str] = Agent(scripted([
        [ToolCallPart("charge", {"cents": 500}, "c1")],
    ]), name="charges")
    charged: list[int] = []

    @agent.tool_plain
    def charge(cents: int) -> Any:
        charged.append(cents)
        return Receipt()

    capability = partial(
        AgentqDurability[None],
        name="charges", model_priority=Priority.HIGH, tool_priority=Priority.MEDIUM)
    step = AgentStep(agent, "charges", capability, None, engine.store)
    run_input = {"agent": "charges", "prompt": "charge", "message_history": None}
    result = await engine.run(
        Workflow("pay3", [StepDef("agent", step.run, retry=RetryPolicy(3))], run_input))
    assert result.status is RunStatus.FAILED and charged == [500]
    assert "PayloadError" in (result.reason or "")


# ------------------------------------------------------------------ parallel tool calls (21)


def gated_agent(name: str, started: list[str], gates: dict[str, asyncio.Event]) -> Agent[None, str]:
    """One response with three ``wait`` calls; each waits for the next one to have started."""
    agent: Agent[None, str] = Agent(scripted([[
        ToolCallPart("wait", {"name": n}, f"w{n}") for n in ("a", "b", "c")
    ]]), name=name)

    @agent.tool_plain
    async def wait(name: str) -> str:
        started.append(name)
        if len(started) == 3:
            for gate in gates.values():
                gate.set()
        await gates[name].wait()  # only set once all three run at once
        return f"done {name}"

    return agent


async def test_the_tool_calls_of_one_response_run_concurrently_in_the_default_lanes(
    store: Any, clock: FakeClock,
) -> None:
    started: list[str] = []
    gates = {n: asyncio.Event() for n in "abc"}
    async with Queue(clock=clock) as queue:  # the default lanes
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(gated_agent("par", started, gates), engine)
        async with asyncio.timeout(10):
            run = await durable.run("go", run_id="par")
        assert run.status is RunStatus.COMPLETED, run.reason
        assert run.output == "done a | done b | done c"  # the model's order
        rows = await store.calls("par")
        assert sorted(r.key for r in rows if r.key.startswith("tool:")) == [
            "tool:0.0:wa", "tool:0.1:wb", "tool:0.2:wc"]
        # A replay (its messages) accepts the calls in the order they were recorded.
        returns = [p.content for m in await durable.messages("par")
                   for p in getattr(m, "parts", []) if p.part_kind == "tool-return"]
        assert returns == ["done a", "done b", "done c"]
        await engine.close()


async def test_parallel_calls_are_bounded_by_the_permits_of_the_tool_lane(
    store: Any, clock: FakeClock,
) -> None:
    running = peak = 0

    lanes = {Priority.MEDIUM: LaneConfig(capacity=20, permits=2)}  # the step's and the tools'
    async with Queue(lanes, clock=clock) as queue:
        engine = WorkflowEngine(queue, store, clock=clock)
        agent: Agent[None, str] = Agent(scripted([[
            ToolCallPart("work", {"n": n}, f"c{n}") for n in range(4)
        ]]), name="bounded")

        @agent.tool_plain
        async def work(n: int) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            for _ in range(5):
                await asyncio.sleep(0)
            running -= 1
            return n

        run = await DurableAgent(agent, engine).run("go", run_id="bounded")
        assert run.status is RunStatus.COMPLETED, run.reason
        assert run.output == "0 | 1 | 2 | 3"
        await engine.close()
    assert peak == 2  # one on the step's own permit (inline), one on the free permit


# ------------------------------------------------------------------ the journal's check


class _Ctx:
    workflow_id = "j"


def _journal(*recorded: tuple[str, str | None]) -> Any:
    """A journal over recorded (kind, key) operations, tool calls of tool ``t``."""
    from agentq.integrations.pydantic_ai._journal import Operation, RunJournal, _batched

    ops = [Operation(kind, key, None if kind == "model" else "t") for kind, key in recorded]
    return RunJournal(_Ctx(), "agent", _batched(ops))  # type: ignore[arg-type]


def test_the_calls_of_one_response_replay_in_any_order() -> None:
    journal = _journal(("model", "model:0"), ("tool", "tool:0.2:c"), ("tool", "tool:0.0:a"),
                       ("tool", "tool:0.1:b"), ("model", "model:1"))
    journal.next_model()
    for place, call_id in ((0, "a"), (1, "b"), (2, "c")):
        assert journal.tool("t", call_id, place, "x").key == f"tool:0.{place}:{call_id}"
    assert journal.next_model().key == "model:1"
    assert journal.next_model().key == "model:2"  # past the log: new


def test_a_call_of_the_response_the_log_is_in_may_be_new_but_not_one_of_a_later() -> None:
    from agentq.integrations.pydantic_ai._journal import ReplayDivergenceError

    journal = _journal(("model", "model:0"), ("tool", "tool:0.1:b"))
    journal.next_model()
    assert journal.tool("t", "a", 0, "x").key == "tool:0.0:a"  # never started: new
    journal.tool("t", "b", 1, "x")
    journal = _journal(("model", "model:0"), ("tool", "tool:0.0:a"), ("model", "model:1"))
    journal.next_model()
    journal.tool("t", "a", 0, "x")
    with pytest.raises(ReplayDivergenceError, match=r"position 2: the log has model request "
                       r"\(model:1\), the replay made tool call `t` \(tool:0.1:b\)"):
        journal.tool("t", "b", 1, "x")
    journal = _journal(("model", "model:0"), ("tool", "tool:0.0:a"), ("tool", "tool:0.1:b"))
    journal.next_model()
    journal.tool("t", "a", 0, "x")
    with pytest.raises(ReplayDivergenceError, match=r"position 2: the log has tool call `t` "
                       r"\(tool:0.1:b\), the replay made model request \(model:1\)"):
        journal.next_model()
