"""A fork SIGKILLed in its live part, then recovered in another process (SQLite file)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import child_runs
import fork_crash_child as child
import pytest

from agentq import Queue, WorkflowEngine, recover
from agentq.clock import FakeClock
from agentq.store import SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "fork_crash_child.py"


async def test_sigkill_in_the_forks_live_part_then_recover(tmp_path: Path) -> None:
    db, side = tmp_path / "fork.db", tmp_path / "side.txt"
    code, out, err = await child_runs.run_child(CHILD, "parent", db, side)
    assert (code, out.strip()) == (0, "completed"), err
    code, out, err = await child_runs.run_child(
        CHILD, "fork", db, side, **{child.CRASH_AT: "5"}
    )
    assert code == -signal.SIGKILL, (out, err)
    async with SqliteStore(db) as store:
        left = {row.key: row.state for row in await store.calls("f")}
        parent_events = len(await store.load_events("p"))
    assert left == {"call-1": "completed", "call-2": "completed", "call-3": "completed",
                    "call-4": "completed", "call-5": "started"}

    clock = FakeClock(start=time.time() + 60)  # past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        engine.register(child.definition(side))
        report = await recover(engine)
        results = await report.wait()
        parent = await engine.run("p")
        assert len(await store.load_events("p")) == parent_events  # never changed

    assert report.resumed == ("f",)
    squares = [n * n for n in range(1, child.CALLS + 1)]
    assert results["f"].outputs[1] == sum(squares) - 4 + 100
    assert results["f"].outputs[0][1] == child.REPLACED
    assert parent.outputs[1] == sum(squares)
    runs, pids = child_runs.side_runs(side)
    # The parent ran each call once; the fork re-ran call-3 on (call-5 twice: in doubt).
    assert runs == {"call-1": 1, "call-2": 1, "call-3": 2, "call-4": 2, "call-5": 3,
                    "call-6": 2}
    assert len(pids["call-5"]) == 3
