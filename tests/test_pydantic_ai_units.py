"""What a durable call's body gets from the integration (`_units`): the guarded run context
(``enqueue``/``cancel`` refused, since a call answered from the log does not run again) made as
pydantic-ai makes it, only cheaper; and its result handed back as it is only where its JSON
would rebuild the same value (a live run and its rebuild from the log see the same values; the
log holds pydantic-ai's JSON, as before, and a run recorded before resumes)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import hashlib
import json
from functools import partial
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec import JSON_CODEC, BaseDurabilityCapability, CallToolResult
from pydantic_ai.durable_exec._toolset import guard_run_context, wrap_tool_call_result
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from agentq import MemoryStore, Queue, RunStatus, WorkflowEngine
from agentq.integrations.pydantic_ai import AgentqDurability, DurableAgent
from agentq.integrations.pydantic_ai._journal import args_digest
from agentq.integrations.pydantic_ai._units import Live, LiveCodec, guarded

pytestmark = pytest.mark.timeout(60)


def test_the_guarded_context_is_pydantic_ais_field_for_field() -> None:
    ctx: RunContext[dict[str, int]] = RunContext(
        deps={"a": 1}, model=TestModel(), usage=RunUsage(requests=2), run_id="r", retry=1,
    )
    ours = guarded(ctx, "call", "workflow")
    theirs = guard_run_context(ctx, unit_noun="call", container_noun="workflow")
    assert ours is not None and type(ours) is RunContext and ours is not ctx
    guards = {"pending_messages", "_cancellation"}
    assert ours.__dict__.keys() == theirs.__dict__.keys()
    for name, value in theirs.__dict__.items():
        if name in guards:
            assert type(ours.__dict__[name]) is type(value), name
            assert ours.__dict__[name] is not ctx.__dict__[name], name
        else:
            assert ours.__dict__[name] is value, name  # shared, as `replace` shares them
    # The original is untouched; each copy has guards of its own.
    assert ctx.pending_messages is not ours.pending_messages
    again = guarded(ctx, "call", "workflow")
    assert again is not None and again.pending_messages is not ours.pending_messages
    with pytest.raises(Exception) as ours_error:
        ours.cancel()
    with pytest.raises(Exception) as theirs_error:
        theirs.cancel()
    assert type(ours_error.value) is type(theirs_error.value)
    assert str(ours_error.value) == str(theirs_error.value)


def test_a_subclass_of_run_context_is_left_to_pydantic_ai() -> None:
    class Custom(RunContext[None]):
        pass

    ctx = Custom(deps=None, model=TestModel(), usage=RunUsage())
    assert guarded(ctx, "call", "workflow") is None


async def test_a_tool_cannot_enqueue_or_cancel_inside_its_durable_call() -> None:
    agent: Agent[int, str] = Agent(TestModel(), name="guarded", deps_type=int)
    seen: list[str] = []

    @agent.tool
    def probe(ctx: RunContext[int]) -> str:
        seen.append(f"deps={ctx.deps} run_id={ctx.run_id is not None}")
        for attempt in (lambda: ctx.enqueue("more"), ctx.cancel):
            try:
                attempt()
            except Exception as error:  # its type is checked by name below
                seen.append(f"{type(error).__name__}: {error}")
        return "probed"

    async with Queue() as queue:
        durable = DurableAgent(agent, WorkflowEngine(queue, MemoryStore()))
        run: Any = await durable.run("Probe.", run_id="g1", deps=7)
    assert run.status is RunStatus.COMPLETED, run.reason
    assert seen[0] == "deps=7 run_id=True"
    assert len(seen) == 3
    assert seen[1].startswith("UserError: `ctx.enqueue()` is not supported inside a durable call")
    assert seen[2].startswith("UserError: `cancel` is not supported inside a durable call")


# ---------------------------------------------------------------- results handed back


@dataclasses.dataclass
class Point:
    x: int


class Colour(enum.Enum):
    RED = "red"


RETURNS: dict[str, Any] = {
    "number": 3,
    "text": "é",
    "nothing": None,
    "flag": True,
    "ratio": 0.5,
    "nested": {"a": [1, {"b": None}], "c": "d"},
    "point": Point(1),
    "pair": (1, 2),
    "when": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC),
    "colour": Colour.RED,
    "nested_pair": {"a": (1,)},
    "file_shaped": [{"kind": "binary", "data": "aGk=", "media_type": "image/png"}],
}


def calls_every_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[
        ToolCallPart(f"give_{name}", {}, f"c{i}") for i, name in enumerate(RETURNS)])


def returning_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(calls_every_tool), name="returns")
    for name, value in RETURNS.items():
        agent.tool_plain(name=f"give_{name}")(lambda value=value: value)
    return agent


def contents(messages: list[ModelMessage]) -> dict[str, Any]:
    return {p.tool_name: p.content for m in messages for p in m.parts
            if isinstance(p, ToolReturnPart)}


def test_a_result_is_handed_back_as_it_is_only_where_its_json_rebuilds_it() -> None:
    codec = LiveCodec(partial(JSON_CODEC.dump, CallToolResult),
                      partial(JSON_CODEC.load, CallToolResult))
    for name, value in RETURNS.items():
        rebuilt = JSON_CODEC.load(CallToolResult, {"result": value, "kind": "tool_return"})
        payload = codec.dump(rebuilt)
        json = payload.json if isinstance(payload, Live) else payload
        assert json == JSON_CODEC.dump(CallToolResult, rebuilt), name  # the log's JSON
        loaded = codec.load(payload)
        if name in {"point", "pair", "when", "colour", "nested_pair", "file_shaped"}:
            assert not isinstance(payload, Live), name  # rebuilt from its JSON, as before
            assert loaded == JSON_CODEC.load(CallToolResult, json), name
        else:
            assert isinstance(payload, Live) and loaded is rebuilt, name
    # NaN is not equal to itself: rebuilt from its JSON.
    nan = JSON_CODEC.load(CallToolResult, {"result": 0.0, "kind": "tool_return"})
    nan.result = float("nan")  # type: ignore[union-attr]
    assert not isinstance(codec.dump(nan), Live)
    # A model response is rebuilt: its JSON does not rebuild every response exactly (a
    # provider's details may hold a datetime, which comes back a string).
    responses = LiveCodec(partial(JSON_CODEC.dump, ModelResponse),
                          partial(JSON_CODEC.load, ModelResponse))
    response = ModelResponse(parts=[TextPart("hi")], provider_details={
        "timestamp": datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC)})
    payload = responses.dump(response)
    assert payload == JSON_CODEC.dump(ModelResponse, response)
    loaded = responses.load(payload)
    assert loaded is not response
    assert loaded.provider_details == {"timestamp": "2024-05-01T00:00:00Z"}


async def test_a_live_run_sees_the_values_its_rebuild_from_the_log_sees(
    engine: WorkflowEngine,
) -> None:
    durable = DurableAgent(returning_agent(), engine)
    run = await durable.run("Give.", run_id="lv")
    assert run.status is RunStatus.COMPLETED, run.reason
    live = contents(run.messages)
    assert len(live) == len(RETURNS)
    assert live["give_point"] == {"x": 1} and live["give_pair"] == [1, 2]
    assert live["give_when"] == "2024-05-01T12:00:00Z" and live["give_colour"] == "red"
    assert type(live["give_file_shaped"][0]).__name__ == "BinaryImage"  # loaded as a file
    rebuilt = contents(await durable.messages("lv"))
    assert rebuilt == live
    assert {k: type(v) for k, v in rebuilt.items()} == {k: type(v) for k, v in live.items()}
    responses = [m for m in await durable.messages("lv") if isinstance(m, ModelResponse)]
    assert responses == [m for m in run.messages if isinstance(m, ModelResponse)]


async def test_the_log_holds_pydantic_ais_json_of_each_result(engine: WorkflowEngine) -> None:
    durable = DurableAgent(returning_agent(), engine)
    run = await durable.run("Give.", run_id="js")
    assert run.status is RunStatus.COMPLETED, run.reason
    rows = {r.key: r.output for r in await engine.store.calls("js")}
    for i, (name, value) in enumerate(RETURNS.items()):
        result = await wrap_tool_call_result(asyncio.sleep(0, value))  # as pydantic-ai wraps it
        assert rows[f"tool:0.{i}:c{i}"] == JSON_CODEC.dump(CallToolResult, result), name
    first = JSON_CODEC.load(ModelResponse, rows["model:0"])
    assert [p.tool_name for p in first.parts] == [f"give_{n}" for n in RETURNS]  # type: ignore[union-attr]
    assert rows["model:0"] == JSON_CODEC.dump(ModelResponse, first)


async def test_a_run_recorded_with_pydantic_ais_own_codec_resumes_under_this_one(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Recorded as main's code did: each result rebuilt from its JSON in the run.
    monkeypatch.setattr(AgentqDurability, "_typed_result_codec",
                        BaseDurabilityCapability._typed_result_codec)
    agent = returning_agent()
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    def with_approval(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("send", {"to": "bob"}, "s1")])
        return calls_every_tool(messages[:1] if n == 0 else messages, info)

    durable = DurableAgent(agent, engine)
    run = await durable.run("Give.", run_id="old", model=FunctionModel(with_approval))
    assert run.status is RunStatus.WAITING, run.reason
    recorded = {r.key: r.output for r in await engine.store.calls("old") if r.kind == "call"}
    assert len(recorded) == 1 + len(RETURNS) + 1  # two model requests, the tool calls
    monkeypatch.undo()
    done = await durable.approve("old")
    assert done.status is RunStatus.COMPLETED, done.reason
    assert sent == ["bob"]
    assert {r.key: r.output for r in await engine.store.calls("old")
            if r.key in recorded} == recorded  # answered from the log, not run again
    assert contents(done.messages) == contents(await durable.messages("old"))
    assert contents(done.messages)["give_point"] == {"x": 1}


@pytest.mark.parametrize(
    "args",
    [
        {"i": 3},
        {"b": [1, 2.5, None, True], "a": {"z": "é", "y": ("t", 1)}},
        {"when": datetime.date(2026, 1, 2), "n": float("inf")},
        "text",
        None,
    ],
)
def test_the_args_digest_is_the_one_logs_recorded(args: object) -> None:
    """A log's digests of tool arguments were ``json.dumps`` with these options: the digest
    made now (one encoder kept) is the same text's, so a recorded log still compares."""
    text = json.dumps(
        args, sort_keys=True, separators=(",", ":"), default=lambda v: type(v).__qualname__
    )
    assert args_digest(args) == hashlib.sha256(text.encode()).hexdigest()[:16]
