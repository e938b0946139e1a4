"""Sub-agents: a `DurableAgent` run made inside a tool call of another durable run is a child
run of it: its id derived from the call (or the one given kept), awaited by the call, its
approvals listed by both agents and answerable, cancelled with its parent.

The parent ``boss`` asks for ``delegate(task)`` once, then answers with the tool's return;
``delegate`` runs the ``helper`` agent on the task (a `DurableAgent` run with no run id).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import RunStatus, StepDef, WorkflowDef, WorkflowEngine
from agentq.errors import EngineError, NotWaitingError, UnknownWorkflowError
from agentq.integrations.pydantic_ai import DurableAgent, current_run_id
from agentq.integrations.pydantic_ai._parent import ParentCall, run_child
from agentq.integrations.pydantic_ai.tree import run_tree
from agentq.store import CallState
from agentq.widgets import ApprovalPanel
from agentq.widgets.models.bulk import pending_waits
from agentq.widgets.models.tree import build_tree

pytestmark = pytest.mark.timeout(60)


class Team:
    """The parent and helper agents, their `DurableAgent`s on one engine, and what ran."""

    def __init__(self, engine: WorkflowEngine, *, approval: bool = False,
                 runs_per_call: int = 1, helper_gate: asyncio.Event | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.helper_ids: list[str | None] = []
        self.gate = helper_gate
        self.helper_started = asyncio.Event()
        self.helper_fails = False  # the helper's model raises (the child fails on its own)
        self.strict = False  # the boss's tool raises on a child that did not complete

        def boss_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = sum(isinstance(m, ModelResponse) for m in messages)
            self.calls[f"boss {n}"] += 1
            if n == 0:
                return ModelResponse(parts=[ToolCallPart("delegate", {"task": "sum"}, "d1")])
            returns = [p.content for m in messages for p in getattr(m, "parts", [])
                       if p.part_kind == "tool-return"]
            return ModelResponse(parts=[TextPart(f"boss: {returns[-1]}")])

        async def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = sum(isinstance(m, ModelResponse) for m in messages)
            self.calls[f"helper {n}"] += 1
            self.helper_started.set()
            if self.helper_fails:
                raise ValueError("helper down")
            if self.gate is not None:
                await self.gate.wait()
            if n == 0 and approval:
                return ModelResponse(parts=[ToolCallPart("pay", {"amount": 5}, "p1")])
            return ModelResponse(parts=[TextPart("helped")])

        boss: Agent[None, str] = Agent(FunctionModel(boss_model), name="boss")
        helper: Agent[None, str] = Agent(FunctionModel(helper_model), name="helper")

        @helper.tool_plain(requires_approval=True)
        def pay(amount: int) -> str:
            self.calls["pay"] += 1
            return f"paid {amount}"

        @boss.tool_plain
        async def delegate(task: str) -> str:
            outputs = []
            for _ in range(runs_per_call):
                run = await self.helper.run(task)
                self.helper_ids.append(run.run_id)
                if self.strict and run.status is not RunStatus.COMPLETED:
                    raise RuntimeError(f"helper ended {run.status.value}")
                assert current_run_id() == "job"  # the parent's, outside the child run
                outputs.append(f"{run.status.value}:{run.output}")
            return " ".join(outputs)

        self.boss = DurableAgent(boss, engine)
        self.helper = DurableAgent(helper, engine)


async def test_a_sub_agent_run_is_a_child_run_of_the_tool_call(engine: WorkflowEngine) -> None:
    team = Team(engine, runs_per_call=2)
    run = await team.boss.run("go", run_id="job")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "boss: completed:helped completed:helped"
    # The ids derived from the call: the first, then #1 for the next run it made.
    assert team.helper_ids == ["job/tool:0.0:d1", "job/tool:0.0:d1#1"]
    child = await engine.store.get_workflow("job/tool:0.0:d1")
    assert child is not None and child.definition == "helper"
    assert child.state == "completed"
    rows = {r.key: r for r in await engine.store.calls("job")}
    assert "child:tool:0.0:d1" in rows and "child:tool:0.0:d1#1" in rows
    # The recorded result of the parent; nothing ran again.
    again = await team.boss.run("go", run_id="job")
    assert again.output == run.output
    assert team.calls == Counter({"boss 0": 1, "boss 1": 1, "helper 0": 2})


async def test_outside_another_run_a_run_id_is_needed(engine: WorkflowEngine) -> None:
    team = Team(engine)
    with pytest.raises(TypeError, match="needs a run_id"):
        await team.helper.run("alone")


async def test_the_approvals_of_a_child_are_listed_by_the_parent_too(
    engine: WorkflowEngine,
) -> None:
    team = Team(engine, approval=True)
    run = await team.boss.run("go", run_id="job")
    assert run.status is RunStatus.WAITING  # its tool call waits on the child's approval
    child_id = "job/tool:0.0:d1"
    [mine] = await team.helper.pending_approvals(child_id)
    assert (mine.run_id, mine.tool, mine.args) == (child_id, "pay", {"amount": 5})
    listed = await team.boss.pending_approvals("job")
    assert [(p.run_id, p.tool) for p in listed] == [(child_id, "pay")]
    assert run.pending == listed  # the run's report lists its child's approvals too
    assert (await team.boss.run("go", run_id="job")).pending == listed
    for answer in (team.boss.approve, team.boss.deny):
        with pytest.raises(NotWaitingError, match=f"child run\\(s\\) \\[{child_id!r}\\]"):
            await answer("job")
    assert [p.run_id for p in await team.boss.pending_approvals()] == [child_id]
    # the parent's wait on the child is not an approval to answer: the child's is
    assert [(r.workflow_id, r.wait_key) for r in await pending_waits(engine.store)] == [
        (child_id, "approval:0.0:p1")
    ]
    with pytest.raises(NotWaitingError, match=f"child run {child_id!r}; answer that run"):
        await engine.resume("job", "agent", {"approved": False}, key="child:tool:0.0:d1")
    panel = ApprovalPanel(engine)
    await panel.refresh()
    assert [(r.workflow_id, r.wait_key) for r in panel.waiting] == [
        (child_id, "approval:0.0:p1")
    ]
    assert [slot.key for slot in panel.slots if slot.key is not None] == [(child_id, 0)]
    await panel.stop()
    with pytest.raises(UnknownWorkflowError):
        await team.boss.approve(child_id)  # the helper's run: its agent answers it
    done = await team.helper.approve(child_id)
    assert done.status is RunStatus.COMPLETED and done.output == "helped"
    # The parent's call runs again and joins the same child: its recorded result.
    parent = await team.boss.run("go", run_id="job")
    assert parent.status is RunStatus.COMPLETED, parent.reason
    assert parent.output == "boss: completed:helped"
    assert team.helper_ids[-1] == child_id and len(set(team.helper_ids)) == 1
    assert team.calls["pay"] == 1 and team.calls["helper 0"] == 1
    assert await team.boss.pending_approvals("job") == []


async def test_cancelling_the_parent_cancels_its_child(engine: WorkflowEngine) -> None:
    gate = asyncio.Event()
    team = Team(engine, helper_gate=gate)
    task = asyncio.create_task(team.boss.run("go", run_id="job"))
    await team.helper_started.wait()  # the child's model request runs, inside the call
    await engine.cancel("job", "stop")
    child = await engine.store.get_workflow("job/tool:0.0:d1")
    assert child is not None and child.state == "cancelled"
    gate.set()
    run = await task
    assert run.status is RunStatus.CANCELLED
    assert team.calls["boss 1"] == 0


async def test_a_retried_parent_retries_the_child_cancelled_with_it(
    engine: WorkflowEngine,
) -> None:
    """The child cancelled with its parent has no answer: the parent's tool call is recorded
    failed (`ChildCancelledWithParent`), not completed with an empty output; a retry of the
    parent runs the call again, which retries the same child and gets its real output."""
    gate = asyncio.Event()
    team = Team(engine, helper_gate=gate)
    task = asyncio.create_task(team.boss.run("go", run_id="job"))
    await team.helper_started.wait()
    await engine.cancel("job", "stop")
    gate.set()
    assert (await task).status is RunStatus.CANCELLED
    rows = {r.key: r for r in await engine.store.calls("job")}
    tool = rows["tool:0.0:d1"]
    assert tool.state is CallState.FAILED and tool.error is not None
    assert tool.error.type == "agentq.integrations.pydantic_ai.ChildCancelledWithParent"
    assert "child run 'job/tool:0.0:d1' is cancelled" in tool.error.message
    assert team.helper_ids == []  # the tool never got a run
    result = await engine.retry("job")
    assert result.status is RunStatus.COMPLETED
    run = await team.boss.run("go", run_id="job")
    assert run.output == "boss: completed:helped"
    assert team.helper_ids == ["job/tool:0.0:d1"]  # the same child, retried
    # the child's request ran on through the cancel and was recorded: its retry reads it
    assert team.calls["helper 0"] == 1 and team.calls["boss 0"] == 1
    kinds = [str(e.kind) for e in await engine.store.load_events("job/tool:0.0:d1")]
    assert kinds.count("WorkflowRetried") == 1 and kinds[-1] == "WorkflowCompleted"
    child = await engine.store.get_workflow("job/tool:0.0:d1")
    assert child is not None and child.state == "completed"
    rows = {r.key: r for r in await engine.store.calls("job")}
    assert rows["tool:0.0:d1"].state is CallState.COMPLETED
    wait = rows["child:tool:0.0:d1"]  # re-opened by the child's retry, answered by its end
    assert wait.state is CallState.ANSWERED and wait.output["state"] == "completed"
    assert wait.runs == 2


async def test_a_child_waiting_for_an_approval_cancelled_with_its_parent_waits_again(
    engine: WorkflowEngine,
) -> None:
    """The parent waits on its child's approval when it is cancelled (the child with it);
    retried, the parent's call retries the child, which asks again: the parent waits on it
    again, and the approval completes both."""
    team = Team(engine, approval=True)
    assert (await team.boss.run("go", run_id="job")).status is RunStatus.WAITING
    child_id = "job/tool:0.0:d1"
    await engine.cancel("job", "stop")
    retried = await engine.retry("job")
    assert retried.status is RunStatus.WAITING
    [pending] = await team.boss.pending_approvals("job")
    assert pending.run_id == child_id
    [wait] = [r for r in await engine.store.calls("job") if r.key == "child:tool:0.0:d1"]
    assert wait.state is CallState.WAITING  # waiting on the retried child again
    assert (await team.helper.approve(child_id)).status is RunStatus.COMPLETED
    parent = await team.boss.run("go", run_id="job")
    assert parent.status is RunStatus.COMPLETED, parent.reason
    assert parent.output == "boss: completed:helped" and team.calls["pay"] == 1


async def test_a_child_retried_by_hand_is_joined_again_by_the_parents_call(
    engine: WorkflowEngine,
) -> None:
    """The child fails on its own and the boss's tool raises (the boss fails). The child,
    retried by hand, now waits for an approval; the boss's retry runs the call again, which
    joins the retried child: the parent's wait row, answered with the old failure, is
    re-opened (the boss waits on the child) and answered with the child's new end."""
    team = Team(engine, approval=True)
    team.helper_fails = team.strict = True
    first = await team.boss.run("go", run_id="job")
    assert first.status is RunStatus.FAILED and "helper ended failed" in str(first.reason)
    child_id = "job/tool:0.0:d1"
    team.helper_fails = team.strict = False
    assert (await engine.retry(child_id)).status is RunStatus.WAITING  # asks for an approval
    retried = await engine.retry("job")
    assert retried.status is RunStatus.WAITING, retried.reason  # on its child, not failed
    [pending] = await team.boss.pending_approvals("job")
    assert pending.run_id == child_id
    rows = {r.key: r for r in await engine.store.calls("job")}
    assert rows["child:tool:0.0:d1"].state is CallState.WAITING
    assert rows["child:tool:0.0:d1"].runs == 2
    assert (await team.helper.approve(child_id)).status is RunStatus.COMPLETED
    parent = await team.boss.run("go", run_id="job")
    assert parent.status is RunStatus.COMPLETED, parent.reason
    assert parent.output == "boss: completed:helped" and team.calls["pay"] == 1
    wait = {r.key: r for r in await engine.store.calls("job")}["child:tool:0.0:d1"]
    assert wait.state is CallState.ANSWERED and wait.runs == 2
    assert wait.output["state"] == "completed"  # the outcome the call used, not the failure


