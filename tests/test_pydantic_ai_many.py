"""`DurableAgent.run_many`: one agent on many prompts as one run group."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import GroupStatus, RunStatus, WorkflowEngine
from agentq.errors import KeyConflictError
from agentq.integrations.pydantic_ai import DurableAgent

pytestmark = pytest.mark.timeout(60)


def echo_agent(calls: Counter[str]) -> Agent[None, str]:
    """Answers with the prompt upper-cased; counts the model requests by prompt; the prompt
    "fail" makes the model raise."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        calls[prompt] += 1
        if prompt == "fail" and calls[prompt] == 1:
            raise RuntimeError("the model is down")
        return ModelResponse(parts=[TextPart(prompt.upper())])

    return Agent(FunctionModel(model), name="echo")


async def test_run_many_runs_each_prompt_once_as_one_group(engine: WorkflowEngine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(echo_agent(calls), engine)
    prompts = {"a": "hello", "b": "world", "c": "again"}
    runs = await durable.run_many(prompts, group_id="batch")
    assert list(runs) == ["a", "b", "c"]
    assert {k: r.output for k, r in runs.items()} == {"a": "HELLO", "b": "WORLD", "c": "AGAIN"}
    assert {r.status for r in runs.values()} == {RunStatus.COMPLETED}
    assert runs["a"].run_id == "batch/a"
    group = engine.group("batch")
    assert await group.status() == GroupStatus(completed=3)
    usage = {m.key: m.usage async for m in group.results()}
    assert all(u and u.get("input_tokens", 0) > 0 for u in usage.values())
    assert calls == Counter({"hello": 1, "world": 1, "again": 1})

    again = await durable.run_many(prompts, group_id="batch")  # answered from the records
    assert {k: r.output for k, r in again.items()} == {k: r.output for k, r in runs.items()}
    assert calls == Counter({"hello": 1, "world": 1, "again": 1})


async def test_run_many_again_reruns_only_the_failed_run(engine: WorkflowEngine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(echo_agent(calls), engine)
    prompts = {"ok": "fine", "bad": "fail"}
    first = await durable.run_many(prompts, group_id="g")
    assert first["ok"].status is RunStatus.COMPLETED
    assert first["bad"].status is RunStatus.FAILED  # a model error fails the run's step
    assert "the model is down" in (first["bad"].reason or "")
    second = await durable.run_many(prompts, group_id="g")  # only "bad" runs again
    assert second["bad"].output == "FAIL" and second["ok"].output == "FINE"
    assert calls["fine"] == 1 and calls["fail"] == 2


async def test_run_many_refuses_changed_prompts_and_keys(engine: WorkflowEngine) -> None:
    calls: Counter[str] = Counter()
    durable = DurableAgent(echo_agent(calls), engine)
    await durable.run_many({"a": "one", "b": "two"}, group_id="g")
    before = await engine.store.load_events()
    with pytest.raises(KeyConflictError, match="'b'"):
        await durable.run_many({"a": "one", "b": "TWO"}, group_id="g")
    with pytest.raises(ValueError, match="1 new \\('c'\\)"):
        await durable.run_many({"a": "one", "b": "two", "c": "three"}, group_id="g")
    with pytest.raises(ValueError, match="no prompts"):
        await durable.run_many({}, group_id="h")
    with pytest.raises(ValueError, match="a group member key holds no '/'"):
        await durable.run_many({"x/y": "p"}, group_id="h")
    with pytest.raises(TypeError, match="mapping"):
        await durable.run_many(["p"], group_id="h")  # type: ignore[arg-type]
    assert await engine.store.load_events() == before
    assert calls == Counter({"one": 1, "two": 1})
