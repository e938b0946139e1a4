"""The scripted agent of bench/agents.py, and each engine's way of running it.

The workload: one prompt; the model answers 5 requests with 2 tool calls each (tools that do
no work: ``noop(i) -> i``), then a 6th request with the final answer. So a run makes 6 model
requests and 10 tool calls (16 durable calls on an engine that records each). With
``latency=True`` a model request sleeps 100 ms and a tool 50 ms.

An engine is an async context manager factory ``(directory, latency) -> AsyncIterator[RunOne]``
where ``RunOne(run_id)`` runs the agent once to its final answer (and checks it). Each is
written as its users write it (docs/agents.md for agentq; the peers' own documentation).
"""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import Queue, RunStatus, SqliteStore, WorkflowEngine
from agentq.integrations.pydantic_ai import DurableAgent

PROMPT = "Add the numbers."
TOOL_REQUESTS = 5
CALLS_PER_REQUEST = 2
ANSWER = "done"
MODEL_SLEEP = 0.1
TOOL_SLEEP = 0.05
NAME = "bench-agent"

RunOne = Callable[[str], Awaitable[None]]
Engine = Callable[[Path, bool], AbstractAsyncContextManager[RunOne]]


def _script(n: int) -> list[tuple[str, dict[str, Any], str]] | None:
    """The tool calls of the model's `n`-th response (name, args, id), or None: the answer."""
    if n >= TOOL_REQUESTS:
        return None
    return [
        ("noop", {"i": n * CALLS_PER_REQUEST + k}, f"c{n}_{k}") for k in range(CALLS_PER_REQUEST)
    ]


def _pydantic_model(latency: bool) -> FunctionModel:
    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if latency:
            await asyncio.sleep(MODEL_SLEEP)
        calls = _script(sum(isinstance(m, ModelResponse) for m in messages))
        if calls is None:
            return ModelResponse(parts=[TextPart(ANSWER)])
        return ModelResponse(parts=[ToolCallPart(name, args, cid) for name, args, cid in calls])

    return FunctionModel(respond)


def pydantic_agent(latency: bool, **kwargs: Any) -> Agent[None, str]:
    """The scripted pydantic-ai agent, with one no-op tool."""
    agent: Agent[None, str] = Agent(_pydantic_model(latency), name=NAME, **kwargs)

    @agent.tool_plain
    async def noop(i: int) -> int:
        if latency:
            await asyncio.sleep(TOOL_SLEEP)
        return i

    return agent


@asynccontextmanager
async def plain(directory: Path, latency: bool) -> AsyncIterator[RunOne]:
    """pydantic-ai's `Agent.run`, no durability: the limit."""
    agent = pydantic_agent(latency)

    async def run_one(run_id: str) -> None:
        result = await agent.run(PROMPT)
        assert result.output == ANSWER, result.output

    yield run_one


@asynccontextmanager
async def _durable(directory: Path, latency: bool) -> AsyncIterator[DurableAgent[None]]:
    async with Queue() as queue, SqliteStore(directory / "agentq.db") as store:
        yield DurableAgent(pydantic_agent(latency), WorkflowEngine(queue, store))


@asynccontextmanager
async def agentq_durable(directory: Path, latency: bool) -> AsyncIterator[RunOne]:
    """agentq's `DurableAgent.run` on a `SqliteStore`, as docs/agents.md writes it."""
    async with _durable(directory, latency) as durable:

        async def run_one(run_id: str) -> None:
            run = await durable.run(PROMPT, run_id=run_id)
            assert run.status is RunStatus.COMPLETED and run.output == ANSWER, run

        yield run_one


@asynccontextmanager
async def agentq_engine(directory: Path, latency: bool) -> AsyncIterator[RunOne]:
    """The same run through ``engine.start`` + ``engine.run`` (no `AgentRun` built)."""
    async with _durable(directory, latency) as durable:
        engine, run_input = durable.engine, {"agent": NAME, "prompt": PROMPT,
                                             "message_history": None}

        async def run_one(run_id: str) -> None:
            await engine.start(NAME, run_id, run_input)
            result = await engine.run(run_id)
            assert result.status is RunStatus.COMPLETED, result

        yield run_one