async def test_a_child_retried_by_hand_after_ending_answers_the_parents_call_again(
    engine: WorkflowEngine,
) -> None:
    """As above, with the child retried to its end before the boss is: the boss's call uses
    the child's new output, and the parent's wait row holds it (not the old failure)."""
    team = Team(engine)
    team.helper_fails = team.strict = True
    assert (await team.boss.run("go", run_id="job")).status is RunStatus.FAILED
    team.helper_fails = team.strict = False
    assert (await engine.retry("job/tool:0.0:d1")).status is RunStatus.COMPLETED
    parent = await engine.retry("job")
    assert parent.status is RunStatus.COMPLETED, parent.reason
    assert (await team.boss.run("go", run_id="job")).output == "boss: completed:helped"
    wait = {r.key: r for r in await engine.store.calls("job")}["child:tool:0.0:d1"]
    assert wait.state is CallState.ANSWERED and wait.runs == 2
    assert wait.output["state"] == "completed"


async def test_a_child_cancelled_on_its_own_reaches_the_tool(engine: WorkflowEngine) -> None:
    """Only a cancel that came down from the parent withholds the child's run: a child
    cancelled by itself (as one that failed) is the tool's result, with its status."""
    gate = asyncio.Event()
    team = Team(engine, helper_gate=gate)
    task = asyncio.create_task(team.boss.run("go", run_id="job"))
    await team.helper_started.wait()
    await engine.cancel("job/tool:0.0:d1", "not needed")
    gate.set()
    run = await task
    assert run.status is RunStatus.COMPLETED and run.output == "boss: cancelled:None"
    assert team.calls["helper 0"] == 1


