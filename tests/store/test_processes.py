"""BH-03 / BH-08, store side: two processes race to claim the same steps on one SQLite file.

Each process has two connections with four racing tasks each (so every workflow is raced by
four connections in two processes), while this process reads the log every 10 ms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agentq.store import SqliteStore
from agentq.store.rules.projection import replay

pytestmark = [pytest.mark.timeout(120)]

WORKER = Path(__file__).with_name("race_worker.py")
ROUNDS = 200


async def test_two_processes_never_claim_a_step_twice(db_path: Path) -> None:
    async with SqliteStore(db_path):
        pass  # create the file once, so both racers only open it
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), str(db_path), name, str(ROUNDS),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for name in ("p1", "p2")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                assert (await proc.stdout.readline()).strip() == b"ready"
        start_at = f"{time.time() + 0.2}\n".encode()  # both start racing at this instant
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(start_at)
            await proc.stdin.drain()

        async with SqliteStore(db_path) as reader:
            seen, after = 0, 0
            waiting = [asyncio.ensure_future(p.communicate()) for p in procs]
            while not all(w.done() for w in waiting):
                rows = await reader.event_rows(after_seq=after)
                assert [r[0] for r in rows] == list(range(after + 1, after + 1 + len(rows)))
                after, seen = after + len(rows), seen + 1
                await asyncio.wait(waiting, timeout=0.01)
            outputs = [await w for w in waiting]
            for proc, (_, err) in zip(procs, outputs, strict=True):
                assert proc.returncode == 0, err.decode()
                assert b"locked" not in err

            reports = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
            assert sum(r["lost"] for r in reports) > 0, "no claim ever met a rival: no race"
            won = [tuple(c) for r in reports for c in r["won"]]
            steps = Counter((wid, index) for wid, index, _ in won)
            assert len(steps) == ROUNDS * 3 and set(steps.values()) == {1}
            assert {token for _, _, token in won} == {1}

            events = await reader.load_events()
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            assert len(events) == ROUNDS * 8
            per_kind = Counter((e.workflow_id, str(e.kind)) for e in events)
            for r in range(ROUNDS):
                assert [per_kind[(f"wf-{r}", k)] for k in (
                    "WorkflowStarted", "StepStarted", "StepCompleted", "WorkflowCompleted",
                )] == [1, 3, 3, 1]
            replayed = replay(events)
            assert [rows.workflow for _, rows in replayed] == await reader.workflows()
            assert [s for _, rows in replayed for _, s in sorted(rows.steps.items())] == (
                await reader.step_rows()
            )
            assert seen > 1
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