# ---------------------------------------------------------------- the peers


def _wal(path: Path) -> None:
    """Create the SQLite file `path` in WAL mode (a file's journal mode persists)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()


@asynccontextmanager
async def langgraph(directory: Path, latency: bool) -> AsyncIterator[RunOne]:
    """LangGraph's prebuilt ReAct agent, `AsyncSqliteSaver`, WAL + NORMAL, durability="sync"."""
    import aiosqlite
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    with warnings.catch_warnings():  # create_react_agent is deprecated for langchain's own
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench-scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
            raise NotImplementedError("the bench runs the agent asynchronously")

        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kw: Any
        ) -> ChatResult:
            if latency:
                await asyncio.sleep(MODEL_SLEEP)
            calls = _script(sum(isinstance(m, AIMessage) for m in messages))
            message = (
                AIMessage(ANSWER) if calls is None else AIMessage(
                    "", tool_calls=[{"name": n, "args": a, "id": c} for n, a, c in calls]
                )
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    async def noop(i: int) -> int:
        """Return i."""
        if latency:
            await asyncio.sleep(TOOL_SLEEP)
        return i

    path = directory / "langgraph.db"
    _wal(path)
    async with aiosqlite.connect(path) as conn:
        await conn.execute("PRAGMA synchronous = NORMAL")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(Scripted(), [noop], checkpointer=saver)

        async def run_one(run_id: str) -> None:
            state = await graph.ainvoke(
                {"messages": [("user", PROMPT)]},
                {"configurable": {"thread_id": run_id}},
                durability="sync",
            )
            assert state["messages"][-1].content == ANSWER, state["messages"][-1]

        yield run_one


@asynccontextmanager
async def dbos(directory: Path, latency: bool) -> AsyncIterator[RunOne]:
    """pydantic-ai's `DBOSDurability` on DBOS's SQLite system database, WAL + NORMAL.

    The tool is a ``@DBOS.step()`` (so each tool call is recorded, as agentq's are); the run
    is a ``@DBOS.workflow()`` whose id is the run id. DBOS is one per process: this engine
    is entered once per process (bench/agents.py runs each measurement in its own).
    """
    import sqlalchemy
    from dbos import DBOS, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
    def _normal(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.execute("PRAGMA synchronous = NORMAL")

    path = directory / "dbos.db"
    _wal(path)
    DBOS(config={"name": "bench-agents", "system_database_url": f"sqlite:///{path}",
                 "log_level": "WARNING"})
    agent: Agent[None, str] = Agent(
        _pydantic_model(latency), name=NAME, capabilities=[DBOSDurability()]
    )

    @agent.tool_plain
    @DBOS.step()
    async def noop(i: int) -> int:
        if latency:
            await asyncio.sleep(TOOL_SLEEP)
        return i

    @DBOS.workflow()
    async def run_agent(prompt: str) -> str:
        return (await agent.run(prompt)).output

    DBOS.launch()
    try:

        async def run_one(run_id: str) -> None:
            with SetWorkflowID(run_id):
                output = await run_agent(PROMPT)
            assert output == ANSWER, output

        yield run_one
    finally:
        DBOS.destroy()


ENGINES: dict[str, tuple[str, Engine]] = {
    "plain": ("pydantic-ai Agent, no durability (the limit)", plain),
    "agentq": ("agentq DurableAgent, SqliteStore", agentq_durable),
    "agentq-engine": ("agentq, engine.start + engine.run", agentq_engine),
    "langgraph": ("LangGraph prebuilt agent + AsyncSqliteSaver", langgraph),
    "dbos": ("DBOS DBOSDurability, SQLite", dbos),
}
PEERS = {"langgraph": ("langgraph", "langgraph.checkpoint.sqlite"), "dbos": ("dbos",)}
