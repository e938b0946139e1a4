"""A worker process for `test_groups_processes.py`: a run group of 12 members on SQLite.

Usage: python tests/group_crash_child.py crash DB SIDE

Submits the group ``batch`` (`member_def`, keys ``m00`` … ``m11``, two permits) and drains
its results. Each member's step makes the durable call ``work``, whose body appends
``"<key> <pid>"`` to SIDE; the body of the member whose number is ``CRASH_AT`` SIGKILLs this
process right after writing its line (the call reached the world, its outcome is not
recorded). The test process builds the same definition from this module and resumes.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path

from agentq import (
    Job,
    LaneConfig,
    Priority,
    Queue,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.store import SqliteStore

CRASH_AT = "AGENTQ_TEST_GROUP_CRASH_AT"
"""Environment variable: the number of the member whose call's body kills this process."""

ITEMS = {f"m{n:02d}": n for n in range(12)}
"""The group's items: key to input."""


async def work(side: Path, key: str, n: int) -> int:
    """The outside world: note that the call ran (key and pid), then answer."""
    with side.open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
    if os.environ.get(CRASH_AT) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(0)
    return n * n


def member_def(side: Path) -> WorkflowDef:
    """One step: the durable call ``work`` on the member's input."""

    async def step(ctx: StepContext) -> int:
        key = ctx.workflow_id.rsplit("/", 1)[1]
        return int(await ctx.call(Job("work", functools.partial(work, side, key, ctx.input))))

    return WorkflowDef("member", [StepDef("work", step)])


def lanes() -> dict[Priority, LaneConfig]:
    """Two permits: members run two at a time, in submission order."""
    return {Priority.MEDIUM: LaneConfig(capacity=100, permits=2)}


async def main(db: Path, side: Path) -> None:
    async with Queue(lanes()) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=5.0)
        group = engine.group("batch")
        await group.submit(member_def(side), ITEMS)
        async for member in group.results():
            print(member.key, member.status, member.output, flush=True)
        await engine.close()


if __name__ == "__main__":
    # by module name, so that the stored fingerprints of the calls match the test process's
    from group_crash_child import main as imported_main

    asyncio.run(imported_main(Path(sys.argv[2]), Path(sys.argv[3])))
