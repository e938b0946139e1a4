"""`DurableAgent` streaming: `run_stream`, `run_stream_events`, `iter`, `partial`, and the
run's ``event_stream_handler``, live while a model request runs; the log keeps one call per
request with its final response; a stream the caller leaves leaves the run consistent.

The scripted model streams (pydantic-ai's `FunctionModel` ``stream_function``): request 0
asks for ``add(1, 2)`` as a tool-call delta, request 1 answers in two text pieces with an
`asyncio.Event` between them, so a test can see the first piece while the request runs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agentq import RunStatus, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent, DurableRunResultEvent, DurableStream
from agentq.store import CallKind, CallState

pytestmark = pytest.mark.timeout(60)


class Script:
    """The streaming model; `release` lets request 1 send its second piece; `calls` counts
    the requests that reached it, by number."""

    def __init__(self, *, approval: bool = False) -> None:
        self.release = asyncio.Event()
        self.calls: Counter[int] = Counter()
        self.approval = approval

    def agent(self, name: str = "calc") -> Agent[None, str]:
        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            raise AssertionError("a streaming run streams every request")

        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
            n = sum(isinstance(m, ModelResponse) for m in messages)
            self.calls[n] += 1
            if n == 0:
                yield {0: DeltaToolCall(name="add", json_args='{"a": 1, ', tool_call_id="a1")}
                yield {0: DeltaToolCall(json_args='"b": 2}')}
                return
            yield "The answer "
            await self.release.wait()
            yield "is 3."

        agent: Agent[None, str] = Agent(FunctionModel(respond, stream_function=stream), name=name)

        @agent.tool_plain(requires_approval=self.approval)
        def add(a: int, b: int) -> int:
            return a + b

        return agent


async def test_text_deltas_reach_the_caller_while_the_request_runs(engine: WorkflowEngine) -> None:
    script = Script()
    durable = DurableAgent(script.agent(), engine)
    pieces: list[str] = []
    async with durable.run_stream("1 + 2?", run_id="s") as stream:
        assert isinstance(stream, DurableStream) and stream.run_id == "s"
        async for piece in stream.stream_text(delta=True):
            pieces.append(piece)
            if piece == "The answer ":
                # The request waits for `release`: this piece came while it runs.
                assert durable.partial("s") == {"model:1": "The answer "}
                assert stream.partial() == {"model:1": "The answer "}
                states = {r.key: r.state for r in await engine.store.calls("s")}
                assert states["model:1"] is CallState.STARTED
                script.release.set()
        run = await stream.result()
        assert await stream.get_output() == "The answer is 3."
    assert pieces == ["The answer ", "is 3."]
    assert run.status is RunStatus.COMPLETED and run.output == "The answer is 3."
    assert durable.partial("s") == {}  # the request ended: the log holds it
    # One durable call per request, its final response recorded; nothing else.
    rows = [r for r in await engine.store.calls("s") if r.kind is CallKind.CALL]
    assert [(r.key, r.runs) for r in rows] == [("model:0", 1), ("tool:0.0:a1", 1), ("model:1", 1)]
    [part] = rows[2].output["parts"]
    assert part["content"] == "The answer is 3."
    assert script.calls == Counter({0: 1, 1: 1})
    # The recorded result, read again: the same output, nothing asked again.
    again = await durable.run("1 + 2?", run_id="s")
    assert again.output == "The answer is 3." and script.calls == Counter({0: 1, 1: 1})


async def test_run_stream_events_in_order_with_tool_call_deltas(engine: WorkflowEngine) -> None:
    script = Script()
    script.release.set()
    durable = DurableAgent(script.agent(), engine)
    events = [e async for e in durable.run_stream_events("1 + 2?", run_id="ev")]
    kinds = [type(e).__name__ for e in events]
    # Request 0's tool call arrives in deltas (its arguments in two pieces), then the tool
    # runs, then request 1's text, then the run's end.
    deltas = [e for e in events if isinstance(e, PartDeltaEvent)]
    assert any(getattr(d.delta, "args_delta", None) == '"b": 2}' for d in deltas), kinds
    call = kinds.index("FunctionToolCallEvent")
    assert kinds.index("PartStartEvent") < call < kinds.index("FunctionToolResultEvent")
    result = next(e for e in events if isinstance(e, FunctionToolResultEvent))
    assert result.part.content == 3
    texts = [e.delta.content_delta for e in deltas if isinstance(e.delta, TextPartDelta)]
    assert texts == ["is 3."]
    last = events[-1]
    assert isinstance(last, DurableRunResultEvent)
    assert last.run.status is RunStatus.COMPLETED and last.run.output == "The answer is 3."
    assert kinds.count("DurableRunResultEvent") == 1


async def test_iter_yields_the_events_then_the_run(engine: WorkflowEngine) -> None:
    script = Script()
    script.release.set()
    durable = DurableAgent(script.agent(), engine)
    async with durable.iter("1 + 2?", run_id="it") as run:
        seen = [type(e).__name__ async for e in run]
        assert [e async for e in run] == []  # handed out once
        done = await run.result()
    assert "FunctionToolCallEvent" in seen and "PartDeltaEvent" in seen
    assert done.output == "The answer is 3."


async def test_a_request_answered_from_the_log_gives_its_recorded_response(
    engine: WorkflowEngine,
) -> None:
    script = Script(approval=True)
    script.release.set()
    durable = DurableAgent(script.agent(), engine)
    first = [e async for e in durable.run_stream_events("1 + 2?", run_id="ap")]
    assert isinstance(first[-1], DurableRunResultEvent)
    assert first[-1].run.status is RunStatus.WAITING  # add needs approval
    events: list[Any] = []

    async def handler(ctx: RunContext[None], stream: AsyncIterator[Any]) -> None:
        async for event in stream:
            events.append(event)

    done = await durable.approve("ap", event_stream_handler=handler)
    assert done.status is RunStatus.COMPLETED
    # The attempt after the approval: request 0 answered from the log, as one event of its
    # whole recorded tool call (no deltas); request 1 streamed live, in pieces.
    starts = [e for e in events if isinstance(e, PartStartEvent)]
    assert isinstance(starts[0].part, ToolCallPart)
    assert starts[0].part.args_as_dict() == {"a": 1, "b": 2}
    assert isinstance(starts[1].part, TextPart) and starts[1].part.content == "The answer "
    deltas = [e for e in events if isinstance(e, PartDeltaEvent)]
    assert [d.delta.content_delta for d in deltas if isinstance(d.delta, TextPartDelta)] == [
        "is 3."]
    assert not any(isinstance(d.delta, ToolCallPartDelta) for d in deltas)
    assert script.calls == Counter({0: 1, 1: 1})


async def test_the_run_handler_gets_the_deltas_live(engine: WorkflowEngine) -> None:
    script = Script()
    durable = DurableAgent(script.agent(), engine)
    seen: list[str] = []

    async def handler(ctx: RunContext[None], stream: AsyncIterator[Any]) -> None:
        async for event in stream:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                seen.append(event.part.content)
                assert durable.partial("h") == {"model:1": "The answer "}
                script.release.set()  # the request waits for this: the event came live
            elif isinstance(event, FunctionToolCallEvent):
                seen.append(event.part.tool_name)

    run = await durable.run("1 + 2?", run_id="h", event_stream_handler=handler)
    assert run.output == "The answer is 3."
    assert seen == ["add", "The answer "]  # each once: not again after the request ended


async def test_a_stream_left_mid_request_leaves_the_run_to_finish(engine: WorkflowEngine) -> None:
    script = Script()
    durable = DurableAgent(script.agent(), engine)
    async with durable.run_stream("1 + 2?", run_id="left") as stream:
        async for piece in stream.stream_text(delta=True):
            assert piece == "The answer "
            break  # the caller leaves while request 1 runs
    assert durable.partial("left") == {"model:1": "The answer "}  # it still runs, here
    script.release.set()
    run = await durable.run("1 + 2?", run_id="left")  # joins the run, asks nothing again
    assert run.status is RunStatus.COMPLETED and run.output == "The answer is 3."
    assert script.calls == Counter({0: 1, 1: 1})
    assert durable.partial("left") == {}
    assert durable._live.listened("left") is False


async def test_a_cancelled_consumer_leaves_the_run_consistent(engine: WorkflowEngine) -> None:
    script = Script()
    durable = DurableAgent(script.agent(), engine)
    got_piece = asyncio.Event()

    async def consume() -> None:
        async with aclosing(durable.run_stream_events("1 + 2?", run_id="cx")) as events:
            async for event in events:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    got_piece.set()

    task = asyncio.create_task(consume())
    await got_piece.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    script.release.set()
    run = await durable.run("1 + 2?", run_id="cx")
    assert run.output == "The answer is 3." and script.calls == Counter({0: 1, 1: 1})
    rows = {r.key: (r.state, r.runs) for r in await engine.store.calls("cx")}
    assert rows["model:1"] == (CallState.COMPLETED, 1)


async def test_a_run_nobody_streams_does_not_stream(engine: WorkflowEngine) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("plain")])

    durable = DurableAgent(Agent(FunctionModel(respond), name="plain"), engine)
    run = await durable.run("hi", run_id="p")  # FunctionModel without stream_function
    assert run.output == "plain" and durable.partial("p") == {}


async def test_bad_input_to_a_stream_is_refused_on_entering(engine: WorkflowEngine) -> None:
    durable = DurableAgent(Script().agent(), engine)
    with pytest.raises(TypeError, match="prompt must be a str"):
        async with durable.run_stream(None, run_id="bad"):  # type: ignore[arg-type]
            raise AssertionError("not entered")
    assert await engine.store.get_workflow("bad") is None
    assert durable._live.listened("bad") is False
