"""A worker process for the crash tests: runs workflows [a, b, c] on a SQLite file or a
PostgreSQL database.

Usage: python tests/crash_child.py DB MARKS N_WORKFLOWS [SCHEMA]

DB is a SQLite path, or a PostgreSQL DSN (``host=… dbname=…``) with SCHEMA its agentq schema.

Each step body appends "<workflow> <step>" to the MARKS file when it starts. Step "b" then
hangs, so the parent can kill this process with SIGKILL while b is running.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentq import Queue, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.store import DurableStore, PostgresStore
from agentq.store.sqlite.store import SqliteStore


def workflows(marks: Path, n: int, *, hang_in_b: bool) -> list[Workflow]:
    def step(name: str) -> StepDef:
        async def body(ctx: StepContext) -> str:
            with marks.open("a") as f:
                f.write(f"{ctx.workflow_id} {name}\n")
            if name == "b" and hang_in_b:
                await asyncio.sleep(3600)
            return f"{name}-done"

        return StepDef(name, body)

    return [Workflow(f"crash-{i}", [step("a"), step("b"), step("c")]) for i in range(n)]


def open_store(db: str, schema: str | None = None) -> SqliteStore | PostgresStore:
    """The store `db` names: a PostgreSQL DSN when a schema is given, else a SQLite path."""
    if schema is not None:
        return PostgresStore(db, schema=schema)
    return SqliteStore(db)


async def main(db: str, marks: Path, n: int, schema: str | None) -> None:
    async with Queue() as queue, open_store(db, schema) as opened:
        store: DurableStore = opened
        engine = WorkflowEngine(queue, store, worker_id="doomed", lease_ttl=5.0)
        await asyncio.gather(*(engine.run(wf) for wf in workflows(marks, n, hang_in_b=True)))


if __name__ == "__main__":
    schema = sys.argv[4] if len(sys.argv) > 4 else None
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), schema))
