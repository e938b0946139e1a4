"""A serving worker process for `test_serving_processes.py`.

Usage: python tests/serve_child.py DB SIDE NAME [SCHEMA]

Registers `definition` (``job``: steps a, b, c) and `approval` on an engine over the SQLite
file DB, or the PostgreSQL database of DSN DB with agentq's tables in SCHEMA (lane of 4
permits, 2 s leases, worker id ``NAME:<pid>``) and serves until killed.
Each step body of ``job`` appends ``"<workflow> <step> <pid>"`` to the SIDE file when it
starts, works 50 ms, then returns, so that the parent can count what ran where, and kill
this process mid-run. The environment may change two things (for `test_scale.py` and
``bench/scale.py``): ``AGENTQ_SERVE_WORK``, seconds each body works (default 0.05), and
``AGENTQ_SERVE_PERMITS``, the lane's permits (default 4).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agentq import LaneConfig, Priority, Queue, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.store import PostgresStore, SqliteStore

LEASE_TTL = 2.0
POLL = 0.1
WORK = float(os.environ.get("AGENTQ_SERVE_WORK", "0.05"))
PERMITS = int(os.environ.get("AGENTQ_SERVE_PERMITS", "4"))


def definition(side: Path) -> WorkflowDef:
    """``job``: three steps, each noting that it ran (workflow, step, pid)."""

    def step(name: str) -> StepDef:
        async def body(ctx: StepContext) -> str:
            with side.open("a") as f:
                f.write(f"{ctx.workflow_id} {name} {os.getpid()}\n")
            await asyncio.sleep(WORK)
            return f"{name}:{ctx.input}"

        return StepDef(name, body)

    return WorkflowDef("job", [step("a"), step("b"), step("c")])


def approval() -> WorkflowDef:
    """``approval``: one step that waits for a person, then returns the answer."""

    async def ask(ctx: StepContext) -> object:
        return await ctx.wait_for_input("approve", "ship it?")

    return WorkflowDef("approval", [StepDef("ask", ask)])


def open_store(db: str, schema: str | None = None) -> SqliteStore | PostgresStore:
    """The store DB names: a PostgreSQL DSN when a schema is given, else a SQLite path."""
    return SqliteStore(db) if schema is None else PostgresStore(db, schema=schema)


async def main(db: str, side: Path, name: str, schema: str | None = None) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=50, permits=PERMITS)}
    async with Queue(lanes) as queue, open_store(db, schema) as store:
        engine = WorkflowEngine(
            queue, store, worker_id=f"{name}:{os.getpid()}", lease_ttl=LEASE_TTL
        )
        engine.register(definition(side))
        engine.register(approval())
        print("serving", flush=True)
        await engine.serve(poll_interval=POLL)


if __name__ == "__main__":
    from serve_child import main as imported_main  # by module name, as the parent imports it

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], *sys.argv[4:5]))
