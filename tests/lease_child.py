"""A worker process for the lease tests: an engine with the default worker id on a SQLite file.

Usage: python tests/lease_child.py MODE DB MARKS

- ``hold``: runs workflow "held" = [a, b] with ``lease_ttl=3600``; b appends "b <pid>" to
  MARKS and hangs, so that the parent can SIGKILL this process while it holds b's lease.
- ``suicide``: runs workflow "suicide" = [boom] (``RetryPolicy(max_attempts=2)``, lease 3600 s)
  whose body appends "boom <pid>" to MARKS and SIGKILLs its own process. A run that returns
  prints its `RunResult` as JSON.
- ``nap``: runs workflow "nap" = [nap] with ``lease_ttl`` from ``AGENTQ_TEST_TTL`` (seconds,
  real clock); the body appends "nap <pid>" to MARKS and sleeps an hour; if cancelled it
  appends "cancelled <pid>" and lets the cancellation through. Prints its `RunResult`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from agentq import Queue, RetryPolicy, StepContext, StepDef, Workflow, WorkflowEngine
from agentq.store.sqlite.store import SqliteStore


def _mark(marks: Path, text: str) -> None:
    with marks.open("a") as f:
        f.write(f"{text} {os.getpid()}\n")


def held_workflow(marks: Path, *, hang: bool) -> Workflow:
    """[a, b]; b hangs when `hang`."""

    async def a(ctx: StepContext) -> str:
        _mark(marks, "a")
        return "a-done"

    async def b(ctx: StepContext) -> dict[str, int]:
        _mark(marks, "b")
        if hang:
            await asyncio.sleep(3600)
        return {"recoveries": ctx.recoveries, "attempt": ctx.attempt}

    return Workflow("held", [StepDef("a", a), StepDef("b", b)])


def suicide_workflow(marks: Path) -> Workflow:
    """[boom]: a body that kills its own process, with two attempts allowed."""

    async def boom(ctx: StepContext) -> str:
        _mark(marks, f"boom attempt={ctx.attempt} recoveries={ctx.recoveries}")
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    return Workflow("suicide", [StepDef("boom", boom, retry=RetryPolicy(max_attempts=2))])


def nap_workflow(marks: Path) -> Workflow:
    """[nap]: a body that sleeps an hour and marks a cancellation."""

    async def nap(ctx: StepContext) -> str:
        _mark(marks, "nap")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            _mark(marks, "cancelled")
            raise
        return "rested"

    return Workflow("nap", [StepDef("nap", nap)])


async def main(mode: str, db: Path, marks: Path) -> None:
    ttl = 3600.0
    if mode == "nap":
        wf = nap_workflow(marks)
        ttl = float(os.environ["AGENTQ_TEST_TTL"])
    else:
        wf = held_workflow(marks, hang=True) if mode == "hold" else suicide_workflow(marks)
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=ttl)
        result = await engine.run(wf)
    print(json.dumps({"status": result.status.value, "step": result.step,
                      "reason": result.reason}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
