"""A worker process for `test_engine_fence_processes.py`: a thread body a cancel cannot stop.

Usage: python tests/fence_child.py DB

Runs workflow ``wf`` of `WORKFLOW` (input: the paths of the marks file and of the flag file)
as worker ``a`` with a short lease (`TTL`): its one step appends ``start <pid>`` to the marks
file, blocks (a thread) until the flag file exists, appends ``end <pid>``. The test imports
`WORKFLOW` by name, so both processes run the same step.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from agentq import Queue, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.store import SqliteStore

TTL = 0.6
"""Seconds of each process's lease: the body outlives many of them."""


def blocked(ctx: StepContext) -> str:
    marks, flag = Path(ctx.input["marks"]), Path(ctx.input["flag"])
    with marks.open("a") as f:
        f.write(f"start {os.getpid()}\n")
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # a blocking body: nothing can interrupt it
    with marks.open("a") as f:
        f.write(f"end {os.getpid()}\n")
    return "done"


WORKFLOW_STEPS = [StepDef("s", blocked)]


def workflow(marks: Path, flag: Path) -> Workflow:
    return Workflow("wf", WORKFLOW_STEPS, input={"marks": str(marks), "flag": str(flag)})


async def main(db: Path, marks: Path, flag: Path) -> None:
    async with (
        Queue() as queue,
        SqliteStore(db) as store,
        WorkflowEngine(queue, store, worker_id="a", lease_ttl=TTL) as engine,
    ):
        await engine.run(workflow(marks, flag))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
