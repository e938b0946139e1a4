"""recover(): leases, fencing, crashes (BH-04, BH-05) and what it reports."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentq import (
    FakeClock,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowEngine,
    recover,
)
from agentq.events import EventKind
from agentq.store import Claimed, DurableStore, Execution, SqliteStore

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).parent


async def test_live_lease_is_renewed_and_never_recovered_bh04(
    store: DurableStore, clock: FakeClock
) -> None:
    """BH-04, first half: renewal keeps a long step's lease valid; recover leaves it alone."""

    async def long(ctx: StepContext) -> str:
        await clock.sleep(5.0)
        return "long-done"

    wf = Workflow("bh04-live", [StepDef("s1", long)])
    async with Queue(clock=clock) as q1, Queue(clock=clock) as q2:
        e1 = WorkflowEngine(q1, store, worker_id="e1", lease_ttl=1.0, clock=clock)
        e2 = WorkflowEngine(q2, store, worker_id="e2", lease_ttl=1.0, clock=clock)
        e2.register_workflow(wf)
        run = asyncio.ensure_future(e1.run(wf))
        rounds = 0
        while not run.done():  # 5 s of body at 0.5 s a round, plus the store's thread hops
            rounds += 1
            assert rounds <= 40, "the step never finished"
            await clock.advance(0.5)
            report = await recover(e2)
            assert report.recovered == () and report.resumed == ()
            # The renewal may still be in the store's thread: move on only once the body and
            # the renewer sleep again (or the run ended), so time never outruns the store.
            sleeping = asyncio.ensure_future(clock.wait_for_sleepers(2))
            async with asyncio.timeout(10):
                await asyncio.wait({run, sleeping}, return_when=asyncio.FIRST_COMPLETED)
            sleeping.cancel()
        result = run.result()
    assert result.status is RunStatus.COMPLETED and result.output == "long-done"
    ks = [e.kind for e in await store.load_events("bh04-live")]
    assert EventKind.WORKER_RECOVERED not in ks
    assert ks.count(EventKind.STEP_COMPLETED) == 1


