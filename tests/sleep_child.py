"""A serving process whose one definition sleeps durably, for `test_sleep_processes.py`.

Usage: python tests/sleep_child.py DB SIDE NAME

Registers ``nap`` (one step) on an engine over the SQLite file DB (real clock, 1 s leases)
and serves until killed. The step appends ``"run NAME <time>"`` to the SIDE file each time
its body starts, sleeps durably until ``ctx.input["wake"]`` (Unix seconds), then appends
``"woke NAME <time>"`` and returns NAME.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from agentq import LaneConfig, Priority, Queue, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.store import SqliteStore


def definition(side: Path, name: str) -> WorkflowDef:
    """``nap``: note the run, sleep until ``input["wake"]``, note the waking."""

    async def nap(ctx: StepContext) -> str:
        with side.open("a") as f:
            f.write(f"run {name} {time.time()}\n")
        await ctx.sleep_until(ctx.input["wake"])
        with side.open("a") as f:
            f.write(f"woke {name} {time.time()}\n")
        return name

    return WorkflowDef("nap", [StepDef("nap", nap)])


async def main(db: str, side: Path, name: str) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}
    async with Queue(lanes) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id=f"{name}", lease_ttl=1.0)
        engine.register(definition(side, name))
        print("serving", flush=True)
        await engine.serve(poll_interval=0.05)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
