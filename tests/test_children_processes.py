"""Child runs across a SIGKILL: the process dies inside the child's durable call; `recover`
in another process (this one) finishes child and parent, each completed call's body having
run once (`children_crash_child.py` is the dying process)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import child_runs
import children_crash_child as family
import pytest

from agentq import Queue, RunStatus, WorkflowEngine, recover
from agentq.clock import FakeClock
from agentq.events import EventKind
from agentq.store import SqliteStore, StepState, WorkflowState

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "children_crash_child.py"


async def test_sigkill_inside_the_child_then_recover_finishes_both(tmp_path: Path) -> None:
    db, side = tmp_path / "family.db", tmp_path / "side.txt"
    code, out, err = await child_runs.run_child(
        CHILD, "crash", db, side, **{family.CRASH_AT: "2"}
    )
    assert code == -signal.SIGKILL, (out, err)
    assert child_runs.side_runs(side)[0] == Counter({"before": 1, "kid-1": 1, "kid-2": 1})

    async with SqliteStore(db) as store:  # what the dead process left
        parent_step = (await store.step_rows("family"))[0]
        kid = await store.get_workflow("family/kid")
    assert parent_step.state is StepState.WAITING and parent_step.wait_key == "child:kid"
    assert parent_step.lease_expires_at is None  # the parent held no lease while it waited
    assert kid is not None and kid.state is WorkflowState.RUNNING

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        engine.register(family.parent_def(side))
        engine.register(family.child_def(side))
        report = await recover(engine)
        results = await report.wait()
        parent = await engine.run("family")
        events = await store.load_events()

    assert set(report.resumed) == {"family", "family/kid"}
    assert results["family/kid"].status is RunStatus.COMPLETED
    assert parent.status is RunStatus.COMPLETED
    assert parent.outputs == ({"before": 4, "kid": 1 + 4 + 9 + 100, "after": 9},)
    runs, pids = child_runs.side_runs(side)
    # each call that completed before the crash ran once; kid-2 was in doubt and ran again
    assert runs == Counter({"before": 1, "kid-1": 1, "kid-2": 2, "kid-3": 1, "after": 1})
    assert len(pids["kid-2"]) == 2
    assert sum(1 for e in events if e.kind is EventKind.CHILD_STARTED) == 1
    assert sum(1 for e in events if e.kind is EventKind.WORKFLOW_STARTED) == 2
