"""A process for `test_engine_processes.py`: two engines racing over the same workflows.

Usage: python tests/engine_race_worker.py DB MARKS NAME N_WORKFLOWS

Opens two `SqliteStore` connections on DB, each behind its own `WorkflowEngine` and `Queue`,
prints ``ready``, waits for a line on stdin (so both processes start together), then runs the
same N three-step workflows on both engines at once. Every step body appends
"<workflow> <step> <NAME>" to MARKS; step "b" of ``race-0`` then waits until the file
MARKS + ".read" exists (the test creates it once it has read the log twice meanwhile, so the
reads overlap the race however fast the store is). Exits 0 when every run completed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agentq import Queue, RunStatus, SqliteStore, StepContext, StepDef, Workflow, WorkflowEngine


def workflows(marks: Path, name: str, n: int) -> list[Workflow]:
    read = Path(f"{marks}.read")

    def step(step_name: str) -> StepDef:
        async def body(ctx: StepContext) -> str:
            line = f"{ctx.workflow_id} {step_name} {name}\n".encode()
            fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, line)  # one write(2) with O_APPEND: lines never interleave
            finally:
                os.close(fd)
            await asyncio.sleep(0.002)  # a little real work, so the racers interleave
            if (ctx.workflow_id, step_name) == ("race-0", "b"):
                # another process signals (a file): no asyncio.Event can carry it
                while not await asyncio.to_thread(read.exists):  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
            return step_name

        return StepDef(step_name, body)

    return [Workflow(f"race-{i}", [step("a"), step("b"), step("c")]) for i in range(n)]


async def main(db: Path, marks: Path, name: str, n: int) -> None:
    async with SqliteStore(db) as s1, SqliteStore(db) as s2, Queue() as q1, Queue() as q2:
        engines = [
            WorkflowEngine(q1, s1, worker_id=f"{name}-e1", poll_interval=0.01),
            WorkflowEngine(q2, s2, worker_id=f"{name}-e2", poll_interval=0.01),
        ]
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        flows = workflows(marks, name, n)
        if name.endswith("2"):
            flows.reverse()  # the racers start from opposite ends and meet in the middle
        results = await asyncio.gather(*(engine.run(wf) for engine in engines for wf in flows))
    bad = [r for r in results if r.status is not RunStatus.COMPLETED]
    if bad:
        raise SystemExit(f"not completed: {bad[:3]}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
