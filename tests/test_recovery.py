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
from crash_child import open_store, workflows

from agentq import (
    Backoff,
    FakeClock,
    InputTimeout,
    Queue,
    RetryPolicy,
    RunStatus,
    StepContext,
    StepDef,
    StepStatus,
    Workflow,
    WorkflowEngine,
    recover,
)
from agentq.events import EventKind
from agentq.store import Claimed, DurableStore, Execution

pytestmark = pytest.mark.timeout(120)

# The tests that take a `store` run on PostgreSQL too: leases, fencing and recovery are where
# a store's transactions matter most.
ALL_STORES = pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"], indirect=True)

HERE = Path(__file__).parent


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


@ALL_STORES
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
        async with asyncio.timeout(10):  # claimed: a live lease (before, there is none)
            await clock.wait_for_sleepers(2)  # the body and its lease renewer
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


@ALL_STORES
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


@ALL_STORES
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



# ---------------------------------------------------------------- stored retry times (item 1)


@ALL_STORES
async def test_every_engine_and_recover_honour_a_stored_retry_time(
    store: DurableStore, clock: FakeClock
) -> None:
    """Issue 9 item 1: after a crash during a 30 s backoff, neither a second engine's run nor
    recover re-attempts the step before its stored retry time; exactly one does at it."""
    attempts: list[tuple[str, float]] = []

    def make(owner: str) -> Workflow:
        async def flaky(ctx: StepContext) -> str:
            attempts.append((owner, clock.time()))
            return f"done by {owner}"

        return Workflow("wf-backoff", [StepDef("s", flaky, retry=RetryPolicy(3,
                                                                         Backoff.fixed(30.0)))])

    # The first engine's attempt failed, it scheduled the retry for t0 + 30, then it crashed.
    t0 = clock.time()
    await store.start_workflow("wf-backoff", ["s"], None, t0)
    first = await store.claim_step("wf-backoff", 0, "crashed", 5.0, t0)
    assert isinstance(first, Claimed)
    await store.fail_step(first.execution, "error", None, t0, t0 + 30.0)

    async with Queue(clock=clock) as q2, Queue(clock=clock) as q3:
        other = WorkflowEngine(q2, store, worker_id="other", lease_ttl=5.0, clock=clock)
        rescuer = WorkflowEngine(q3, store, worker_id="rescuer", lease_ttl=5.0, clock=clock)
        rescuer.register_workflow(make("rescuer"))
        run = asyncio.ensure_future(other.run(make("other")))
        async with asyncio.timeout(5):
            report = await recover(rescuer)  # returns at once: it never waits out a backoff
            assert report.resumed == ("wf-backoff",)
            await clock.wait_for_sleepers(2)  # both runs sleep until the stored time
        await clock.advance(29.9)
        assert attempts == []
        assert await kinds(store, "wf-backoff") == [
            "WorkflowStarted", "StepStarted", "StepFailed", "RetryScheduled"]
        await clock.advance(0.1)
        async with asyncio.timeout(10), clock.autojump():
            results = [await run, (await report.wait())["wf-backoff"]]
    assert len(attempts) == 1 and attempts[0][1] == t0 + 30.0
    assert results[0] == results[1] and results[0].output == f"done by {attempts[0][0]}"
    started = [e for e in await store.load_events("wf-backoff") if e.kind == "StepStarted"]
    assert [(e.attempt, e.timestamp) for e in started] == [(1, t0), (2, t0 + 30.0)]


# ---------------------------------------------------------------- the crash budget (item 2)


async def _lose_attempts(store: DurableStore, clock: FakeClock, wid: str, n: int) -> None:
    """`n` attempts of step 0 die with their process: claimed, then their lease runs out."""
    for _ in range(n):
        claim = await store.claim_step(wid, 0, "doomed", 1.0, clock.time())
        assert isinstance(claim, Claimed)
        await clock.advance(2.0)


