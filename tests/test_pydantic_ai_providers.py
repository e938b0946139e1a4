"""Real providers' responses through a DurableAgent: pydantic-ai's own `OpenAIChatModel`,
`OpenAIResponsesModel` and `AnthropicModel`, their SDKs pointed at a local stub that answers
as those providers do (`provider_stub`, `provider_shapes`): text, thinking, parallel tool
calls, built-in web search and image generation (a file), citations, provider details,
finish reasons, usage, streamed or not; a 429 with
``Retry-After`` and a 500. Every part goes through agentq's log: a fresh engine on the same
SQLite file answers the run and rebuilds its messages without a request to the provider, and
they are the live run's, except the request timestamps the rebuild stamps anew."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from provider_shapes import (
    anthropic_error,
    anthropic_replies,
    anthropic_stream_replies,
    openai_error,
    openai_replies,
    openai_responses_replies,
    openai_stream_replies,
)
from provider_stub import ProviderStub, Reply
from pydantic_ai import Agent
from pydantic_ai.messages import (
    AgentStreamEvent,
    BinaryContent,
    FilePart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from agentq import RunResult, RunStatus, WorkflowEngine
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import AgentRun, DurableAgent
from agentq.queue import Priority, Queue
from agentq.store import SqliteStore

pytestmark = pytest.mark.timeout(60)

WEATHER = {"Paris": "sunny", "Rome": "rainy"}


@asynccontextmanager
async def openai_model(url: str) -> AsyncIterator[Model]:
    """pydantic-ai's OpenAI chat model on the stub (the SDK's own retries off)."""
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        yield OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))


@asynccontextmanager
async def openai_responses_model(url: str) -> AsyncIterator[Model]:
    """pydantic-ai's OpenAI Responses API model on the stub (the SDK's own retries off)."""
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        yield OpenAIResponsesModel("gpt-5", provider=OpenAIProvider(openai_client=client))


@asynccontextmanager
async def anthropic_model(url: str) -> AsyncIterator[Model]:
    """pydantic-ai's Anthropic model on the stub (the SDK's own retries off; a `max_tokens`
    of its own, else pydantic-ai streams the request behind the scenes)."""
    async with AsyncAnthropic(base_url=url, api_key="test", max_retries=0) as client:
        provider = AnthropicProvider(anthropic_client=client)
        yield AnthropicModel("claude-sonnet-4-5", provider=provider, settings={"max_tokens": 1024})


Replies = Callable[[], list[Reply]]
PROVIDERS: dict[
    str, tuple[Callable[[str], AbstractAsyncContextManager[Model]], Replies, Replies,
               Callable[..., Reply]]
] = {
    "openai": (openai_model, openai_replies, openai_stream_replies, openai_error),
    "anthropic": (anthropic_model, anthropic_replies, anthropic_stream_replies, anthropic_error),
    "openai-responses": (openai_responses_model, openai_responses_replies, list, openai_error),
}
ALL = list(PROVIDERS)
"""Every provider; the streamed tests run the first two (the Responses API's events are not
scripted here)."""


class Tools:
    """The agent's tool, counting its runs (`approval`: each call waits for an approval)."""

    def __init__(self, *, approval: bool = False) -> None:
        self.ran: list[str] = []
        self.approval = approval

    def agent(self, model: Model) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(model, name="weather")

        @agent.tool_plain(requires_approval=self.approval)
        def weather(city: str) -> str:
            """The weather in `city`."""
            self.ran.append(city)
            return WEATHER[city]

        return agent


@asynccontextmanager
async def durable_on(
    path: Path,
    provider: str,
    url: str,
    tools: Tools,
    clock: FakeClock | None = None,
) -> AsyncIterator[DurableAgent[None]]:
    """A DurableAgent of `provider`'s model on `url`, on an engine over the SQLite file."""
    async with (
        PROVIDERS[provider][0](url) as model,
        Queue(clock=clock) as queue,
        SqliteStore(path) as store,
    ):
        engine = WorkflowEngine(queue, store, lease_ttl=30.0, clock=clock)
        try:
            yield DurableAgent(tools.agent(model), engine)
        finally:
            await engine.close()


