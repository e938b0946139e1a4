"""A worker process that streams a DurableAgent run from pydantic-ai's OpenAI chat model.

Usage: python tests/provider_crash_child.py URL DB SIDE

The agent (`build_agent`) has one tool, ``weather(city)``; the model is pydantic-ai's
`OpenAIChatModel` on the provider stub at URL; the run (``run-stream``, prompt `PROMPT`) has
an event-stream handler. SIDE gets a line per tool run (``tool <city> <pid>``) and per text
delta the handler receives (``delta <text> <pid>``): what reached the world and the caller.
The parent kills this process while the stub holds a streamed response half sent, and builds
the same agent (`build_agent`, `openai_model`) to continue the run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import AgentStreamEvent, PartDeltaEvent, TextPartDelta
from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import SqliteStore

PROMPT = "Weather in Paris and Rome?"
RUN_ID = "run-stream"


def note(side: Path, line: str) -> None:
    with side.open("a") as f:
        f.write(f"{line} {os.getpid()}\n")


@asynccontextmanager
async def openai_model(url: str) -> AsyncIterator[Model]:
    """pydantic-ai's OpenAI chat model on the stub at `url` (the SDK's own retries off)."""
    async with AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        yield OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))


def build_agent(model: Model, side: Path) -> Agent[None, str]:
    """The agent: `model`, and a weather tool that notes each run in `side`."""
    agent: Agent[None, str] = Agent(model, name="weather")

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather in `city`."""
        note(side, f"tool {city}")
        return {"Paris": "sunny", "Rome": "rainy"}[city]

    return agent


def handler(side: Path) -> Callable[[object, AsyncIterator[AgentStreamEvent]], Awaitable[None]]:
    """An event-stream handler that notes each text delta in `side`."""

    async def handle(ctx: object, events: AsyncIterator[AgentStreamEvent]) -> None:
        async for event in events:
            if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                note(side, f"delta {event.delta.content_delta.strip()}")

    return handle


async def main(url: str, db: Path, side: Path) -> None:
    async with openai_model(url) as model, Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="child", lease_ttl=5.0)
        durable = DurableAgent(build_agent(model, side), engine)
        run = await durable.run(PROMPT, run_id=RUN_ID, event_stream_handler=handler(side))
        print(run.status.value, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
