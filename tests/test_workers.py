"""Worker ids and dead lease holders (issue 9 items 2 and 9).

After a crash or a kernel restart, a run must not block silently for ``lease_ttl``: a lease
held by a process of this host that no longer exists is taken back at once; a live one is
waited for, and the wait is logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lease_child import held_workflow

from agentq import (
    FakeClock,
    Queue,
    RunStatus,
    StepContext,
    StepDef,
    Workflow,
    WorkflowDef,
    WorkflowEngine,
    recover,
)
from agentq.events import EventKind
from agentq.store import (
    Claimed,
    DurableStore,
    MemoryStore,
    SqliteStore,
    StepState,
    WorkflowState,
)
from agentq.workflows.workers import (
    default_worker_id,
    gone_reason,
    held_message,
    parse_worker_id,
)

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).parent
CHILD = HERE / "lease_child.py"
HOST = socket.gethostname()


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, check=True, text=True)
    return int(proc.stdout)


# ---------------------------------------------------------------- the id format


def test_default_worker_ids_carry_host_and_pid_and_parse_back() -> None:
    first, second = default_worker_id(), default_worker_id()
    assert first != second  # one per engine, even in one process
    assert parse_worker_id(first) == (HOST, os.getpid())
    assert parse_worker_id("build:7:host:41822:9f3ac01b") == ("build:7:host", 41822)


@pytest.mark.parametrize(
    "worker_id",
    ["worker-1", "doomed", "h:123", ":123:9f3ac01b", "h:-1:9f3ac01b", "h:0:9f3ac01b",
     "h:12a:9f3ac01b", "h:123:9F3AC01B", "h:123:9f3ac01", "h:١٢٣:9f3ac01b"],
)
def test_other_ids_are_never_judged(worker_id: str) -> None:
    assert parse_worker_id(worker_id) is None
    assert gone_reason(worker_id) is None


# ---------------------------------------------------------------- is it gone?


def test_a_worker_whose_process_exited_on_this_host_is_gone() -> None:
    pid = _dead_pid()
    reason = gone_reason(f"{HOST}:{pid}:0123abcd")
    assert reason is not None and f"process {pid} no longer exists on host" in reason


def test_a_zombie_process_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 20
        while gone_reason(f"{HOST}:{proc.pid}:0123abcd") is None:  # exits, not yet reaped
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
    finally:
        proc.wait()


def test_live_local_other_host_and_own_process_workers_may_be_alive() -> None:
    assert gone_reason(f"{HOST}:{os.getpid()}:0123abcd") is None  # this process
    assert gone_reason(f"{HOST}:{os.getppid()}:0123abcd") is None  # alive
    assert gone_reason(f"another-{HOST}:{_dead_pid()}:0123abcd") is None  # not this host


def test_the_wait_message_says_who_until_when() -> None:
    message = held_message("b", "wf", "h:1:0123abcd", 1_767_225_630.0, 1_767_225_600.0)
    assert message == (
        "step 'b' of workflow 'wf' is leased by worker 'h:1:0123abcd' until "
        "2026-01-01T00:00:30+00:00 (in 30 s); waiting"
    )


# ---------------------------------------------------------------- a live holder: wait, say so


async def test_waiting_for_a_live_lease_is_logged_once_at_debug(
    store: DurableStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    release, started = asyncio.Event(), asyncio.Event()

    async def slow(ctx: StepContext) -> str:
        started.set()
        await release.wait()
        return "done"

    wf = Workflow("wf-held", [StepDef("s", slow)])
    async with Queue(clock=clock) as q1, Queue(clock=clock) as q2:
        holder = WorkflowEngine(q1, store, lease_ttl=30.0, clock=clock)  # this process: alive
        waiter = WorkflowEngine(q2, store, worker_id="waiter", lease_ttl=30.0, clock=clock)
        first = asyncio.ensure_future(holder.run(wf))
        async with asyncio.timeout(10):
            await started.wait()
        with caplog.at_level(logging.DEBUG, logger="agentq"):
            second = asyncio.ensure_future(waiter.run(wf))
            for _ in range(5):  # five polls: one message
                async with asyncio.timeout(10):
                    await clock.wait_for_sleepers(2)  # the renewer and the poll
                await clock.advance(waiter.poll_interval)
            release.set()
            async with asyncio.timeout(10), clock.autojump():
                results = [await first, await second]
    assert [r.output for r in results] == ["done", "done"]
    held = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert held == [
        f"step 's' of workflow 'wf-held' is leased by worker {holder.worker_id!r} until "
        f"2026-01-01T00:00:30+00:00 (in 30 s); waiting"
    ]
    # Review 10 #12: a healthy holder's lease is normal operation, not a WARNING.
    assert [r.levelno for r in caplog.records if "waiting" in r.getMessage()] == [logging.DEBUG]
    assert EventKind.WORKER_RECOVERED not in [e.kind for e in await store.load_events()]


# ---------------------------------------------------------------- a dead holder: take over


def _start_child(mode: str, db: Path, marks: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(db), str(marks)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _kill_while_b_runs(db: Path, marks: Path) -> int:
    """Start a `hold` child, SIGKILL it while it holds b's one-hour lease; return its pid."""
    proc = _start_child("hold", db, marks)
    try:
        deadline = time.monotonic() + 30
        while not any(line.startswith("b ") for line in _lines(marks)):
            assert proc.poll() is None, "the child exited early"
            assert time.monotonic() < deadline, "the child never reached step b"
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid


