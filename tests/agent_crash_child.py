"""Agents for the pydantic-ai tests, and a worker process that runs one on a SQLite file.

Usage: python tests/agent_crash_child.py MODE DB SIDE

The scripted agent (`FunctionModel`) makes three model requests: the first asks for
``add(1, 2)`` and ``add(3, 4)`` (tool calls ``a1``, ``a2``), the second for ``mul(3, 7)``
(``m1``), the third answers. With ``approval=True`` a fourth request first asks for
``send(to="bob")`` (``s1``), a tool that needs approval. Every model request and every tool
body appends a line (``model <n> <pid>`` / ``tool <id> <pid>``) to the SIDE file: the side
channel that counts what really reached "the provider" and "the world".

- ``crash``: runs ``run-crash``; with the environment variable `CRASH_AT` set to a tool call id,
  that tool's body SIGKILLs this process right after writing its line.
- ``wait``: runs ``run-wait`` of the approval agent, which stops at the approval of ``s1``;
  the process exits normally (a kernel shut down while a run waits for a person).
- ``options``: as ``wait``, as ``run-options`` with run options (a model by registered name
  ``scripted``, settings, instructions, usage limits) stored with the run.
- ``parallel``: runs ``run-parallel`` of `build_parallel_agent`, one response of three tool
  calls (``p0``, ``p1``, ``p2``) that run concurrently; with `CRASH_AT` set to ``p1``, that
  call SIGKILLs this process once ``p0`` is recorded completed and ``p2`` is running.

The parent builds the same agents from this module (by module name, not ``__main__``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from agentq import Queue, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import SqliteStore

CRASH_AT = "AGENTQ_TEST_AGENT_CRASH_AT"
PROMPT = "add 1+2 and 3+4, then multiply 3 by 7"


def note(side: Path, line: str) -> None:
    with side.open("a") as f:
        f.write(f"{line} {os.getpid()}\n")


def script(side: Path, approval: bool) -> FunctionModel:
    """The scripted model: which tool calls each request returns, by the request's number."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        note(side, f"model {n}")
        turns: list[list[ToolCallPart]] = [
            [
                ToolCallPart("add", {"a": 1, "b": 2}, "a1"),
                ToolCallPart("add", {"a": 3, "b": 4}, "a2"),
            ],
            [ToolCallPart("mul", {"a": 3, "b": 7}, "m1")],
        ]
        if approval:
            turns.append([ToolCallPart("send", {"to": "bob"}, "s1")])
        if n < len(turns):
            return ModelResponse(parts=list(turns[n]))
        return ModelResponse(parts=[TextPart(f"done after {n} requests")])

    return FunctionModel(respond)


def build_agent(side: Path, *, approval: bool = False, add_needs_approval: bool = False,
                instructions: str = "Be brief.",
                mul_down: list[bool] | None = None) -> Agent[None, str]:
    """The test agent: tools ``add``, ``mul`` and (approval agent) ``send``.

    While ``mul_down[0]`` is true, ``mul`` raises `ConnectionError` (before noting a run).
    """
    agent = Agent(script(side, approval), name="calc", instructions=instructions)

    @agent.tool_plain(requires_approval=add_needs_approval)
    def add(a: int, b: int) -> int:
        note(side, f"tool add {a} {b}")
        return a + b

    @agent.tool_plain
    def mul(a: int, b: int) -> int:
        if mul_down and mul_down[0]:
            raise ConnectionError("tool backend down")
        note(side, f"tool mul {a} {b}")
        if os.environ.get(CRASH_AT) == "m1":
            os.kill(os.getpid(), signal.SIGKILL)
        return a * b

    @agent.tool_plain(requires_approval=True)
    def send(to: str) -> str:
        note(side, f"tool send {to}")
        return f"sent to {to}"

    return agent


PARALLEL_PROMPT = "fetch p0, p1 and p2 at once"


class WatchedStore(SqliteStore):
    """A `SqliteStore` that says when ``p0``'s outcome is recorded (`p0_recorded`)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.p0_recorded = asyncio.Event()

    async def complete_call(self, *args: Any, **kwargs: Any) -> Any:
        row = await super().complete_call(*args, **kwargs)
        if row.key == "tool:0.0:p0":
            self.p0_recorded.set()
        return row


def build_parallel_agent(side: Path, store: WatchedStore | None = None) -> Agent[None, str]:
    """One response of three ``fetch`` calls run concurrently, then the returns joined.

    In a child given `CRASH_AT` ``p1`` (and the run's `store`), ``p1`` waits until ``p0`` is
    recorded completed and ``p2`` runs, then SIGKILLs the process; ``p2`` waits forever there.
    """

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        note(side, f"model {n}")
        if n == 0:
            return ModelResponse(
                parts=[ToolCallPart("fetch", {"name": f"p{i}"}, f"p{i}") for i in range(3)])
        returns = [str(p.content) for m in messages for p in getattr(m, "parts", [])
                   if p.part_kind == "tool-return"]
        return ModelResponse(parts=[TextPart(" ".join(returns))])

    agent = Agent(FunctionModel(respond), name="fetcher")
    p2_running = asyncio.Event()

    @agent.tool_plain
    async def fetch(name: str) -> str:
        note(side, f"tool {name}")
        if os.environ.get(CRASH_AT) == "p1" and store is not None:
            if name == "p2":
                p2_running.set()
                await asyncio.Event().wait()  # in flight when the process dies
            if name == "p1":
                await p2_running.wait()
                await store.p0_recorded.wait()
                os.kill(os.getpid(), signal.SIGKILL)
        return name

    return agent


async def main(mode: str, db: Path, side: Path) -> None:
    async with Queue() as queue, WatchedStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=5.0)
        if mode == "parallel":
            durable = DurableAgent(build_parallel_agent(side, store), engine)
            run = await durable.run(PARALLEL_PROMPT, run_id="run-parallel")
        elif mode == "options":  # run options stored with the run, used by another process
            agent = build_agent(side, approval=True)
            durable = DurableAgent(agent, engine, models={"scripted": script(side, True)})
            run = await durable.run(
                PROMPT, run_id="run-options", model="scripted", instructions="In French.",
                model_settings={"temperature": 0.5}, usage_limits=UsageLimits(request_limit=9),
            )
        else:
            durable = DurableAgent(build_agent(side, approval=mode == "wait"), engine)
            run = await durable.run(PROMPT, run_id=f"run-{mode}")
        print(run.status.value, flush=True)


if __name__ == "__main__":
    from agent_crash_child import main as imported_main  # by module name: see the docstring

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
