"""An end-of-run hook survives SIGKILL: the process that ended the workflow dies right after
the end committed, before delivering its hook (`end_hooks_child.py`); another engine on the
same SQLite file delivers it, once, with the final result."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import end_hooks_child as child
import pytest

from agentq import Queue, RunStatus, WorkflowEngine
from agentq.store import SqliteStore, WorkflowState

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "end_hooks_child.py"


async def test_a_hook_is_delivered_by_another_engine_after_the_ender_was_killed(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "store.db", tmp_path / "side.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(side),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        _, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    assert side.read_text() == "ran\n"  # it ended; its hook never ran
    async with SqliteStore(db) as store:
        row = await store.get_workflow("ending-1")
        assert row is not None and row.state is WorkflowState.COMPLETED
        [hook] = await store.hooks("ending-1")
        assert (hook.delivered, hook.attempts) == (False, 0)
        async with Queue() as queue, WorkflowEngine(queue, store, worker_id="heir") as engine:
            engine.register(child.definition(side))
            assert (await engine.run("ending-1")).status is RunStatus.COMPLETED
        [hook] = await store.hooks("ending-1")
        assert hook.delivered and (hook.attempts, hook.worker_id) == (1, "heir")
    assert side.read_text() == f"ran\nhook ending-1 {RunStatus.COMPLETED}\n"
