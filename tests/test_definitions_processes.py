"""Definitions across real processes: an instance started in one process is continued by id in
another that registered the same `WorkflowDef`; a plain workflow stays with its process.

The child (`definitions_child.py`) runs on a SQLite file; every durable call's body appends a
line to a side file, so the counts below are what really reached "the world".
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import child_runs
import definitions_child as child
import pytest

from agentq import Queue, RunResult, RunStatus, StepStatus, WorkflowEngine, recover
from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.store import SqliteStore

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "definitions_child.py"


async def run_child(mode: str, db: Path, side: Path, **env: str) -> tuple[int, str, str]:
    return await child_runs.run_child(CHILD, mode, db, side, **env)


side_runs = child_runs.side_runs


async def test_sigkill_inside_a_call_then_recover_by_definition_in_a_new_process(
    tmp_path: Path,
) -> None:
    db, side = tmp_path / "defs.db", tmp_path / "side.txt"
    code, out, err = await run_child("crash", db, side, **{child.CRASH_AT: "order-1:charge-3"})
    assert code == -signal.SIGKILL, (out, err)
    keys = [f"order-1:charge-{n}" for n in range(1, child.CALLS + 1)]
    assert side_runs(side)[0] == Counter({"plain": 1, **dict.fromkeys(keys[:3], 1)})

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s leases
    order, approval = child.definitions(side)
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        stored = await store.get_workflow("order-1")
        assert stored is not None and stored.definition == "order"
        plain = await store.get_workflow("plain-1")
        assert plain is not None and plain.definition is None

        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        engine.register(approval)
        engine.register(order)  # the same definition, built again in this process
        report = await recover(engine)
        results = await report.wait()
        events = await store.load_events("order-1")
        plain_status = await engine.status("plain-1")
        answered = engine.answered_from_log

    # The instance runs here by its definition; the plain workflow is tied to its dead
    # process: reported, its lease taken back, and not run.
    assert report.resumed == ("order-1",) and report.unregistered == ("plain-1",)
    assert {e.workflow_id for e in report.recovered} == {"order-1", "plain-1"}
    assert plain_status == [StepStatus.Pending()]
    result = results["order-1"]
    assert result.status is RunStatus.COMPLETED
    charges = [{"key": key, "n": n} for n, key in enumerate(keys, 1)]
    assert result.outputs == (3, charges, "shipped 3 after 5 charges")

    runs, pids = side_runs(side)
    assert runs == Counter(
        {"plain": 1, keys[0]: 1, keys[1]: 1, keys[2]: 2, keys[3]: 1, keys[4]: 1}
    )  # completed calls never ran again; the one in doubt ran once more, here
    assert pids[keys[2]] >= {str(os.getpid())} and len(pids[keys[2]]) == 2
    assert answered == 2
    kinds = [e.kind for e in events]
    assert kinds.count(EventKind.WORKFLOW_STARTED) == 1
    assert events[0].data["definition"] == "order"
    assert kinds.count(EventKind.WORKER_RECOVERED) == 1
    assert kinds.count(EventKind.CALL_COMPLETED) == child.CALLS


async def test_a_waiting_instance_is_resumed_by_id_in_a_new_process(tmp_path: Path) -> None:
    db, side = tmp_path / "wait.db", tmp_path / "side.txt"
    code, out, err = await run_child("wait", db, side)
    assert code == 0, err
    assert out.strip() == "waiting"

    clock = FakeClock(start=time.time() + 1)
    _, approval = child.definitions(side)
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="next-kernel", clock=clock)
        engine.register(approval)
        [status] = await engine.status("approval-1")
        assert status == StepStatus.Waiting("ship it?", "approve", None, {"calls": 2})
        result = await engine.resume("approval-1", "ask", {"ok": True}, key="approve")
        assert isinstance(result, RunResult)
        again = await engine.run("approval-1")  # ended: its stored result

    before = [{"key": f"approval-1:before-{n}", "n": n} for n in (1, 2)]
    assert result.output == {"before": before, "answer": {"ok": True}}
    assert again == result
    runs, _ = side_runs(side)
    assert runs == Counter({"approval-1:before-1": 1, "approval-1:before-2": 1})
