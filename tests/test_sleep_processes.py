"""A durable sleep survives SIGKILL: the process that recorded it is killed while the step
sleeps (its timer dies with it), and the serving processes started after it wake the step
once, at the stored time, on the real clock (`sleep_child.py`)."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import sleep_child as child

from agentq import Queue, WorkflowEngine
from agentq.events import EventKind
from agentq.store import SqliteStore, StepState, WorkflowState

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "sleep_child.py"


@asynccontextmanager
async def servers(
    db: Path, side: Path, *names: str
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(CHILD), str(db), str(side), name,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for name in names
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                assert (await proc.stdout.readline()).strip() == b"serving"
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def until_state(db: Path, state: StepState) -> None:
    """Poll the file (bounded) until the step of ``nap-1`` is in `state`: the servers are
    other processes, so there is nothing in this one to wait on."""
    async with SqliteStore(db) as store, asyncio.timeout(60):
        while True:
            rows = await store.step_rows("nap-1")
            if rows and rows[0].state is state:
                return
            await asyncio.sleep(0.02)


def lines(side: Path) -> list[tuple[str, str, float]]:
    split = (line.split() for line in side.read_text().splitlines())
    return [(w, n, float(t)) for w, n, t in split]


async def test_a_sleep_survives_sigkill_and_wakes_once_in_another_process(tmp_path: Path) -> None:
    db, side = tmp_path / "naps.db", tmp_path / "side.txt"
    wake = time.time() + 3.0
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="starter")
        assert await engine.start(child.definition(side, "starter"), "nap-1", {"wake": wake})
    async with servers(db, side, "first") as [first]:
        await until_state(db, StepState.WAITING)
        first.send_signal(signal.SIGKILL)
        await first.wait()
    assert [(w, n) for w, n, _ in lines(side)] == [("run", "first")]
    async with servers(db, side, "second", "third"):
        await until_state(db, StepState.COMPLETED)
    seen = lines(side)
    woke = [(n, t) for w, n, t in seen if w == "woke"]
    assert len(woke) == 1 and woke[0][1] >= wake  # once, never before the stored time
    assert [w for w, _, _ in seen] == ["run", "run", "woke"]
    async with SqliteStore(db) as store:
        row = await store.get_workflow("nap-1")
        assert row is not None and row.state is WorkflowState.COMPLETED
        kinds = [e.kind for e in await store.load_events("nap-1")]
        assert kinds.count(EventKind.WAIT_TIMED_OUT) == 1
        assert kinds.count(EventKind.STEP_WAITING) == 1