async def test_the_tree_nests_the_child_run_under_the_tool_call(engine: WorkflowEngine) -> None:
    team = Team(engine)
    run = await team.boss.run("go", run_id="job")
    assert 'data-state="waiting"' not in run.tree_html  # the card's tree, as below
    root = build_tree("job", (), await engine.store.calls("job"))
    [model0, _model1] = root.children
    [tool] = model0.children
    assert tool.node == "c:tool:0.0:d1"
    [child] = tool.children
    assert child.kind == "child" and "job/tool:0.0:d1" in child.title
    html = await run_tree(engine.store, "job")
    assert html.count('data-agentq="agent-child"') == 1
    assert 'data-run="job/tool:0.0:d1"' in html
    # The child's end answered its wait row (`ChildEnded`: the call, not the step, awaited
    # the child), so it is drawn answered, not waiting.
    assert 'data-node="c:child:tool:0.0:d1" data-kind="child" data-state="answered"' in html
    [wait] = [r for r in await engine.store.calls("job") if r.key.startswith("child:")]
    assert wait.state is CallState.ANSWERED and wait.output["state"] == "completed"
    assert 'data-state="waiting"' not in html
    # A child run started by a step itself (ctx.child) stays among the step's calls.
    plain = build_tree("p", (), [r for r in await engine.store.calls("job")
                                 if r.key.startswith("child:")])
    assert [c.kind for c in plain.children] == ["child"]


