"""A user's module for `test_cli_serve.py`, served as ``agentq serve serve_app:ATTR``.

The environment says where and how: ``AGENTQ_TEST_DB`` the SQLite file, ``AGENTQ_TEST_MARKS``
a file each step body appends ``"<workflow> started <pid>"`` to when it starts, and
``AGENTQ_TEST_MODE`` what the body of definition ``job`` (one step, ``a``) does then:
``block`` (awaits an hour), ``thread`` (a blocking call in a worker thread: 30 s),
``short`` (awaits 0.5 s) or ``quick`` (returns at once). Engines have 60 s leases and the
default worker id, so a lease waited out would show, and a dead worker's is taken back.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentq import Queue, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.store import SqliteStore

MODE = os.environ.get("AGENTQ_TEST_MODE", "quick")


def _mark(workflow_id: str) -> None:
    with open(os.environ["AGENTQ_TEST_MARKS"], "a") as f:
        f.write(f"{workflow_id} started {os.getpid()}\n")


async def _body(ctx: StepContext) -> str:
    _mark(ctx.workflow_id)
    if MODE == "block":
        await asyncio.sleep(3600)
    elif MODE == "short":
        await asyncio.sleep(0.5)
    return f"done by {os.getpid()}"


def _blocking(ctx: StepContext) -> str:
    _mark(ctx.workflow_id)
    time.sleep(30)
    return f"done by {os.getpid()}"


JOB = WorkflowDef("job", [StepDef("a", _blocking if MODE == "thread" else _body)])


def make_engine() -> WorkflowEngine:
    """A callable returning an engine: the command owns its queue and store."""
    engine = WorkflowEngine(Queue(), SqliteStore(os.environ["AGENTQ_TEST_DB"]), lease_ttl=60.0)
    engine.register(JOB)
    return engine


@asynccontextmanager
async def engine_cm() -> AsyncIterator[WorkflowEngine]:
    """An async context manager yielding an engine: it owns its queue and store."""
    async with Queue() as queue, SqliteStore(os.environ["AGENTQ_TEST_DB"]) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=60.0)
        engine.register(JOB)
        yield engine


def bare() -> WorkflowEngine:
    """An engine with no definition: nothing to serve."""
    return WorkflowEngine(Queue(), SqliteStore(os.environ["AGENTQ_TEST_DB"]))


not_an_engine = 42


def failing_factory() -> WorkflowEngine:
    """A factory that raises (review A #4)."""
    raise RuntimeError("factory boom")


async def failing_async_factory() -> WorkflowEngine:
    """An async factory that raises (review A #4)."""
    raise RuntimeError("async boom")
