"""A worker process for `test_groups_drain_processes.py`: one run group, two processes.

Usage: python tests/group_drain_child.py MODE DB SIDE [SCHEMA]

On the SQLite file DB, or the PostgreSQL database of DSN DB with agentq's tables in SCHEMA,
an engine whose MEDIUM lane has `PERMITS` permits and the rate limit `RATE`, shared through
the store:

- ``submit``: submits the group ``drain`` (`ITEMS`, `definition`), drains its results, and
  prints ``done <completed members>``;
- ``serve``: registers `definition`, prints ``serving`` and serves (polling every 0.1 s)
  until a line (or the end) comes on stdin, then stops gracefully.

Each member's body appends ``"start <key> <pid> <time>"`` to SIDE when it begins, and
``"held <pid> <n>"``: the live leases its process holds then; the store appends
``"charge <pid> <time>"`` each time it grants a start of the lane (the time the take was
judged at), so that the parent can count who ran what and check the window.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentq import (
    BudgetGrant,
    LaneConfig,
    Priority,
    Queue,
    Rate,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.store import PostgresStore, SqliteStore

PERMITS = 3
RATE = Rate(8, 1.0)
ITEMS = {f"m{n:02d}": n for n in range(24)}
"""The group's items: key to input."""


def definition(side: Path, held: Callable[[], Awaitable[int]]) -> WorkflowDef:
    """``member``: one step that notes its start (key, pid, time) and how many leases its
    process holds then (`held`), works 20 ms, and doubles its input."""

    async def body(ctx: StepContext) -> int:
        key = ctx.workflow_id.rsplit("/", 1)[1]
        leases = await held()
        with side.open("a") as f:
            f.write(f"start {key} {os.getpid()} {time.time():.6f}\n")
            f.write(f"held {os.getpid()} {leases}\n")
        await asyncio.sleep(0.02)
        return int(ctx.input) * 2

    return WorkflowDef("member", [StepDef("double", body)])


def noted(base: type[Any], side: Path) -> type[Any]:
    """`base` (a store class) noting in SIDE each start of a lane it grants."""

    class Noted(base):  # type: ignore[misc,valid-type]
        async def take_budget(self, lane: str, **kwargs: Any) -> BudgetGrant:
            grant: BudgetGrant = await super().take_budget(lane, **kwargs)
            if grant.charge is not None:
                with side.open("a") as f:
                    f.write(f"charge {os.getpid()} {kwargs['now']:.6f}\n")
            return grant

    return Noted


def open_store(db: str, side: Path, schema: str | None) -> Any:
    if schema is None:
        return noted(SqliteStore, side)(db)
    return noted(PostgresStore, side)(db, schema=schema)


async def main(mode: str, db: str, side: Path, schema: str | None = None) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=100, permits=PERMITS, rate=RATE)}
    async with Queue(lanes) as queue, open_store(db, side, schema) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=5.0, poll_interval=0.1)

        async def held() -> int:  # the steps this process holds leased now
            return len(await store.live_leases(time.time(), engine.worker_id))

        member = definition(side, held)
        if mode == "serve":
            engine.register(member)
            stop = asyncio.Event()
            serving = asyncio.ensure_future(engine.serve(poll_interval=0.1, stop=stop))
            print("serving", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
            stop.set()
            await serving
        else:
            group = engine.group("drain")
            await group.submit(member, ITEMS)
            done = [m.key async for m in group.results() if m.status == "completed"]
            print("done", len(done), flush=True)
        await engine.close()


if __name__ == "__main__":
    from group_drain_child import main as imported_main  # by module name, as the parent

    asyncio.run(imported_main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), *sys.argv[4:5]))
