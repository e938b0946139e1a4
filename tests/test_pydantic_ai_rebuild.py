"""A run's messages rebuilt from its log: output types, approvals' order, unfinished runs; forks
whose edits the log cannot follow; non-JSON replace values."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import RunStatus, WorkflowEngine
from agentq.errors import AgentqError, PayloadError
from agentq.integrations.pydantic_ai import DurableAgent, MessagesUnavailableError

pytestmark = pytest.mark.timeout(60)


class Refund(BaseModel):
    order: int


def typed_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if info.output_tools:
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"order": 7})])
    return ModelResponse(parts=[TextPart("text")])


def returns(message: ModelMessage) -> list[tuple[str, object]]:
    return [(p.tool_name, p.content) for p in message.parts if isinstance(p, ToolReturnPart)]


async def test_continue_from_a_typed_run_uses_the_output_type_given(
    engine: WorkflowEngine,
) -> None:
    durable = DurableAgent(Agent(FunctionModel(typed_model), name="ty"), engine)
    first = await durable.run("go", run_id="t1", output_type=Refund)
    assert first.output == Refund(order=7)
    second = await durable.run("next", run_id="t2", continue_from="t1", output_type=Refund)
    assert second.status is RunStatus.COMPLETED and second.output == Refund(order=7)
    assert len(second.messages) == 6


async def test_messages_of_a_typed_run_without_its_output_type_are_rebuilt(
    engine: WorkflowEngine,
) -> None:
    durable = DurableAgent(Agent(FunctionModel(typed_model), name="ty"), engine)
    first = await durable.run("go", run_id="t1", output_type=Refund)
    # another process: no output_type given; the recorded output-tool call ends the rebuild
    other = DurableAgent(Agent(FunctionModel(typed_model), name="ty"), engine)
    rebuilt = await other.messages("t1")
    assert [type(m) for m in rebuilt] == [type(m) for m in first.messages]
    assert returns(rebuilt[-1]) == returns(first.messages[-1])
    again = await other.run("go", run_id="t1")
    assert again.output == {"order": 7} and len(again.messages) == 3
    nxt = await other.run("next", run_id="t2", continue_from="t1", output_type=Refund)
    assert nxt.output == Refund(order=7)


async def test_a_typed_run_that_retried_its_output_asks_for_its_output_type(
    engine: WorkflowEngine,
) -> None:
    def retried(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        order: object = "not a number" if n == 0 else 7
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, {"order": order})])

    durable = DurableAgent(Agent(FunctionModel(retried), name="ty"), engine)
    first = await durable.run("go", run_id="t1", output_type=Refund)
    assert first.output == Refund(order=7)
    assert len(await durable.messages("t1", output_type=Refund)) == 5
    with pytest.raises(MessagesUnavailableError, match=r"give output_type=.*the type run 't1'"):
        await durable.messages("t1")


async def test_an_untyped_run_whose_model_called_an_unknown_final_result_rebuilds(
    engine: WorkflowEngine,
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("final_result", {"order": 1})])
        return ModelResponse(parts=[TextPart("fin")])

    durable = DurableAgent(Agent(FunctionModel(model), name="un"), engine)
    run = await durable.run("go", run_id="u1")
    assert run.output == "fin" and len(run.messages) == 4
    assert len(await durable.messages("u1")) == 4


def approvals_agent(seen: list[list[ModelMessage]]) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        if len(messages) == 1:
            return ModelResponse(parts=[
                ToolCallPart("refund", {"amount": 1}, tool_call_id="c1"),
                ToolCallPart("lookup", {"x": 3}, tool_call_id="c2"),
                ToolCallPart("charge", {"amount": 2}, tool_call_id="c3"),
            ])
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(model), name="order")

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    @agent.tool_plain
    def lookup(x: int) -> str:
        return f"order {x}"

    @agent.tool
    def charge(ctx: RunContext[None], amount: int) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        return f"charged {amount}"

    return agent


@pytest.mark.parametrize("decisions", [("approve", "approve"), ("deny", "approve")])
async def test_rebuilt_tool_returns_are_in_the_order_the_model_received(
    engine: WorkflowEngine, decisions: tuple[str, str]
) -> None:
    seen: list[list[ModelMessage]] = []
    durable = DurableAgent(approvals_agent(seen), engine)
    run = await durable.run("go", run_id="o1")
    for decision in decisions:
        assert run.status is RunStatus.WAITING
        answer = durable.approve if decision == "approve" else durable.deny
        run = await answer("o1", run.pending[0].tool_call_id)
    assert run.status is RunStatus.COMPLETED
    sent = seen[-1][2]
    assert [n for n, _ in returns(sent)] == ["refund", "lookup", "charge"]
    for rebuilt in (run.messages, await durable.messages("o1")):
        assert returns(rebuilt[2]) == returns(sent)


async def test_messages_of_a_waiting_run_are_refused_publicly(engine: WorkflowEngine) -> None:
    durable = DurableAgent(approvals_agent([]), engine)
    run = await durable.run("go", run_id="w1")
    assert run.status is RunStatus.WAITING
    with pytest.raises(MessagesUnavailableError, match="'w1' is waiting") as caught:
        await durable.messages("w1")
    assert isinstance(caught.value, AgentqError)


def forked_agent(ran: list[str]) -> Agent[None, str]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("lookup", {"x": 1}, tool_call_id="c1")])
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"x": 2}, tool_call_id="c2")])
        seen = [r.content for m in messages if isinstance(m, ModelRequest) for r in m.parts
                if isinstance(r, ToolReturnPart)]
        return ModelResponse(parts=[TextPart(f"saw {seen}")])

    agent = Agent(FunctionModel(model), name="fk")

    @agent.tool_plain
    def lookup(x: int) -> str:
        ran.append(f"lookup {x}")
        return f"order {x}"

    return agent


@pytest.mark.parametrize("edit", [
    ModelResponse(parts=[ToolCallPart("lookup", {"x": 8}, tool_call_id="c1")]),
    ModelResponse(parts=[ToolCallPart("lookup", {"x": 1}, tool_call_id="other")]),
    ModelResponse(parts=[TextPart("short")]),
])
async def test_a_fork_refuses_an_earlier_response_whose_tool_calls_change(
    engine: WorkflowEngine, edit: ModelResponse
) -> None:
    ran: list[str] = []
    durable = DurableAgent(forked_agent(ran), engine)
    await durable.run("go", run_id="p")
    with pytest.raises(ValueError, match=r"replace\['model:0'\].*at=\"model:0\""):
        await durable.fork("p", "f", at="model:2", replace={"model:0": edit})
    assert await engine.store.get_workflow("f") is None
    # the edit at its own request works, the calls after it live
    ran.clear()
    run = await durable.fork("p", "f", at="model:0", replace={"model:0": edit})
    assert run.status is RunStatus.COMPLETED


async def test_a_fork_keeps_an_earlier_response_edit_with_the_same_calls(
    engine: WorkflowEngine,
) -> None:
    durable = DurableAgent(forked_agent([]), engine)
    await durable.run("go", run_id="p")
    edit = ModelResponse(
        parts=[ToolCallPart("lookup", {"x": 1}, tool_call_id="c1")], model_name="edited")
    run = await durable.fork("p", "f", at="model:2", replace={"model:0": edit})
    assert run.status is RunStatus.COMPLETED
    assert isinstance(run.messages[1], ModelResponse) and run.messages[1].model_name == "edited"


@pytest.mark.parametrize("key", ["tool:0.0:c1", "model:1"])
async def test_a_non_json_replace_value_is_a_payload_error(
    engine: WorkflowEngine, key: str
) -> None:
    durable = DurableAgent(forked_agent([]), engine)
    await durable.run("go", run_id="p")
    value: Any = object() if key.startswith("tool") else ModelResponse(
        parts=[ToolCallPart("lookup", {"x": object()}, tool_call_id="c2")])
    with pytest.raises(PayloadError, match=rf"replace\['{key}'\].*object"):
        await durable.fork("p", "f", at=key, replace={key: value})
    assert await engine.store.get_workflow("f") is None
