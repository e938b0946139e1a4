"""A worker process for `test_calls_processes.py`: durable calls on a SQLite file.

Usage: python tests/calls_crash_child.py MODE DB SIDE

- ``crash``: runs workflow ``calls-crash``, whose first step makes `CALLS` durable calls in
  turn (keys ``call-1`` … ``call-10``). Each call's body appends ``"<key> <pid>"`` to the SIDE
  file before it returns; with the environment variable `CRASH_AT` set to ``n``, the body of
  call ``n`` SIGKILLs this process right after writing its line (the call has reached the
  world, its outcome is not recorded).
- ``wait``: runs workflow ``calls-wait``, whose step makes three calls, then waits in
  ``ctx.wait_for_input("approve", ...)``; the run returns ``waiting`` and the process exits
  normally (a kernel shut down while a step waits for a person).

The parent process builds the same workflows from this module to recover or resume them. So
the child imports them from ``calls_crash_child``, not from ``__main__``: the fingerprint
stored with a durable call names its function's module, and a function defined in a script
run as ``__main__`` is another function than the same one imported by name.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agentq import Job, Queue, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.store import SqliteStore

CALLS = 10
CRASH_AT = "AGENTQ_TEST_CRASH_AT_CALL"
"""Environment variable: the number of the call whose body kills this process."""


async def tool(side: Path, key: str, n: int) -> dict[str, Any]:
    """The outside world: note that the call ran (key and pid), then answer."""
    with side.open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
    if os.environ.get(CRASH_AT) == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"key": key, "square": n * n}


def crash_workflow(side: Path) -> Workflow:
    """``calls-crash``: a step of `CALLS` durable calls, then a step that sums them."""

    async def calls(ctx: StepContext) -> list[Any]:
        outputs = []
        for n in range(1, CALLS + 1):
            job = Job(f"call-{n}", functools.partial(tool, side, f"call-{n}", n))
            outputs.append(await ctx.call(job, label={"kind": "tool", "n": n}))
        return outputs

    async def total(ctx: StepContext) -> int:
        return sum(out["square"] for out in ctx.previous)

    return Workflow("calls-crash", [StepDef("calls", calls), StepDef("total", total)])


def wait_workflow(side: Path) -> Workflow:
    """``calls-wait``: three calls, a durable wait, then one more call with the answer."""

    async def approve(ctx: StepContext) -> dict[str, Any]:
        before = []
        for n in range(1, 4):
            job = Job(f"before-{n}", functools.partial(tool, side, f"before-{n}", n))
            before.append(await ctx.call(job))
        answer = await ctx.wait_for_input(
            "approve", "send the report?", details={"calls": len(before)}
        )
        after = await ctx.call(Job("after", functools.partial(tool, side, "after", 100)))
        return {"before": before, "answer": answer, "after": after}

    return Workflow("calls-wait", [StepDef("approve", approve)])


async def main(mode: str, db: Path, side: Path) -> None:
    wf = crash_workflow(side) if mode == "crash" else wait_workflow(side)
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id=f"child:{os.getpid()}", lease_ttl=5.0)
        result = await engine.run(wf)
        print(result.status.value, flush=True)


if __name__ == "__main__":
    from calls_crash_child import main as imported_main  # by module name: see the docstring

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
