"""A worker process for `test_engine_fork_processes.py`: a fork SIGKILLed in its live part.

Usage: python tests/fork_crash_child.py MODE DB SIDE

- ``parent``: runs instance ``p`` of `DEF` to the end: its first step makes `CALLS` durable
  calls (keys ``call-1`` … ``call-6``), each body appending ``"<key> <pid>"`` to SIDE.
- ``fork``: forks ``p`` into ``f`` at ``("calls", "call-3")`` with ``call-2`` replaced; with
  the environment variable `CRASH_AT` set to ``n``, the body of call ``n`` SIGKILLs this
  process right after writing its line.

The test process imports `DEF` from ``fork_crash_child`` by name (the fingerprints of the
calls name the tool's module), registers it and recovers the fork.
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

CALLS = 6
CRASH_AT = "AGENTQ_TEST_FORK_CRASH_AT_CALL"
REPLACED = {"key": "call-2", "square": 100}


async def tool(side: Path, key: str, n: int) -> dict[str, Any]:
    """The outside world: note that the call ran (key and pid), then answer."""
    with side.open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
    if os.environ.get(CRASH_AT) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"key": key, "square": n * n}


def definition(side: Path) -> WorkflowDef:
    """``fork-crash``: a step of `CALLS` durable calls, then a step that sums them."""

    async def calls(ctx: StepContext) -> list[Any]:
        return [
            await ctx.call(Job(f"call-{n}", functools.partial(tool, side, f"call-{n}", n)))
            for n in range(1, CALLS + 1)
        ]

    async def total(ctx: StepContext) -> int:
        return sum(out["square"] for out in ctx.previous)

    return WorkflowDef("fork-crash", [StepDef("calls", calls), StepDef("total", total)])


async def main(mode: str, db: Path, side: Path) -> None:
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id=f"child:{os.getpid()}", lease_ttl=5.0)
        engine.register(definition(side))
        if mode == "parent":
            await engine.start(definition(side), "p", None)
            result = await engine.run("p")
        else:
            result = await engine.fork("p", "f", at=("calls", "call-3"),
                                       replace={"call-2": REPLACED})
        print(result.status.value, flush=True)


if __name__ == "__main__":
    from fork_crash_child import main as imported_main  # by module name: see the docstring

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
