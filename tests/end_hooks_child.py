"""A process that dies between a workflow's end and its end-of-run hook, for
`test_end_hooks_processes.py`.

Usage: python tests/end_hooks_child.py DB SIDE

Runs ``ending-1`` (definition ``ending``, one step) on an engine over the SQLite file DB,
whose store kills the process (SIGKILL) as soon as the engine claims an outbox row to
deliver: the end has committed, no hook ran. The hook (and the step) append a line to the
SIDE file.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from agentq import (
    LaneConfig,
    Priority,
    Queue,
    RunResult,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.store import HookRow, SqliteStore


class DiesBeforeDelivering(SqliteStore):
    """A store whose first `claim_hooks` kills the process (a crash right after the end)."""

    async def claim_hooks(
        self,
        worker_id: str,
        now: float,
        lease_ttl: float,
        *,
        definitions: Sequence[str] = (),
        plain: bool = False,
        workflow_id: str | None = None,
        limit: int = 16,
    ) -> list[HookRow]:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def definition(side: Path) -> WorkflowDef:
    """``ending``: one step that notes it ran; its hook notes the end it is told about."""

    def step(ctx: StepContext) -> str:
        with side.open("a") as f:
            f.write("ran\n")
        return "done"

    def on_end(result: RunResult) -> None:
        with side.open("a") as f:
            f.write(f"hook {result.workflow_id} {result.status}\n")

    return WorkflowDef("ending", [StepDef("s", step)], on_end=on_end)


async def main(db: str, side: Path) -> None:
    lanes = {Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}
    async with Queue(lanes) as queue, DiesBeforeDelivering(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="doomed", lease_ttl=5.0)
        engine.register(definition(side))
        await engine.run(definition(side).workflow("ending-1"))
        await asyncio.Event().wait()  # the delivery task kills the process


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
