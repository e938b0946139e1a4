"""A serving process with one scheduled definition, for `test_schedule_processes.py`.

Usage: python tests/schedule_child.py DB SIDE NAME

Registers ``tick`` (one step) on an engine over the SQLite file DB (real clock, default
worker id, so that a later process on this host takes a dead one's lease back at once) and
serves until killed. The step appends ``"run NAME WORKFLOW_ID"`` to the SIDE file each time
its body starts; in the process named ``hang`` it then never returns (the test kills it),
elsewhere it returns NAME.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentq import LaneConfig, Priority, Queue, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.store import SqliteStore


def definition(side: Path, name: str) -> WorkflowDef:
    """``tick``: note the run, then hang (process ``hang``) or return the process's name."""

    async def body(ctx: StepContext) -> str:
        with side.open("a") as f:
            f.write(f"run {name} {ctx.workflow_id}\n")
        if name == "hang":
            await asyncio.Event().wait()
        return name

    return WorkflowDef("tick", [StepDef("go", body)])


async def main(db: str, side: Path, name: str) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}
    async with Queue(lanes) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=30.0)
        engine.register(definition(side, name))
        print("serving", flush=True)
        await engine.serve(poll_interval=0.05)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
