"""A run group across a SIGKILL: the process dies inside a member's durable call; a new
process submits the same group again (and another resumes it) and finishes it, each member
that completed before the crash having run its body exactly once
(`group_crash_child.py` is the dying process)."""

from __future__ import annotations

import signal
from pathlib import Path

import child_runs
import group_crash_child as batch
import pytest

from agentq import GroupStatus, Queue, WorkflowEngine
from agentq.store import CallState, SqliteStore, WorkflowState

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "group_crash_child.py"


@pytest.mark.parametrize("again", ["submit", "resume"])
async def test_sigkill_in_the_middle_then_the_same_group_in_a_new_process(
    tmp_path: Path, again: str
) -> None:
    db, side = tmp_path / "batch.db", tmp_path / "side.txt"
    code, out, err = await child_runs.run_child(
        CHILD, "crash", db, side, **{batch.CRASH_AT: "7"}
    )
    assert code == -signal.SIGKILL, (out, err)
    before, _ = child_runs.side_runs(side)
    async with SqliteStore(db) as store:  # what the dead process left
        rows = {r.workflow_id: r for r in await store.group_members("batch")}
        recorded = {  # members whose call's outcome is in the log: never sent again
            r.workflow_id.split("/")[1] for r in rows.values()
            if any(c.state is CallState.COMPLETED for c in await store.calls(r.workflow_id))
        }
    done_before = {w.split("/")[1] for w, r in rows.items() if r.state is WorkflowState.COMPLETED}
    assert "m07" in before and "m07" not in done_before and 0 < len(done_before) < 12
    assert before["m07"] == 1

    async with Queue(batch.lanes()) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0)
        group = engine.group("batch")
        if again == "submit":
            assert await group.submit(batch.member_def(side), batch.ITEMS) is False
        else:
            engine.register(batch.member_def(side))
            # every member not completed is continued, started or retried: all counted
            assert await group.resume() == 12 - len(done_before)
        members = {m.key: m async for m in group.results()}
        status = await group.status()
        await engine.close()

    assert status == GroupStatus(completed=12), members
    assert {k: m.output for k, m in members.items()} == {k: n * n for k, n in batch.ITEMS.items()}
    runs, pids = child_runs.side_runs(side)
    for key in batch.ITEMS:
        if key in recorded:  # completed before the crash (or its call did): never again
            assert runs[key] == 1, key
        else:  # in doubt at the crash (m07 at least) or never begun: once more, here
            assert runs[key] == before[key] + 1, key
    assert len(pids["m07"]) == 2
