"""Durable calls across real processes: a SIGKILL inside a call, and a wait across a restart.

The child (`calls_crash_child.py`) runs a workflow on a SQLite file; every call's body appends
a line to a side file, so the counts below are what really reached "the world".
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import calls_crash_child as child
import child_runs
import pytest

from agentq import Queue, StepStatus, WorkflowEngine, recover
from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.store import SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "calls_crash_child.py"


async def run_child(mode: str, db: Path, side: Path, **env: str) -> tuple[int, str, str]:
    return await child_runs.run_child(CHILD, mode, db, side, **env)


side_runs = child_runs.side_runs


async def test_sigkill_inside_call_5_then_recover_in_a_new_process(tmp_path: Path) -> None:
    db, side = tmp_path / "calls.db", tmp_path / "side.txt"
    code, out, err = await run_child("crash", db, side, **{child.CRASH_AT: "5"})
    assert code == -signal.SIGKILL, (out, err)
    assert side_runs(side)[0] == Counter({f"call-{n}": 1 for n in range(1, 6)})

    # What the dead process left: calls 1-4 completed, call 5 started and never finished.
    async with SqliteStore(db) as store:
        left = {row.key: row.state for row in await store.calls("calls-crash")}
    assert left == {**{f"call-{n}": "completed" for n in range(1, 5)}, "call-5": "started"}

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        engine.register_workflow(child.crash_workflow(side))
        report = await recover(engine)
        results = await report.wait()  # recover resumes the run in the background
        events = await store.load_events("calls-crash")
        rows = await store.calls("calls-crash")
        answered = engine.answered_from_log

    assert report.resumed == ("calls-crash",)
    result = results["calls-crash"]
    expected = [{"key": f"call-{n}", "square": n * n} for n in range(1, child.CALLS + 1)]
    assert result.outputs == (expected, sum(n * n for n in range(1, child.CALLS + 1)))
    assert [e.step_name for e in report.recovered] == ["calls"]

    runs, pids = side_runs(side)
    assert {key: runs[key] for key in (f"call-{n}" for n in range(1, 5))} == dict.fromkeys(
        (f"call-{n}" for n in range(1, 5)), 1
    )  # completed before the crash: never executed again
    assert runs["call-5"] == 2  # in doubt: ran once more, in the new process
    assert len(pids["call-5"]) == 2
    assert all(runs[f"call-{n}"] == 1 for n in range(6, child.CALLS + 1))
    assert answered == 4

    started: dict[str, list[Any]] = {}
    completed: Counter[str] = Counter()
    for e in events:
        if e.kind is EventKind.CALL_STARTED:
            started.setdefault(e.data["key"], []).append((e.worker_id, e.data["rerun"]))
        elif e.kind is EventKind.CALL_COMPLETED:
            completed[e.data["key"]] += 1
    assert [rerun for _, rerun in started["call-5"]] == [False, True]
    assert started["call-5"][1][0] == "rescuer"
    assert all(len(started[f"call-{n}"]) == 1 for n in range(1, child.CALLS + 1) if n != 5)
    assert not any(rerun for key, s in started.items() if key != "call-5" for _, rerun in s)
    assert completed == Counter({f"call-{n}": 1 for n in range(1, child.CALLS + 1)})
    assert [e.kind for e in events].count(EventKind.WORKER_RECOVERED) == 1
    assert {row.key: row.state for row in rows} == {
        f"call-{n}": "completed" for n in range(1, child.CALLS + 1)
    }
    assert all(row.output == expected[int(row.key[5:]) - 1] for row in rows)


async def test_a_wait_across_a_process_restart(tmp_path: Path) -> None:
    db, side = tmp_path / "wait.db", tmp_path / "side.txt"
    code, out, err = await run_child("wait", db, side)
    assert code == 0, err
    assert out.strip() == "waiting"
    child_pid = side_runs(side)[1]["before-1"]

    clock = FakeClock(start=time.time() + 1)
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="next-kernel", clock=clock)
        engine.register_workflow(child.wait_workflow(side))
        [status] = await engine.status("calls-wait")
        assert status == StepStatus.Waiting(
            "send the report?", "approve", None, {"calls": 3}
        )
        result = await engine.resume("calls-wait", "approve", {"ok": True}, key="approve")
        answered = engine.answered_from_log
        events = await store.load_events("calls-wait")

    assert result.output == {
        "before": [{"key": f"before-{n}", "square": n * n} for n in range(1, 4)],
        "answer": {"ok": True},
        "after": {"key": "after", "square": 10_000},
    }
    runs, pids = side_runs(side)
    assert runs == Counter({"before-1": 1, "before-2": 1, "before-3": 1, "after": 1})
    assert pids["before-3"] == child_pid and pids["after"] == {str(os.getpid())}
    assert answered == 4  # three calls and the wait, answered from the log
    kinds = [e.kind for e in events]
    assert kinds.count(EventKind.CALL_STARTED) == 4
    assert kinds.count(EventKind.CALL_COMPLETED) == 4
