"""A worker process that streams a `DurableAgent` run on a SQLite file, and dies in it.

Usage: python tests/agent_stream_child.py MODE DB SIDE

The streaming agent (`build_stream_agent`): request 0 asks for ``add(1, 2)`` (``a1``) in
tool-call deltas, request 1 answers ``"The answer "`` then ``"is 3."``. Every model request
and tool body appends a line (``model <n> <pid>`` / ``tool add <pid>``) to SIDE. With the
environment variable `DIE_IN_STREAM` set, request 1 SIGKILLs this process right after its
first piece reached the caller (the caller's loop does it: the piece came live).

- ``stream``: runs ``run-stream`` with ``run_stream_events`` (and dies as above).
- ``subagent``: runs ``job`` of `build_team`: the parent ``boss`` asks for ``delegate``, whose
  body runs the ``helper`` agent as a child run (request 0 asks for ``work``, request 1
  answers); with `DIE_IN_CHILD` set, the helper's request 1 SIGKILLs this process.

The parent builds the same agent from this module (by module name, not ``__main__``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartStartEvent,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import SqliteStore

DIE_IN_STREAM = "AGENTQ_TEST_DIE_IN_STREAM"
DIE_IN_CHILD = "AGENTQ_TEST_DIE_IN_CHILD"
PROMPT = "1 + 2?"


def note(side: Path, line: str) -> None:
    with side.open("a") as f:
        f.write(f"{line} {os.getpid()}\n")


def build_stream_agent(side: Path, release: asyncio.Event | None = None) -> Agent[None, str]:
    """The streaming agent; with `release`, request 1 waits for it between its pieces."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("a streaming run streams every request")

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        note(side, f"model {n}")
        if n == 0:
            yield {0: DeltaToolCall(name="add", json_args='{"a": 1, "b": 2}', tool_call_id="a1")}
            return
        yield "The answer "
        if release is not None:
            await release.wait()
        yield "is 3."

    agent: Agent[None, str] = Agent(FunctionModel(respond, stream_function=stream), name="calc")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        note(side, "tool add")
        return a + b

    return agent


def build_team(side: Path, engine: WorkflowEngine) -> tuple[DurableAgent[None], DurableAgent[None]]:
    """The parent ``boss`` and the ``helper`` it runs from its ``delegate`` tool."""

    def boss_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        note(side, f"boss {n}")
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("delegate", {"task": "sum"}, "d1")])
        returns = [p.content for m in messages for p in getattr(m, "parts", [])
                   if p.part_kind == "tool-return"]
        return ModelResponse(parts=[TextPart(f"boss: {returns[-1]}")])

    def helper_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        note(side, f"helper {n}")
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("work", {}, "w1")])
        if os.environ.get(DIE_IN_CHILD):
            os.kill(os.getpid(), signal.SIGKILL)
        return ModelResponse(parts=[TextPart("helped")])

    boss: Agent[None, str] = Agent(FunctionModel(boss_model), name="boss")
    helper: Agent[None, str] = Agent(FunctionModel(helper_model), name="helper")

    @helper.tool_plain
    def work() -> str:
        note(side, "tool work")
        return "worked"

    durable_helper = DurableAgent(helper, engine)

    @boss.tool_plain
    async def delegate(task: str) -> str:
        note(side, "tool delegate")
        run = await durable_helper.run(task)
        return f"{run.run_id}={run.output}"

    return DurableAgent(boss, engine), durable_helper


async def main(mode: str, db: Path, side: Path) -> None:
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=5.0)
        if mode == "stream":
            release = asyncio.Event()  # never set: request 1 is in flight when we die
            durable = DurableAgent(build_stream_agent(side, release), engine)
            async for event in durable.run_stream_events(PROMPT, run_id="run-stream"):
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    print(f"live: {event.part.content}", flush=True)
                    if os.environ.get(DIE_IN_STREAM):
                        os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "subagent":
            boss, _ = build_team(side, engine)
            run = await boss.run("go", run_id="job")
            print(run.status.value, flush=True)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    from agent_stream_child import main as imported_main  # by module name: see the docstring

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