async def test_a_given_run_id_is_kept_and_a_failed_child_reaches_the_tool(
    engine: WorkflowEngine,
) -> None:
    def failing(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ValueError("helper model down")

    def ok(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("fine")])

    def boss_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("delegate", {}, "d1")])
        returns = [p.content for m in messages for p in getattr(m, "parts", [])
                   if p.part_kind == "tool-return"]
        return ModelResponse(parts=[TextPart(str(returns[-1]))])

    bad = DurableAgent(Agent(FunctionModel(failing), name="bad"), engine)
    good = DurableAgent(Agent(FunctionModel(ok), name="good"), engine)
    boss: Agent[None, str] = Agent(FunctionModel(boss_model), name="boss2")

    @boss.tool_plain
    async def delegate() -> str:
        named = await good.run("x", run_id="job2/named")  # <parent>/<key>: a child, kept
        alone = await good.run("x", run_id="elsewhere")  # another id: a run of its own
        failed = await bad.run("x")  # derived: job2/tool:0.0:d1
        return f"{named.run_id} {alone.run_id} {failed.run_id}:{failed.status.value}"

    run = await DurableAgent(boss, engine).run("go", run_id="job2")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert run.output == "job2/named elsewhere job2/tool:0.0:d1:failed"
    keys = {r.key for r in await engine.store.calls("job2")}
    assert {"child:named", "child:tool:0.0:d1"} <= keys
    assert not any("elsewhere" in k for k in keys)  # not linked to the parent
    failed_child = await engine.store.get_workflow("job2/tool:0.0:d1")
    assert failed_child is not None and failed_child.state == "failed"
    assert "helper model down" in str(failed_child.reason)


async def test_run_child_never_gives_a_run_that_still_waits() -> None:
    class Waiting:
        status = RunStatus.WAITING

    class Ctx:  # a parent whose wait on the child was answered while the child waits
        workflow_id = "job"

        async def start_child(self, *args: object, **kwargs: object) -> None:
            return None

        async def child(self, *args: object, **kwargs: object) -> None:
            return None

    async def stored() -> dict[str, object]:
        return {}

    async def complete() -> Waiting:
        return Waiting()

    parent = ParentCall(Ctx(), "tool:0.0:d1")  # type: ignore[arg-type]
    async def step(ctx: object) -> None:
        return None

    definition = WorkflowDef("helper", [StepDef("agent", step)])
    with pytest.raises(EngineError, match="child run job/k still waits"):
        await run_child(
            parent, "k", definition, None, stored(), lambda: None, complete  # type: ignore[arg-type]
        )