@ALL_STORES
async def test_lost_attempts_are_readmitted_and_failed_ones_still_count(
    store: DurableStore, clock: FakeClock
) -> None:
    seen: list[tuple[int, int]] = []

    async def flaky(ctx: StepContext) -> str:
        seen.append((ctx.attempt, ctx.recoveries))
        raise ValueError(f"attempt {ctx.attempt} failed")

    wf = Workflow("wf-lost", [StepDef("s", flaky, retry=RetryPolicy(max_attempts=2))])
    await store.start_workflow(wf.id, wf.step_names, None, clock.time())
    await _lose_attempts(store, clock, wf.id, 3)  # within the default budget of 3
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="w", clock=clock)
        async with clock.autojump():
            result = await engine.run(wf)
    assert seen == [(1, 3), (2, 3)]  # the lost attempts were not counted as attempts
    assert result.status is RunStatus.FAILED and "attempt 2 failed" in (result.reason or "")
    assert (await engine.status(wf.id)) == [StepStatus.Failed(result.reason or "", 2)]
    ks = await kinds(store, wf.id)
    assert ks.count("WorkerRecovered") == 3 and ks.count("StepFailed") == 2


@ALL_STORES
async def test_past_max_recoveries_the_workflow_fails_saying_why(
    store: DurableStore, clock: FakeClock
) -> None:
    ran: list[int] = []

    async def body(ctx: StepContext) -> int:
        ran.append(ctx.attempt)
        return 1

    for wid, limit, lost in (("wf-default", 3, 4), ("wf-none", 0, 1)):
        wf = Workflow(wid, [StepDef("s", body, retry=RetryPolicy(5), max_recoveries=limit)])
        await store.start_workflow(wid, wf.step_names, None, clock.time())
        await _lose_attempts(store, clock, wid, lost)
        async with Queue(clock=clock) as queue:
            result = await WorkflowEngine(queue, store, worker_id="w", clock=clock).run(wf)
        crashes = "crash" if lost == 1 else "crashes"
        assert result.status is RunStatus.FAILED and result.step == "s"
        assert (result.reason or "").startswith(
            f"step 's' was lost to {lost} {crashes} (max_recoveries={limit})")
        assert (await kinds(store, wid))[-3:] == [
            "WorkerRecovered", "StepFailed", "WorkflowFailed"]
    assert ran == []  # never run past the budget


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), (1.0, TypeError),
                                              (True, TypeError), (None, TypeError)])
def test_max_recoveries_is_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"step 's': max_recoveries"):
        StepDef("s", lambda ctx: 1, max_recoveries=value)  # type: ignore[arg-type]


# ---------------------------------------------------------------- recover never blocks (item 7)


@ALL_STORES
async def test_recover_on_the_engine_running_the_workflow_returns_at_once(
    store: DurableStore, clock: FakeClock
) -> None:
    """Issue 9 item 7: the step waits for what the caller does after recover returns."""
    started, gate = asyncio.Event(), asyncio.Event()

    async def waits(ctx: StepContext) -> str:
        started.set()
        await gate.wait()
        return "through"

    wf = Workflow("wf-self", [StepDef("s", waits)])
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="self", lease_ttl=5.0, clock=clock)
        run = asyncio.ensure_future(engine.run(wf))
        async with asyncio.timeout(10):
            await started.wait()
        async with asyncio.timeout(5):
            report = await recover(engine)
        assert report.resumed == ("wf-self",) and report.held_elsewhere == ()
        assert report.recovered == () and not run.done()
        gate.set()  # what the caller does once recover has returned
        async with asyncio.timeout(10):
            results = await report.wait()
            assert (await run).output == results["wf-self"].output == "through"
    assert (await kinds(store, "wf-self")).count("StepStarted") == 1


