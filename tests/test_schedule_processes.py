"""Schedules across processes (`schedule_child.py`, real clock): a tick survives SIGKILL (the
serving process that fired it is killed while its instance runs, and a new serving process
finishes that instance: the tick has exactly one instance, never a second one); two serving
processes on one SQLite file start each tick once and run each instance once."""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import pytest

from agentq.store import SqliteStore, WorkflowState, instance_id

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "schedule_child.py"


@asynccontextmanager
async def server(db: Path, side: Path, name: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), str(db), str(side), name,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            assert (await proc.stdout.readline()).strip() == b"serving"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def lines(side: Path) -> list[str]:
    return side.read_text().splitlines() if side.exists() else []


async def until_line(side: Path, count: int) -> None:
    """Poll the side file (bounded) until it has `count` lines: the servers are other
    processes, so there is nothing in this one to wait on."""
    async with asyncio.timeout(60):
        while True:
            if len(lines(side)) >= count:
                return
            await asyncio.sleep(0.02)


async def test_sigkill_during_a_tick_then_a_new_engine_keeps_one_instance(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "ticks.db", tmp_path / "side.txt"
    tick = time.time()  # due at once; the next one an hour later
    async with SqliteStore(db) as store:
        await store.put_schedule(
            "n", "tick", cron=None, every=3600.0, input=None, next_tick=tick, now=tick - 1
        )
    wid = instance_id("n", tick)
    async with server(db, side, "hang") as first:
        await until_line(side, 1)  # the tick fired; its instance runs (and hangs)
        first.send_signal(signal.SIGKILL)
        await first.wait()
    async with server(db, side, "second"), SqliteStore(db) as store:
        async with asyncio.timeout(60):
            while True:
                row = await store.get_workflow(wid)
                if row is not None and row.state is WorkflowState.COMPLETED:
                    break
                await asyncio.sleep(0.02)
    assert lines(side) == [f"run hang {wid}", f"run second {wid}"]
    async with SqliteStore(db) as store:
        assert [w.workflow_id for w in await store.workflows()] == [wid]
        (schedule,) = await store.schedules()
        assert (schedule.last_instance, schedule.next_tick) == (wid, tick + 3600)


async def test_two_serving_processes_start_each_tick_once_and_run_it_once(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "ticks.db", tmp_path / "side.txt"
    every = 0.25
    async with SqliteStore(db) as store:
        now = time.time()
        await store.put_schedule(
            "n", "tick", cron=None, every=every, input=None, next_tick=now + every, now=now
        )
    async with server(db, side, "a") as a, server(db, side, "b") as b:
        await until_line(side, 8)  # about two seconds of ticks
        async with SqliteStore(db) as store:  # unscheduled: no more ticks while they stop
            assert await store.delete_schedule("n")
        for proc in (a, b):
            proc.send_signal(signal.SIGTERM)
    async with SqliteStore(db) as store:
        ids = [w.workflow_id for w in await store.workflows()]
    runs = [line.split()[2] for line in lines(side)]
    assert len(runs) == len(set(runs)), "an instance ran twice"
    assert set(runs) <= set(ids) and len(ids) >= 8
    ticks = sorted(datetime.fromisoformat(i.split("@", 1)[1]).timestamp() for i in ids)
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert all(gap >= every - 1e-6 for gap in gaps), gaps  # never two instances of a tick
    assert all(abs(g / every - round(g / every)) < 1e-3 for g in gaps)  # on the grid