def without_request_times(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The messages without what a rebuild makes anew: the requests' timestamps (and their
    parts'). The run id and the conversation id stay: both are derived from the run's id."""
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            parts: list[Any] = [
                dataclasses.replace(p, timestamp=None) if hasattr(p, "timestamp") else p  # type: ignore[arg-type]
                for p in message.parts
            ]
            message = dataclasses.replace(message, parts=parts, timestamp=None)
        out.append(message)
    return out


async def live_then_replayed(
    tmp_path: Path, provider: str, replies: list[Reply], **options: Any
) -> tuple[AgentRun, AgentRun, list[ModelMessage], ProviderStub]:
    """Run the agent against the stub; then, in a fresh engine on the same SQLite file with
    a provider that answers nothing, run the same run id again and rebuild its messages."""
    stub, tools = ProviderStub(replies), Tools()
    with stub.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools) as durable:
            live = await durable.run("Weather in Paris and Rome?", run_id="r1", **options)
    assert live.status is RunStatus.COMPLETED, live.reason
    assert sorted(tools.ran) == ["Paris", "Rome"]  # the two calls of one response, once each

    silent = ProviderStub([])
    with silent.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools) as durable:
            again = await durable.run("Weather in Paris and Rome?", run_id="r1")
            rebuilt = await durable.messages("r1")
    assert silent.served == 0 and len(tools.ran) == 2  # nothing sent, nothing run again
    return live, again, rebuilt, stub


def response_parts(messages: Sequence[ModelMessage]) -> list[list[type[Any]]]:
    return [[type(p) for p in m.parts] for m in messages if isinstance(m, ModelResponse)]


@pytest.mark.parametrize("provider", ALL)
async def test_every_part_of_a_response_round_trips_through_the_log(
    tmp_path: Path, provider: str
) -> None:
    live, again, rebuilt, stub = await live_then_replayed(
        tmp_path, provider, PROVIDERS[provider][1]()
    )
    assert stub.served == 2
    responses = [m for m in live.messages if isinstance(m, ModelResponse)]
    first = responses[0]
    assert [p.args_as_dict() for p in first.parts if isinstance(p, ToolCallPart)
            and not isinstance(p, NativeToolCallPart)] == [{"city": "Paris"}, {"city": "Rome"}]
    assert any(isinstance(p, ThinkingPart) for p in first.parts)
    # the Responses API says "completed" of both: pydantic-ai maps it to "stop"
    stops = ("stop", "stop") if provider == "openai-responses" else ("tool_call", "stop")
    assert (first.finish_reason, responses[1].finish_reason) == stops
    assert first.usage.output_tokens == 30 and first.provider_response_id is not None
    if provider != "openai":  # the built-in web search: its call and its return
        kinds = {type(p) for p in first.parts}
        assert {NativeToolCallPart, NativeToolReturnPart} <= kinds
        signed = [p for p in first.parts if isinstance(p, ThinkingPart) and p.signature]
        assert signed and all(p.provider_name == provider.split("-")[0] for p in signed)
    text = next(p for p in responses[1].parts if isinstance(p, TextPart))
    if provider == "openai-responses":  # the built-in image generation: its image, a file
        image = next(p for p in responses[1].parts if isinstance(p, FilePart))
        assert image.content.data.startswith(b"\x89PNG")
    else:
        assert text.citations

    assert again.output == live.output and isinstance(live.output, str)
    assert again.usage == live.usage and live.usage.requests == 2
    assert [m.run_id for m in rebuilt] == [m.run_id for m in live.messages]
    assert without_request_times(rebuilt) == without_request_times(live.messages)
    assert response_parts(rebuilt) == response_parts(live.messages)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_streamed_run_records_the_final_responses_and_replays_them(
    tmp_path: Path, provider: str
) -> None:
    seen: list[AgentStreamEvent] = []

    async def handler(ctx: object, events: AsyncIterator[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event)

    live, again, rebuilt, stub = await live_then_replayed(
        tmp_path, provider, PROVIDERS[provider][2](), event_stream_handler=handler
    )
    assert all(r.body.get("stream") is True for r in stub.requests)
    # the thinking, text and tool-argument deltas reached the handler while the calls ran
    deltas = {type(e.delta).__name__ for e in seen if isinstance(e, PartDeltaEvent)}
    assert deltas == {"ThinkingPartDelta", "TextPartDelta", "ToolCallPartDelta"}
    responses = [m for m in live.messages if isinstance(m, ModelResponse)]
    starts = [e.part for e in seen if isinstance(e, PartStartEvent)]
    assert len(starts) == sum(len(r.parts) for r in responses)  # each part once, not again
    assert [p.content for p in responses[0].parts if isinstance(p, TextPart)] == [
        "Checking both cities."
    ]
    assert live.output == again.output == "Paris is sunny, Rome is rainy."
    assert live.usage == again.usage and live.usage.output_tokens == 42
    assert without_request_times(rebuilt) == without_request_times(live.messages)


@pytest.mark.parametrize("provider", ALL)
async def test_an_image_in_the_prompt_reaches_the_provider_and_replays(
    tmp_path: Path, provider: str
) -> None:
    image = BinaryContent(b"\x89PNG\r\n\x1a\n fake", media_type="image/png")
    replies = PROVIDERS[provider][1]()
    stub, tools = ProviderStub(replies), Tools()
    prompt: list[UserContent] = ["What is in this picture, and the weather?", image]
    with stub.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools) as durable:
            live = await durable.run(prompt, run_id="r1")
    assert live.status is RunStatus.COMPLETED
    assert image.base64 in str(stub.requests[0].body)
    async with durable_on(tmp_path / "agent.db", provider, "http://127.0.0.1:9", tools) as d:
        rebuilt = await d.messages("r1")
    assert without_request_times(rebuilt) == without_request_times(live.messages)
    part = rebuilt[0].parts[0]
    assert isinstance(part, UserPromptPart) and not isinstance(part.content, str)
    stored = part.content[1]
    assert isinstance(stored, BinaryContent)
    assert (stored.data, stored.media_type) == (image.data, image.media_type)


@pytest.mark.parametrize("provider", ALL)
async def test_a_429_with_retry_after_pauses_the_model_lane_and_fails_the_run_cleanly(
    tmp_path: Path, provider: str
) -> None:
    _, replies, _, error = PROVIDERS[provider]
    clock = FakeClock()
    stub, tools = ProviderStub([error(429, retry_after=30), *replies()]), Tools()
    with stub.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools, clock) as durable:
            failed = await durable.run("Weather in Paris and Rome?", run_id="r1")
            assert failed.status is RunStatus.FAILED
            assert "429" in str(failed.reason)
            lanes = durable.engine.queue.stats().lanes
            high = next(s for s in lanes if s.priority is Priority.HIGH)
            assert high.paused_until == clock.time() + 30  # the model lane waits for the provider
            retried = asyncio.create_task(durable.engine.retry("r1"))
            await clock.advance(29)
            assert stub.served == 1 and not retried.done()  # nothing sent before Retry-After
            await clock.advance(1)
            result = await retried
    assert isinstance(result, RunResult) and result.status is RunStatus.COMPLETED
    assert stub.served == 3
    assert sorted(tools.ran) == ["Paris", "Rome"]


@pytest.mark.parametrize("provider", ALL)
async def test_a_500_fails_the_run_and_a_retry_answers_the_recorded_requests(
    tmp_path: Path, provider: str
) -> None:
    _, replies, _, error = PROVIDERS[provider]
    first, second = replies()
    stub, tools = ProviderStub([first, error(500), second]), Tools()
    with stub.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools) as durable:
            failed = await durable.run("Weather in Paris and Rome?", run_id="r1")
            assert failed.status is RunStatus.FAILED and "500" in str(failed.reason)
            await durable.engine.retry("r1")
            done = await durable.run("Weather in Paris and Rome?", run_id="r1")
    assert done.status is RunStatus.COMPLETED, done.reason
    assert stub.served == 3  # the first request answered from the log, not sent again
    assert sorted(tools.ran) == ["Paris", "Rome"]  # the tool calls too


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_streamed_run_continued_after_approvals_replays_its_first_response(
    tmp_path: Path, provider: str
) -> None:
    attempts: list[list[AgentStreamEvent]] = []

    async def handler(ctx: object, events: AsyncIterator[AgentStreamEvent]) -> None:
        async for event in events:
            attempts[-1].append(event)

    stub, tools = ProviderStub(PROVIDERS[provider][2]()), Tools(approval=True)
    with stub.serving() as url:
        async with durable_on(tmp_path / "agent.db", provider, url, tools) as durable:
            attempts.append([])
            run = await durable.run("Weather?", run_id="r1", event_stream_handler=handler)
            assert run.status is RunStatus.WAITING and stub.served == 1
            attempts.append([])
            run = await durable.approve("r1", run.pending[0].tool_call_id,
                                        event_stream_handler=handler)
            attempts.append([])
            run = await durable.approve("r1", event_stream_handler=handler)
    assert run.status is RunStatus.COMPLETED, run.reason
    assert stub.served == 2 and sorted(tools.ran) == ["Paris", "Rome"]
    first, last = attempts[0], attempts[-1]
    assert any(isinstance(e, PartDeltaEvent) for e in first)  # request 1 streamed live
    # the last attempt: request 1 answered from the log gives its recorded parts (no
    # delta), request 2 streams live
    responses = [m for m in run.messages if isinstance(m, ModelResponse)]
    starts = [e.part for e in last if isinstance(e, PartStartEvent)]
    assert starts[: len(responses[0].parts)] == list(responses[0].parts)
    assert len(starts) == len(responses[0].parts) + len(responses[1].parts)
    deltas = [e for e in last if isinstance(e, PartDeltaEvent)]
    assert deltas and all(e.index == 0 for e in deltas)  # the text of response 2