@ALL_STORES
async def test_recover_does_not_wait_for_the_runs_it_starts(
    store: DurableStore, clock: FakeClock
) -> None:
    gate = asyncio.Event()

    async def waits(ctx: StepContext) -> str:
        await gate.wait()
        return "later"

    wf = Workflow("wf-later", [StepDef("s", waits)])
    await store.start_workflow(wf.id, wf.step_names, None, clock.time())
    await _lose_attempts(store, clock, wf.id, 1)  # a crashed worker left it leased
    async with Queue(clock=clock) as queue:
        engine = WorkflowEngine(queue, store, worker_id="new", lease_ttl=5.0, clock=clock)
        engine.register_workflow(wf)
        async with asyncio.timeout(5):
            report = await recover(engine)
        assert report.resumed == ("wf-later",) and len(report.recovered) == 1
        assert engine.running("wf-later")
        gate.set()
        async with asyncio.timeout(10):
            result = (await report.wait())["wf-later"]
    assert result.status is RunStatus.COMPLETED and result.output == "later"


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
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_sigkill_mid_step_then_recover_in_a_new_process_bh05(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """BH-05: kill -9 while b runs; a new process recovers: b again, then c; a not re-run."""
    db, marks, n = str(tmp_path / "crash.db"), tmp_path / "marks.txt", 5
    schema: list[str] = []
    if kind == "postgres":
        target = request.getfixturevalue("pg_target")
        db, schema = target.dsn, [target.schema]
    proc = subprocess.Popen(  # noqa: ASYNC220 - the test drives a real process on purpose
        [sys.executable, str(HERE / "crash_child.py"), db, str(marks), str(n), *schema],
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

    clock = FakeClock(start=time.time() + 60)  # well past the dead worker's 5 s lease
    async with Queue(clock=clock) as queue, open_store(db, *schema) as store:
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


# ---------------------------------------------------------------- review 10: wait deadlines


def _approval(log: list[str]) -> Workflow:
    async def approve(ctx: StepContext) -> str:
        try:
            answer = await ctx.wait_for_input("ok", "approve?", timeout=60)
        except InputTimeout:
            log.append("timed out")
            return "default path"
        return f"approved {answer}"

    return Workflow("wf-deadline", [StepDef("approve", approve)])


async def test_recover_times_out_a_wait_whose_deadline_passed_while_nobody_ran(
    store: DurableStore, clock: FakeClock
) -> None:
    # Review 10 #1: recover left the step waiting with its deadline in the past; only run()
    # or serve() timed it out, although the docs said recover does.
    log: list[str] = []
    async with Queue(clock=clock) as q:
        first = WorkflowEngine(q, store, worker_id="first", clock=clock)
        assert (await first.run(_approval(log))).status is RunStatus.WAITING
        await first.close()  # the process ends: no timer any more
    await clock.advance(120)
    async with Queue(clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="second", clock=clock)
        engine.register_workflow(_approval(log))
        report = await recover(engine)
        assert report.resumed == ("wf-deadline",)
        async with asyncio.timeout(10):
            results = await report.wait()
        await engine.close()
    assert results["wf-deadline"].output == "default path" and log == ["timed out"]
    assert (await kinds(store, "wf-deadline")).count("WaitTimedOut") == 1


async def test_recover_arms_the_timer_of_a_wait_still_pending(
    store: DurableStore, clock: FakeClock
) -> None:
    # Review 10 #1 (t28): a restart before the deadline, then register + recover without
    # serve(): the wait stayed open forever.
    log: list[str] = []
    async with Queue(clock=clock) as q:
        first = WorkflowEngine(q, store, worker_id="first", clock=clock)
        assert (await first.run(_approval(log))).status is RunStatus.WAITING
        await first.close()
    await clock.advance(30)  # a restart, half-way to the deadline
    async with Queue(clock=clock) as q:
        engine = WorkflowEngine(q, store, worker_id="second", clock=clock)
        engine.register_workflow(_approval(log))
        report = await recover(engine)
        async with asyncio.timeout(10):
            results = await report.wait()
        assert results["wf-deadline"].status is RunStatus.WAITING and log == []
        await clock.advance(31)  # past the deadline: the armed timer continues the step
        done = StepStatus.Completed("default path")
        for _ in range(200):
            if (await engine.status("wf-deadline"))[0] == done:
                break
            await asyncio.sleep(0)
        assert (await engine.status("wf-deadline"))[0] == done
        await engine.close()
    assert log == ["timed out"]
