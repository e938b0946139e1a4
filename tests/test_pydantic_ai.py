"""`agentq.integrations.pydantic_ai`: pydantic-ai agents whose calls and approvals are durable.

The agents are scripted (`FunctionModel`, `TestModel`) and offline; every model request and
tool body writes a line to a side file (see `agent_crash_child.py`), so the tests count what
really ran.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import agent_crash_child as child
import pytest
from pydantic_ai import Agent, ApprovalRequired
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import RunContext

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.errors import UnknownWorkflowError, WorkflowMismatchError
from agentq.integrations.pydantic_ai import DurableAgent, approval_input
from agentq.store import CallKind, DurableStore, SqliteStore


def ran(side: Path) -> Counter[str]:
    """How often each model request / tool body ran (the side channel, pids dropped)."""
    if not side.exists():
        return Counter()
    return Counter(line.rsplit(" ", 1)[0] for line in side.read_text().splitlines())


ONCE_EACH = Counter({"model 0": 1, "tool add 1 2": 1, "tool add 3 4": 1, "model 1": 1,
                     "tool mul 3 7": 1, "model 2": 1})


async def test_a_run_with_tools_records_each_request_and_call(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side), engine)
    run = await durable.run(child.PROMPT, run_id="r1")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "done after 2 requests"
    assert ran(side) == ONCE_EACH
    rows = [r for r in await engine.store.calls("r1") if r.kind is CallKind.CALL]
    assert [(r.key, r.label and r.label["kind"], r.lane) for r in rows] == [
        ("model:0", "model", "high"), ("tool:0.0:a1", "tool", "medium"),
        ("tool:0.1:a2", "tool", "medium"), ("model:1", "model", "high"),
        ("tool:1.0:m1", "tool", "medium"), ("model:2", "model", "high"),
    ]
    assert [r.label["tool"] for r in rows if r.label and r.label["kind"] == "tool"] == [
        "add", "add", "mul"]
    usage = [r.usage for r in rows if r.key.startswith("model:")]
    assert all(u and u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage)
    assert run.usage.requests == 3
    assert [m.kind for m in run.messages][:2] == ["request", "response"]

    # A completed run_id returns its recorded result and runs nothing.
    again = await durable.run(child.PROMPT, run_id="r1")
    assert again.output == run.output and ran(side) == ONCE_EACH


async def test_test_model_calls_every_tool_once(engine: WorkflowEngine) -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="tm")
    calls: list[str] = []

    @agent.tool_plain
    def lookup(city: str) -> str:
        calls.append(city)
        return f"sunny in {city}"

    run = await DurableAgent(agent, engine).run("weather?", run_id="tm-1")
    assert run.status is RunStatus.COMPLETED and len(calls) == 1
    keys = [r.key for r in await engine.store.calls("tm-1")]
    assert keys[0] == "model:0" and keys[1].startswith("tool:") and keys[2] == "model:1"


async def test_approve_runs_the_tool_once_and_earlier_calls_answer_from_the_log(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    run = await durable.run(child.PROMPT, run_id="ap")
    assert run.status is RunStatus.WAITING
    [pending] = run.pending
    assert (pending.tool, pending.args, pending.tool_call_id, pending.key) == (
        "send", {"to": "bob"}, "s1", "approval:2.0:s1")
    assert await durable.pending_approvals() == [pending]
    [step] = await engine.status("ap")
    assert step.details == {"tool": "send", "args": {"to": "bob"}, "tool_call_id": "s1",  # type: ignore[union-attr]
                            "agent": "calc"}

    done = await durable.approve("ap")
    assert done.status is RunStatus.COMPLETED and done.output == "done after 3 requests"
    assert ran(side)["tool send bob"] == 1
    assert all(n == 1 for n in ran(side).values()), ran(side)
    assert await durable.pending_approvals() == []


async def test_approve_through_engine_resume_with_edited_arguments(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    await durable.run(child.PROMPT, run_id="edit")
    answer = {"approved": True, "note": "", "override_args": {"to": "alice"}}
    result = await engine.resume("edit", "agent", answer, key="approval:2.0:s1")
    assert result.status is RunStatus.COMPLETED
    assert ran(side)["tool send alice"] == 1 and ran(side)["tool send bob"] == 0


async def test_deny_tells_the_model_and_skips_the_tool(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    await durable.run(child.PROMPT, run_id="deny")
    done = await durable.deny("deny", "s1", note="bob is on holiday")
    assert done.status is RunStatus.COMPLETED
    assert ran(side)["tool send bob"] == 0
    returns = [p for m in done.messages for p in getattr(m, "parts", [])
               if getattr(p, "tool_call_id", None) == "s1" and p.part_kind == "tool-return"]
    assert [p.content for p in returns] == ["bob is on holiday"]


async def test_an_invalid_answer_is_asked_again_and_nothing_is_lost(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    await durable.run(child.PROMPT, run_id="bad")
    again = await engine.resume("bad", "agent", {"approved": "yes"}, key="approval:2.0:s1")
    assert again.status is RunStatus.WAITING
    [pending] = await durable.pending_approvals("bad")
    assert pending.key == "approval:2.0:s1#1" and "'yes'" in pending.reason
    done = await durable.approve("bad", "s1")
    assert done.status is RunStatus.COMPLETED and ran(side)["tool send bob"] == 1


def test_approval_input_checks_its_values() -> None:
    assert approval_input(True, "ok", {"to": "x"}) == {
        "approved": True, "note": "ok", "override_args": {"to": "x"}}
    with pytest.raises(TypeError, match="'yes'"):
        approval_input("yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\[1\]"):
        approval_input(True, override_args=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="approved=True"):
        approval_input(False, override_args={"to": "x"})


async def test_approval_required_raised_by_a_tool_waits_too(engine: WorkflowEngine) -> None:
    agent: Agent[None, str] = Agent(TestModel(), name="refunds")
    refunds: list[int] = []

    @agent.tool
    def refund(ctx: RunContext[None], amount: int) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={"amount": amount})
        refunds.append(amount)
        return "refunded"

    durable = DurableAgent(agent, engine)
    run = await durable.run("refund", run_id="rf")
    assert run.status is RunStatus.WAITING and run.pending[0].tool == "refund"
    assert refunds == []
    done = await durable.approve("rf", override_args={"amount": 5})
    assert done.status is RunStatus.COMPLETED and refunds == [5]


async def test_restart_while_waiting_for_approval(tmp_path: Path, clock: FakeClock) -> None:
    side, db = tmp_path / "side.txt", tmp_path / "agent.db"
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(child.build_agent(side, approval=True), engine)
        assert (await durable.run(child.PROMPT, run_id="rs")).status is RunStatus.WAITING
    # A new kernel: new queue, store, engine and agent objects on the same file.
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, clock=clock)
        durable = DurableAgent(child.build_agent(side, approval=True), engine)
        [pending] = await durable.pending_approvals()
        assert pending.run_id == "rs" and pending.tool == "send"
        done = await durable.approve("rs", "s1")
        assert done.status is RunStatus.COMPLETED
        answered = engine.answered_from_log
    assert all(n == 1 for n in ran(side).values()), ran(side)
    assert answered == 7  # model:0-2, the three tool calls and the approval, from the log


async def test_a_replay_with_another_tool_rule_fails_naming_the_divergence(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    await DurableAgent(child.build_agent(side, approval=True), engine).run(
        child.PROMPT, run_id="dv")
    # Deployed meanwhile: `add` now needs approval, so the replay asks where the log ran it.
    changed = DurableAgent(child.build_agent(side, approval=True, add_needs_approval=True),
                           engine)
    done = await changed.approve("dv", "s1")
    assert done.status is RunStatus.FAILED
    assert done.reason is not None and (
        "diverged from its log at position 1: the log has tool call `add` (tool:0.0:a1), "
        "the replay made approval of `add` (approval:0.0:a1)") in done.reason
    assert ran(side)["tool send bob"] == 0


async def test_changed_instructions_answer_from_the_log_and_do_not_diverge(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    # Instructions that change on their own (today's date) between the first attempt and the
    # one after the approval: the recorded requests answer from the log (review 11, #1).
    side = tmp_path / "side.txt"
    await DurableAgent(child.build_agent(side, approval=True, instructions="It is 10:00."),
                       engine).run(child.PROMPT, run_id="dv2")
    changed = DurableAgent(child.build_agent(side, approval=True, instructions="It is 10:05."),
                           engine)
    done = await changed.approve("dv2", "s1")
    assert done.status is RunStatus.COMPLETED, done.reason
    assert ran(side)["model 0"] == 1 and ran(side)["tool send bob"] == 1


async def test_two_concurrent_runs_of_one_run_id_execute_once(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    first = DurableAgent(child.build_agent(side), engine)
    second = DurableAgent(child.build_agent(side), engine)
    a, b = await asyncio.gather(first.run(child.PROMPT, run_id="same"),
                                second.run(child.PROMPT, run_id="same"))
    assert a.output == b.output == "done after 2 requests"
    assert ran(side) == ONCE_EACH


async def test_a_stored_run_id_with_another_prompt_is_refused(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)
    await durable.run(child.PROMPT, run_id="p")
    with pytest.raises(WorkflowMismatchError, match="'p'"):
        await durable.run("something else", run_id="p")


async def test_bad_arguments_are_refused(engine: WorkflowEngine, store: DurableStore) -> None:
    with pytest.raises(ValueError, match="name"):
        DurableAgent(Agent(TestModel()), engine)
    with pytest.raises(TypeError, match="Agent"):
        DurableAgent(object(), engine)  # type: ignore[arg-type]
    durable = DurableAgent(Agent(TestModel(), name="x"), engine)
    with pytest.raises(TypeError, match="42"):
        await durable.run(42, run_id="n")  # type: ignore[arg-type]
    with pytest.raises(UnknownWorkflowError, match="'nope'"):
        await durable.approve("nope")


async def test_the_run_tree_shows_requests_tools_and_tokens(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    from agentq.integrations.pydantic_ai.tree import run_tree

    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    await durable.run(child.PROMPT, run_id="<tree>")
    html = await run_tree(engine.store, "<tree>")
    assert html.count('data-kind="model"') == 3  # the dashboard's tree: one mechanism
    assert html.count('data-kind="call"') == 3  # add, add, mul
    assert html.count('data-kind="wait"') == 1  # the approval of send
    assert "&lt;tree&gt;" in html and "<tree>" not in html
    assert html.index("tool:0.0:a1") < html.index("model:1") < html.index("tool:1.0:m1")
    assert "approval of send" in html
    assert 'data-state="waiting"' in html  # the run's own status at the root
    rows = await engine.store.calls("<tree>")
    tokens = sum(r.usage["input_tokens"] for r in rows if r.usage)
    assert f"{tokens} in /" in html
    with pytest.raises(UnknownWorkflowError, match=r"run '<tree' is not in the store"):
        await run_tree(engine.store, "<tree")  # review F8: a typo is an error, not a tree


async def test_the_approval_panel_approves_an_agent_tool_call_with_edited_args(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    from agentq.widgets import ApprovalPanel

    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    await durable.run(child.PROMPT, run_id="panel")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    slot = panel.slots[0]
    assert slot.wait_key == "approval:2.0:s1" and "send" in slot.label.value
    assert json.loads(slot.args.value) == {"to": "bob"}
    slot.args.value = '{"to": "dora"}'
    slot.approve.click()
    await panel.join()
    assert 'data-outcome="completed"' in slot.status.value
    assert ran(side)["tool send dora"] == 1 and ran(side)["tool send bob"] == 0
    await panel.stop()


async def test_an_in_run_external_event_wait_is_a_durable_wait(engine: WorkflowEngine) -> None:
    from pydantic_ai import CallDeferred
    from pydantic_ai.capabilities import RequestInput

    asked: list[str] = []

    def ask(ctx: RunContext[None], requests: object, token: str) -> None:
        asked.append(token)  # hand the token to whoever answers; answer later

    agent: Agent[None, str] = Agent(TestModel(), name="ext", capabilities=[RequestInput(ask)])

    @agent.tool_plain
    def ship(parcel: str) -> str:
        raise CallDeferred

    durable = DurableAgent(agent, engine)
    run = await durable.run("ship it", run_id="ev")
    assert run.status is RunStatus.WAITING and asked == ["ev/event:deferred_tool_calls:0"]
    [step] = await engine.status("ev")
    assert step.key == "event:deferred_tool_calls:0"  # type: ignore[union-attr]
    [call_id] = [r.label["tool_call_id"] for r in await engine.store.calls("ev")
                 if r.key.startswith("tool:") and r.label]
    payload = {"calls": {call_id: "shipped by hand"}}
    done = await engine.resume("ev", "agent", payload, key="event:deferred_tool_calls:0")
    assert done.status is RunStatus.COMPLETED
    assert asked == ["ev/event:deferred_tool_calls:0"]  # `ask` answered from the log


async def test_deps_reach_the_tools_also_after_an_approval(engine: WorkflowEngine) -> None:
    agent: Agent[list[str], str] = Agent(TestModel(), name="deps", deps_type=list)

    @agent.tool(requires_approval=True)
    def note(ctx: RunContext[list[str]], text: str) -> str:
        ctx.deps.append(text)
        return "noted"

    outbox: list[str] = []
    durable = DurableAgent(agent, engine)
    run = await durable.run("note it", run_id="d", deps=outbox)
    assert run.status is RunStatus.WAITING and outbox == []
    done = await durable.approve("d", override_args={"text": "hello"})
    assert done.status is RunStatus.COMPLETED and outbox == ["hello"]


async def test_an_agent_run_shows_as_its_tree_in_a_notebook(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    run = await DurableAgent(child.build_agent(tmp_path / "side.txt"), engine).run(
        child.PROMPT, run_id="card")
    html = run._repr_html_()
    assert 'data-agentq="run-result"' in html and 'data-agentq="agent-tree"' in html
    assert html.count('data-kind="model"') == 3


async def test_a_failed_run_is_retried_by_id_without_repeating_its_calls(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    down = [True]
    durable = DurableAgent(child.build_agent(side, mul_down=down), engine)
    run = await durable.run(child.PROMPT, run_id="retry")
    assert run.status is RunStatus.FAILED and "tool backend down" in (run.reason or "")
    down[0] = False
    result = await engine.retry("retry")
    assert result.status is RunStatus.COMPLETED
    assert ran(side) == ONCE_EACH  # model 0, model 1 and the adds from the log; mul once


async def test_the_approval_panel_approves_and_denies_all_matching_agent_tool_calls(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    from agentq.widgets import ApprovalPanel, WaitFilter

    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side, approval=True), engine)
    for run_id in ("bulk-1", "bulk-2", "other-3"):
        assert (await durable.run(child.PROMPT, run_id=run_id)).status is RunStatus.WAITING
    panel = ApprovalPanel(engine)
    await panel.refresh()
    report = await panel.deny_matching(WaitFilter(workflow="bulk-", tool="send"),
                                       note="bob is on holiday")
    assert report.summary() == "2 denied"
    assert [o.detail for o in report.outcomes] == ["completed", "completed"]
    assert ran(side)["tool send bob"] == 0
    report = await panel.approve_matching(WaitFilter(tool="send", text='"bob"'))
    assert report.summary() == "1 approved" and report.outcomes[0].workflow_id == "other-3"
    assert ran(side)["tool send bob"] == 1
    await panel.stop()
