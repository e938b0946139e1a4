"""`AgentRun` as `DurableAgent` reports it: the messages of the attempt that completed the
run, handed from the step to the report (the agent runs once, not twice), equal to the ones a
rebuild from the log gives; the tree built when read; nothing kept per run afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agent_crash_child as child
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import RunStatus, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent


def _strip(value: Any) -> Any:
    """`value` (JSON) without its timestamps and pydantic-ai conversation ids: what each run
    of the agent, a rebuild included, sets anew (`identity` leaves them out too)."""
    if isinstance(value, dict):
        return {
            k: _strip(v) for k, v in value.items() if k not in ("timestamp", "conversation_id")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def same(messages: list[ModelMessage]) -> Any:
    return _strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def counted(agent: Agent[None, str]) -> list[int]:
    """A list that grows by one each time a run of `agent` builds its instructions: once a
    model request, live or replayed (a rebuild of the messages runs the agent again)."""
    built: list[int] = []

    @agent.instructions
    def count() -> str:
        built.append(1)
        return "Count."

    return built


async def test_live_messages_equal_the_rebuild_and_the_agent_runs_once(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    agent = child.build_agent(tmp_path / "side.txt")
    built = counted(agent)
    durable = DurableAgent(agent, engine)
    run = await durable.run(child.PROMPT, run_id="live")
    assert run.status is RunStatus.COMPLETED, run.reason
    assert len(built) == 3  # 3 model requests, no second run of the agent to report
    assert [m.kind for m in run.messages] == ["request", "response"] * 3
    rebuilt = await durable.messages("live")
    assert len(built) == 6  # the rebuild runs the agent once more, read-only
    assert same(run.messages) == same(rebuilt)
    assert all(getattr(m, "run_id", "live") == "live" for m in run.messages)

    # The recorded result of a completed run (no attempt in this call): rebuilt, the same.
    again = await durable.run(child.PROMPT, run_id="live")
    assert len(built) == 9
    assert same(again.messages) == same(run.messages)

    # A next turn with the live messages as its history: the same both ways too.
    turn = await durable.run("and again", run_id="turn-2", message_history=run.messages)
    assert turn.status is RunStatus.COMPLETED, turn.reason
    assert same(turn.messages) == same(await durable.messages("turn-2"))
    assert same(turn.messages[: len(run.messages)]) == same(run.messages)
    assert durable._step.sizes() == {"given": 0, "finished": 0}


async def test_an_approved_run_reports_its_live_messages(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    agent = child.build_agent(tmp_path / "side.txt", approval=True)
    built = counted(agent)
    durable = DurableAgent(agent, engine)
    waiting = await durable.run(child.PROMPT, run_id="ask")
    assert waiting.status is RunStatus.WAITING and waiting.messages == []
    before = len(built)
    done = await durable.approve("ask", "s1")
    assert done.status is RunStatus.COMPLETED, done.reason
    assert len(built) - before == 4  # the attempt after the approval, and no rebuild
    assert same(done.messages) == same(await durable.messages("ask"))
    assert durable._step.sizes() == {"given": 0, "finished": 0}


async def test_a_failed_run_keeps_nothing_and_its_retry_reports_live_messages(
    engine: WorkflowEngine, tmp_path: Path
) -> None:
    down = [True]
    agent = child.build_agent(tmp_path / "side.txt", mul_down=down)
    durable = DurableAgent(agent, engine)
    failed = await durable.run(child.PROMPT, run_id="flaky")
    assert failed.status is RunStatus.FAILED and failed.messages == []
    assert durable._step.sizes() == {"given": 0, "finished": 0}
    down[0] = False
    await engine.retry("flaky")  # completed by the engine: nobody expects its messages
    assert durable._step.sizes() == {"given": 0, "finished": 0}
    result = await durable.run(child.PROMPT, run_id="flaky")
    assert result.status is RunStatus.COMPLETED
    assert same(result.messages) == same(await durable.messages("flaky"))


async def test_the_tree_is_built_when_read(engine: WorkflowEngine, tmp_path: Path) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)
    run = await durable.run(child.PROMPT, run_id="tree")
    html = run.tree_html
    assert html.count('data-kind="model"') == 3 and 'data-agentq="agent-tree"' in html
    assert html in run._repr_html_()


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_many_runs_leave_nothing_behind(engine: WorkflowEngine, tmp_path: Path) -> None:
    """Finished runs keep no messages, deps, engine table entries nor queue records (the
    step attempts' and the durable calls' jobs): memory stays flat however many ran."""
    durable = DurableAgent(child.build_agent(tmp_path / "side.txt"), engine)

    async def some(first: int, many: int) -> None:
        for i in range(first, first + many):
            assert (await durable.run(child.PROMPT, run_id=f"many-{i}")).messages

    await some(0, 5)
    assert durable._step.sizes() == {"given": 0, "finished": 0}
    assert len(engine.queue._keys) == 0
    assert set(engine.tables().values()) == {0}
    await some(5, 25)
    assert durable._step.sizes() == {"given": 0, "finished": 0}
    assert len(engine.queue._keys) == 0
    assert set(engine.tables().values()) == {0}


@pytest.mark.parametrize("store", ["memory"], indirect=True)
async def test_the_output_validator_is_built_once_for_the_same_output_type(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each report validates the output as the run's output type; the validator of a class
    or a union is kept while the next report's type is the same object, one of a list (it
    could change in place) is built for each report."""
    import agentq.integrations.pydantic_ai._report as report

    builds: list[object] = []

    def counting(spec: object) -> Any:
        builds.append(spec)
        return output_adapter(spec)

    output_adapter = report.output_adapter
    monkeypatch.setattr(report, "output_adapter", counting)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.allow_text_output:
            return ModelResponse(parts=[TextPart("7")])
        out = info.output_tools[0]
        return ModelResponse(parts=[ToolCallPart(out.name, {"response": 7})])

    agent: Agent[None, int] = Agent(FunctionModel(respond), name="typed-once", output_type=int)
    durable = DurableAgent(agent, engine)
    outputs = [(await durable.run("n?", run_id=f"int-{i}")).output for i in range(3)]
    assert outputs == [7, 7, 7] and builds == [int]
    as_text = await durable.run("n?", run_id="str", output_type=str)
    assert as_text.output == "7" and builds == [int, str]
    listed = [int]
    for i in range(2):
        run = await durable.run("n?", run_id=f"list-{i}", output_type=listed)
        assert run.output == 7
    assert builds == [int, str, listed, listed]
    assert (await durable.run("n?", run_id="int-3")).output == 7 and builds[-1] is int
