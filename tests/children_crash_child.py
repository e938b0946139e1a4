"""A worker process for `test_children_processes.py`: a parent and its child run on SQLite.

Usage: python tests/children_crash_child.py crash DB SIDE

Runs ``family`` (an instance of `parent_def`): its step makes the durable call ``before``,
then waits for the child run ``family/kid`` (an instance of `child_def`, three durable calls
``kid-1`` … ``kid-3``), then makes the call ``after``. Each call's body appends
``"<key> <pid>"`` to SIDE; the body of ``kid-<CRASH_AT>`` SIGKILLs this process right after
writing its line (the call reached the world, its outcome is not recorded).

The test process builds the same definitions from this module (imported by name, so that the
stored fingerprints of the calls match) and recovers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agentq import Job, Queue, StepContext, StepDef, WorkflowDef, WorkflowEngine
from agentq.store import SqliteStore

CRASH_AT = "AGENTQ_TEST_CRASH_AT_KID_CALL"
"""Environment variable: the number of the child's call whose body kills this process."""


async def tool(side: Path, key: str, n: int) -> int:
    """The outside world: note that the call ran (key and pid), then answer."""
    with side.open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
    if key.startswith("kid-") and os.environ.get(CRASH_AT) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return n * n


def child_def(side: Path) -> WorkflowDef:
    """``kid``: three durable calls, summed."""

    async def calls(ctx: StepContext) -> int:
        total = 0
        for n in range(1, 4):
            job = Job(f"kid-{n}", functools.partial(tool, side, f"kid-{n}", n))
            total += await ctx.call(job)
        return total + ctx.input

    return WorkflowDef("kid", [StepDef("calls", calls)])


def parent_def(side: Path) -> WorkflowDef:
    """``parent``: a call, the child run ``kid`` (input 100), a call."""

    async def step(ctx: StepContext) -> dict[str, Any]:
        before = await ctx.call(Job("before", functools.partial(tool, side, "before", 2)))
        kid = await ctx.child(child_def(side), 100, key="kid")
        after = await ctx.call(Job("after", functools.partial(tool, side, "after", 3)))
        return {"before": before, "kid": kid, "after": after}

    return WorkflowDef("parent", [StepDef("family", step)])


async def main(db: Path, side: Path) -> None:
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id=f"child:{os.getpid()}", lease_ttl=5.0)
        await engine.start(parent_def(side), "family")
        result = await engine.run("family")
        print(result.status.value, flush=True)


if __name__ == "__main__":
    from children_crash_child import main as imported_main  # by module name: see above

    asyncio.run(imported_main(Path(sys.argv[2]), Path(sys.argv[3])))
