"""`DurableAgent.fork`: the same conversation up to a model request or a tool call, then live.

The scripted agent of `agent_crash_child.py` notes every model request and tool body in a side
file, so the counts say what really ran again in the fork.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import agent_crash_child as child
import pytest
from pydantic_ai.messages import ModelResponse, TextPart, ToolReturnPart

from agentq import RunStatus, WorkflowEngine
from agentq.errors import WorkflowMismatchError
from agentq.events import EventKind
from agentq.integrations.pydantic_ai import DurableAgent

pytestmark = pytest.mark.timeout(60)


async def mul_key(durable: DurableAgent[None], run_id: str = "r1") -> str:
    """The key the log records for the tool call of `mul` (read, never rebuilt)."""
    rows = await durable.engine.store.calls(run_id)
    [key] = [r.key for r in rows if r.label and r.label.get("tool") == "mul"]
    return key


def ran(side: Path) -> Counter[str]:
    return Counter(line.rsplit(" ", 1)[0] for line in side.read_text().splitlines())


@pytest.fixture
async def parent(engine: WorkflowEngine, tmp_path: Path) -> tuple[DurableAgent[None], Path]:
    side = tmp_path / "side.txt"
    durable = DurableAgent(child.build_agent(side), engine)
    run = await durable.run(child.PROMPT, run_id="r1")
    assert run.status is RunStatus.COMPLETED and run.output == "done after 2 requests"
    side.write_text("")
    return durable, side


async def test_fork_at_a_model_request_runs_from_it(
    parent: tuple[DurableAgent[None], Path],
) -> None:
    durable, side = parent
    run = await durable.fork("r1", "f1", at="model:1")
    assert run.status is RunStatus.COMPLETED and run.output == "done after 2 requests"
    assert ran(side) == Counter({"model 1": 1, "tool mul 3 7": 1, "model 2": 1})
    assert [m.kind for m in run.messages] == [m.kind for m in await durable.messages("r1")]
    events = await durable.engine.store.load_events("f1")
    assert events[1].kind is EventKind.WORKFLOW_FORKED and events[1].data["parent"] == "r1"


async def test_fork_with_a_replaced_tool_result(parent: tuple[DurableAgent[None], Path]) -> None:
    durable, side = parent
    key = await mul_key(durable)
    run = await durable.fork("r1", "f2", at=key, replace={key: 100})
    assert run.status is RunStatus.COMPLETED, run.reason
    assert ran(side) == Counter({"model 2": 1})  # mul answered with the edit, never ran
    returns = [p for m in run.messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content) for p in returns] == [("a1", 3), ("a2", 7), ("m1", 100)]


async def test_fork_with_a_replaced_model_response_and_a_fork_of_it(
    parent: tuple[DurableAgent[None], Path],
) -> None:
    durable, side = parent
    edited = ModelResponse(parts=[TextPart("edited answer")])
    run = await durable.fork("r1", "f3", at="model:2", replace={"model:2": edited})
    assert run.status is RunStatus.COMPLETED and run.output == "edited answer"
    assert ran(side) == Counter()  # nothing sent to the model, no tool ran
    again = await durable.fork("f3", "f4", at=await mul_key(durable, "f3"))  # fork of a fork
    assert again.status is RunStatus.COMPLETED and again.output == "done after 2 requests"
    assert ran(side) == Counter({"tool mul 3 7": 1, "model 2": 1})


async def test_bad_fork_points_and_values_store_nothing(
    parent: tuple[DurableAgent[None], Path],
) -> None:
    durable, _ = parent
    store = durable.engine.store
    seq = await store.last_seq()
    with pytest.raises(ValueError, match="recorded no call 'model:9'"):
        await durable.fork("r1", "f", at="model:9")
    with pytest.raises(ValueError, match="recorded no call 'm1'"):
        await durable.fork("r1", "f", at="m1")  # a tool call id is not its recorded key
    with pytest.raises(TypeError, match="ModelResponse"):
        await durable.fork("r1", "f", at="model:2", replace={"model:2": "just text"})
    with pytest.raises(ValueError, match="not at or before"):
        await durable.fork("r1", "f", at="model:1", replace={await mul_key(durable): 1})
    with pytest.raises(WorkflowMismatchError, match="into itself"):
        await durable.fork("r1", "r1", at="model:1")
    await durable.fork("r1", "g", at="model:2")
    seq = await store.last_seq()
    with pytest.raises(WorkflowMismatchError, match="into 'g': a workflow with that id exists"):
        await durable.fork("r1", "g", at="model:1")
    assert await store.last_seq() == seq and await store.get_workflow("f") is None


async def test_fork_with_another_model_runs_it_from_the_fork_point_on(
    parent: tuple[DurableAgent[None], Path],
) -> None:
    """Run options given to `fork` apply from `at` on: the requests before it answer from the
    parent's log (the other model is never asked for them)."""
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    durable, side = parent
    asked: list[int] = []

    def other(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        return ModelResponse(parts=[TextPart("the other model's answer")])

    run = await durable.fork("r1", "f-model", at="model:2", model=FunctionModel(other))
    assert run.status is RunStatus.COMPLETED and run.output == "the other model's answer"
    assert len(asked) == 1  # only model:2 ran live, on the other model
    assert ran(side) == Counter()  # model 0, 1 and the tools answered from the log