@pytest.mark.slow
async def test_a_run_takes_a_killed_processs_lease_at_once(tmp_path: Path) -> None:
    """Item 9: a SIGKILLed child held b's lease for an hour; run here does not wait it out."""
    db, marks = tmp_path / "held.db", tmp_path / "marks.txt"
    pid = _kill_while_b_runs(db, marks)
    async with Queue() as queue, SqliteStore(db) as store:
        [_, b] = await store.step_rows("held")
        assert b.state is StepState.LEASED and b.lease_expires_at > time.time() + 3000
        engine = WorkflowEngine(queue, store, lease_ttl=3600.0)
        async with asyncio.timeout(20):
            result = await engine.run(held_workflow(marks, hang=False))
        events = await store.load_events("held")
    assert result.status is RunStatus.COMPLETED
    assert result.outputs == ("a-done", {"recoveries": 1, "attempt": 1})
    [recovered] = [e for e in events if e.kind is EventKind.WORKER_RECOVERED]
    assert f"process {pid} no longer exists on host {HOST!r}" in (recovered.reason or "")
    assert parse_worker_id(recovered.data["previous_worker"]) == (HOST, pid)
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["a", "b", "b"]


@pytest.mark.slow
async def test_recover_takes_a_killed_processs_lease_at_once(tmp_path: Path) -> None:
    db, marks = tmp_path / "held.db", tmp_path / "marks.txt"
    _kill_while_b_runs(db, marks)
    async with Queue() as queue, SqliteStore(db) as store:
        engine = WorkflowEngine(queue, store, lease_ttl=3600.0)
        engine.register_workflow(held_workflow(marks, hang=False))
        async with asyncio.timeout(20):
            report = await recover(engine)
            results = await report.wait()
    assert [e.step_name for e in report.recovered] == ["b"]
    assert report.resumed == ("held",) and report.held_elsewhere == ()
    assert results["held"].status is RunStatus.COMPLETED


@pytest.mark.slow
def test_a_body_that_kills_its_process_runs_1_plus_3_times_then_fails(tmp_path: Path) -> None:
    """Item 2: RetryPolicy(max_attempts=2), a body that SIGKILLs its own process: restarting
    the program does not loop forever; after 1 + 3 recoveries the workflow fails, saying its
    attempts were lost to crashes. Each restart takes the dead one's lease at once."""
    db, marks = tmp_path / "suicide.db", tmp_path / "marks.txt"
    exits = []
    for _ in range(8):  # a bound: the loop must end well before it
        proc = subprocess.run(
            [sys.executable, str(CHILD), "suicide", str(db), str(marks)],
            capture_output=True, timeout=60,
        )
        exits.append(proc.returncode)
        if proc.returncode == 0:
            break
    assert exits == [-signal.SIGKILL] * 4 + [0], proc.stderr.decode()[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["step"] == "boom"
    assert result["reason"].startswith("step 'boom' was lost to 4 crashes (max_recoveries=3)")
    runs = [line.rsplit(" ", 1)[0] for line in marks.read_text().splitlines()]
    assert runs == [f"boom attempt=1 recoveries={n}" for n in range(4)]  # never counted


async def test_serve_lifts_a_gone_holders_fence_on_a_retried_step_at_once() -> None:
    """Review F7: a cancel revoked a lease of a process of this host that is gone now, and a
    retry made the step pending again, fenced until the lease's expiry (an hour here); a
    serving engine lifts the fence (`LeaseReleased`) and runs the step at once, as `run`
    and `recover` do, instead of waiting the hour out."""
    clock = FakeClock()
    dead = f"{HOST}:{_dead_pid()}:0123abcd"
    definition = WorkflowDef("d", [StepDef("s1", lambda ctx: "done")])
    async with Queue(clock=clock) as queue, MemoryStore() as store:
        engine = WorkflowEngine(queue, store, lease_ttl=3600.0, clock=clock)
        engine.register(definition)
        await engine.start(definition, "wf")
        now = clock.time()
        assert isinstance(await store.claim_step("wf", 0, dead, 3600.0, now), Claimed)
        assert await store.cancel_workflow("wf", "stop", now)
        await store.retry_workflow("wf", None, now)
        serving = asyncio.ensure_future(engine.serve(poll_interval=1.0))
        try:
            async with asyncio.timeout(20):
                while (await store.get_workflow("wf")).state is not WorkflowState.COMPLETED:
                    await clock.advance(1.0)
        finally:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        kinds = [e.kind for e in await store.load_events("wf")]
    assert EventKind.LEASE_RELEASED in kinds and clock.time() - now < 60