async def test_lapsed_lease_is_taken_over_and_stale_result_refused_bh04(
    store: DurableStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BH-04, second half: a stalled renewer lets the lease lapse; the stale owner loses."""
    release_e1 = asyncio.Event()
    started_e1 = asyncio.Event()

    def make(owner: str) -> Workflow:
        async def s1(ctx: StepContext) -> str:
            if owner == "e1":
                started_e1.set()
                await release_e1.wait()
            return f"s1 by {owner}"

        return Workflow("bh04-lapse", [StepDef("s1", s1)])

    stall = asyncio.Event()
    real_renew = store.renew_lease

    async def stalled_renew(execution: Execution, ttl: float, now: float) -> Execution:
        if execution.worker_id == "e1":
            await stall.wait()  # the renewer is stuck: the lease lapses
        return await real_renew(execution, ttl, now)

    monkeypatch.setattr(store, "renew_lease", stalled_renew)
    async with Queue(clock=clock) as q1, Queue(clock=clock) as q2:
        e1 = WorkflowEngine(q1, store, worker_id="e1", lease_ttl=1.0, clock=clock)
        e2 = WorkflowEngine(q2, store, worker_id="e2", lease_ttl=1.0, clock=clock)
        e2.register_workflow(make("e2"))
        run1 = asyncio.ensure_future(e1.run(make("e1")))
        async with asyncio.timeout(10):
            await started_e1.wait()
        await clock.advance(1.0)  # expires_at == now: still live at the same tick
        assert (await recover(e2)).recovered == ()
        await clock.advance(0.5)
        report = await recover(e2)
        assert [x.worker_id for x in report.recovered] == ["e1"]
        assert (await report.wait())["bh04-lapse"].output == "s1 by e2"
        release_e1.set()
        async with asyncio.timeout(10):
            result1 = await run1
    assert result1.status is RunStatus.COMPLETED and result1.output == "s1 by e2"
    events = await store.load_events("bh04-lapse")
    completed = [e for e in events if e.kind == EventKind.STEP_COMPLETED]
    assert len(completed) == 1 and completed[0].worker_id == "e2"
    assert [e.kind for e in events].count(EventKind.WORKER_RECOVERED) == 1
    assert [e.kind for e in events].count(EventKind.WORKFLOW_COMPLETED) == 1


async def test_recover_continues_after_the_recovered_step_and_reports(
    store: DurableStore, clock: FakeClock
) -> None:
    runs: Counter[str] = Counter()

    def make() -> Workflow:
        def step(name: str) -> StepDef:
            async def body(ctx: StepContext) -> str:
                runs[name] += 1
                return name

            return StepDef(name, body)

        return Workflow("rec-1", [step("a"), step("b"), step("c")])

    # A worker claimed b and died: simulate with the store verbs directly.
    await store.start_workflow("rec-1", ["a", "b", "c"], None, clock.time())
    a = await store.claim_step("rec-1", 0, "dead", 5.0, clock.time())
    assert isinstance(a, Claimed)
    await store.complete_step(a.execution, "a", clock.time())
    assert isinstance(await store.claim_step("rec-1", 1, "dead", 5.0, clock.time()), Claimed)
    await store.start_workflow("orphan", ["x"], None, clock.time())

    async with Queue(clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="new", lease_ttl=5.0, clock=clock)
        engine.register_workflow(make())
        early = await recover(engine)
        assert early.recovered == () and early.held_elsewhere == ("rec-1",)
        await clock.advance(6.0)
        report = await recover(engine)
        results = await report.wait()
    assert [e.step_name for e in report.recovered] == ["b"]
    assert report.resumed == ("rec-1",)
    assert results["rec-1"].status is RunStatus.COMPLETED
    assert results["rec-1"].outputs == ("a", "b", "c")
    assert report.unregistered == ("orphan",)
    assert runs == Counter({"b": 1, "c": 1})  # a is not re-run



def _wait_for_marks(marks: Path, wanted: int, proc: subprocess.Popen[bytes]) -> list[str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = marks.read_text().splitlines() if marks.exists() else []
        if sum(1 for line in lines if line.endswith(" b")) >= wanted:
            return lines
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"worker exited early: {err!r}")
        time.sleep(0.02)
    raise AssertionError("worker never reached step b")


@pytest.mark.slow
async def test_sigkill_mid_step_then_recover_in_a_new_process_bh05(tmp_path: Path) -> None:
    """BH-05: kill -9 while b runs; a new process recovers: b again, then c; a not re-run."""
    db, marks, n = tmp_path / "crash.db", tmp_path / "marks.txt", 5
    proc = subprocess.Popen(  # noqa: ASYNC220 - the test drives a real process on purpose
        [sys.executable, str(HERE / "crash_child.py"), str(db), str(marks), str(n)],
        stderr=subprocess.PIPE,
    )
    try:
        before = _wait_for_marks(marks, n, proc)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    sys.path.insert(0, str(HERE))
    try:
        from crash_child import workflows
    finally:
        sys.path.remove(str(HERE))

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        for wf in workflows(marks, n, hang_in_b=False):
            engine.register_workflow(wf)
        report = await recover(engine)
        results = await report.wait()
        events = await store.load_events()
    assert len(report.recovered) == n
    assert all(r.status is RunStatus.COMPLETED for r in results.values())
    assert sorted(report.resumed) == sorted(results) == [f"crash-{i}" for i in range(n)]
    after = marks.read_text().splitlines()[len(before):]
    assert sorted(after) == sorted([f"crash-{i} b" for i in range(n)]
                                   + [f"crash-{i} c" for i in range(n)])
    per_wf: dict[str, list[Any]] = {}
    for e in events:
        per_wf.setdefault(e.workflow_id, []).append(e.kind)
    for wid, ks in per_wf.items():
        assert ks.count(EventKind.WORKFLOW_COMPLETED) == 1, wid
        assert ks.count(EventKind.WORKER_RECOVERED) == 1, wid
        assert ks.count(EventKind.STEP_COMPLETED) == 3, wid
