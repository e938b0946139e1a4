"""BH-03 / BH-08, engine side: 2 processes x 2 engines on one SQLite file, read meanwhile."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from agentq import SqliteStore
from agentq.events import EventKind
from agentq.frames import events_frame

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

WORKER = Path(__file__).with_name("engine_race_worker.py")
N = 100


async def test_two_processes_of_two_engines_run_each_step_once_while_read(
    tmp_path: Path,
) -> None:
    db, marks = tmp_path / "race.db", tmp_path / "marks.txt"
    async with SqliteStore(db) as first:
        await events_frame(first)  # create the file, and import pandas before the race
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), str(db), str(marks), name, str(N),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for name in ("p1", "p2")
    ]
    for proc in procs:  # both processes have opened the file: start them together
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            assert (await proc.stdout.readline()).strip() == b"ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    reads = 0
    async with SqliteStore(db) as reader:
        waiting = [asyncio.ensure_future(p.communicate()) for p in procs]
        while not all(w.done() for w in waiting):  # a DataFrame every 10 ms meanwhile
            frame = await events_frame(reader)
            assert frame["seq"].is_monotonic_increasing and frame["seq"].is_unique
            reads += 1
            if reads == 2:  # race-0 stays open until now: the reads overlapped the writers
                await asyncio.to_thread(Path(f"{marks}.read").touch)
            await asyncio.wait(waiting, timeout=0.01)
        for proc, w in zip(procs, waiting, strict=True):
            _, err = w.result()
            assert proc.returncode == 0, err.decode()[-2000:]
            assert b"locked" not in err

        lines = [line.split() for line in marks.read_text().splitlines()]
        runs = Counter((wid, step) for wid, step, _ in lines)
        assert len(runs) == N * 3 and set(runs.values()) == {1}  # every body ran exactly once
        # Both processes ran every workflow to completion (each run() returned completed, so
        # each saw every step claimed, by itself or by the other); which process wins the
        # bodies is the scheduler's choice: on a loaded machine one may win them all.
        assert {who for _, _, who in lines} <= {"p1", "p2"}

        events = await reader.load_events()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        per_wf = Counter((e.workflow_id, e.kind) for e in events)
        for i in range(N):
            assert per_wf[(f"race-{i}", EventKind.WORKFLOW_COMPLETED)] == 1
            assert per_wf[(f"race-{i}", EventKind.STEP_COMPLETED)] == 3
        live = await reader.step_rows()
        await reader.rebuild_projection()
        rebuilt = await reader.step_rows()
        assert [replace(r, lease_expires_at=None) for r in rebuilt] == [
            replace(r, lease_expires_at=None) for r in live
        ]
    assert reads >= 2
