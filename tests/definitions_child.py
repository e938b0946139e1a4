"""A worker process for `test_definitions_processes.py`: definitions run on a SQLite file.

Usage: python tests/definitions_child.py MODE DB SIDE

- ``crash``: registers `ORDER`, starts instance ``order-1`` by name and runs it, beside a plain
  workflow ``plain-1`` (its one step notes that it ran, then hangs). The ``charge`` step of
  ``order-1`` makes `CALLS` durable calls in turn; each call's body appends ``"<key> <pid>"``
  to the SIDE file, and the body of the call whose key is in the environment variable
  `CRASH_AT` SIGKILLs this process right after writing its line (the call has reached the
  world, its outcome is not recorded).
- ``wait``: registers `APPROVAL`, starts ``approval-1`` and runs it: two calls, then a
  durable wait; the run returns ``waiting`` and the process exits normally.

The parent process builds the same definitions from this module (`definitions`), registers
them on a fresh engine over the same file and continues the instances by id. The child
imports them from ``definitions_child``, not from ``__main__``, so that the fingerprints of
durable calls (which name their function's module) are the same in both processes.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agentq import Job, Queue, StepContext, StepDef, Workflow, WorkflowDef, WorkflowEngine
from agentq.store import SqliteStore

CALLS = 5
CRASH_AT = "AGENTQ_TEST_DEFINITION_CRASH_AT"
"""Environment variable: the key of the call whose body kills this process."""


async def tool(side: Path, key: str, n: int) -> dict[str, Any]:
    """The outside world: note that the call ran (key and pid), then answer."""
    with side.open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
    if os.environ.get(CRASH_AT) == key:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"key": key, "n": n}


def definitions(side: Path) -> tuple[WorkflowDef, WorkflowDef]:
    """`ORDER` (``order``: reserve, charge, ship) and `APPROVAL` (``approval``: ask)."""

    async def reserve(ctx: StepContext) -> int:
        return int(ctx.input["n"])

    async def charge(ctx: StepContext) -> list[Any]:
        outputs = []
        for n in range(1, CALLS + 1):
            key = f"{ctx.workflow_id}:charge-{n}"
            job = Job(key, functools.partial(tool, side, key, n))
            outputs.append(await ctx.call(job, label={"kind": "tool", "n": n}))
        return outputs

    async def ship(ctx: StepContext) -> str:
        return f"shipped {ctx.outputs[0]} after {len(ctx.previous)} charges"

    async def ask(ctx: StepContext) -> dict[str, Any]:
        before = []
        for n in (1, 2):
            key = f"{ctx.workflow_id}:before-{n}"
            before.append(await ctx.call(Job(key, functools.partial(tool, side, key, n))))
        answer = await ctx.wait_for_input("approve", "ship it?", details={"calls": 2})
        return {"before": before, "answer": answer}

    order = WorkflowDef(
        "order", [StepDef("reserve", reserve), StepDef("charge", charge), StepDef("ship", ship)]
    )
    return order, WorkflowDef("approval", [StepDef("ask", ask)])


def plain_workflow(side: Path, started: asyncio.Event | None = None) -> Workflow:
    """``plain-1``: a plain workflow (tied to its process) whose step hangs once started."""

    async def hang(ctx: StepContext) -> str:
        with side.open("a") as f:
            f.write(f"plain {os.getpid()}\n")
        if started is not None:
            started.set()
            await asyncio.sleep(3600)
        return "plain done"

    return Workflow("plain-1", [StepDef("hang", hang)])


async def main(mode: str, db: Path, side: Path) -> None:
    order, approval = definitions(side)
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id=f"child:{os.getpid()}", lease_ttl=5.0)
        if mode == "crash":
            started = asyncio.Event()
            engine.run_soon(plain_workflow(side, started))
            await started.wait()
            engine.register(order)
            assert await engine.start("order", "order-1", {"n": 3})
            result = await engine.run("order-1")  # killed inside call 3 of "charge"
        else:
            assert await engine.start(approval, "approval-1")
            result = await engine.run("approval-1")
        print(result.status.value, flush=True)


if __name__ == "__main__":
    from definitions_child import main as imported_main  # by module name: see the docstring

    asyncio.run(imported_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
