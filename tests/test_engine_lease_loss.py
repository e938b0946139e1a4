"""A cancel from elsewhere, or a lease lost to another engine, stops the running body.

The lease keeper renews every ``lease_ttl / 3`` seconds; the renewal that finds the lease gone
(the workflow cancelled by another engine or the command line, or the step taken over after
its lease expired) cancels the attempt's job, so a body that sleeps or polls gets
`asyncio.CancelledError` within one renewal, and nothing it returns is recorded. Two engines
share one SQLite file (each with its own store), on fake clocks; one test uses a real process
and the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from queue_helpers import until

from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.queue import Queue
from agentq.store import DurableStore, SqliteStore
from agentq.workflows import RunResult, RunStatus, StepContext, StepDef, Workflow, WorkflowEngine

pytestmark = pytest.mark.timeout(60)

BOUND = 5.0
"""Real seconds any wait of these tests may take (the fake clocks never move on their own)."""
TTL = 30.0
RENEWAL = TTL / 3
CHILD = Path(__file__).parent / "lease_child.py"


async def kinds(store: DurableStore, workflow_id: str) -> list[str]:
    return [str(e.kind) for e in await store.load_events(workflow_id)]


class Sleeper:
    """A step body that waits on an event until cancelled, noting what happened to it."""

    def __init__(self, output: str = "a") -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.seen: list[str] = []
        self.output = output

    async def __call__(self, ctx: StepContext) -> str:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.seen.append("cancelled")
            raise
        self.seen.append("returned")
        return self.output


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "shared.db"


@pytest.fixture
async def stores(db: Path) -> AsyncIterator[tuple[SqliteStore, SqliteStore]]:
    """Two stores on one SQLite file, as two processes would have."""
    async with SqliteStore(db) as sa, SqliteStore(db) as sb:
        yield sa, sb


def engine_on(queue: Queue, store: DurableStore, name: str, clock: FakeClock) -> WorkflowEngine:
    return WorkflowEngine(queue, store, worker_id=name, lease_ttl=TTL, clock=clock)


async def running(
    engine: WorkflowEngine, wf: Workflow, body: Sleeper, clock: FakeClock
) -> asyncio.Future[RunResult]:
    """Start `engine`'s run of `wf`; return it once `body` runs and its lease is renewed."""
    run = asyncio.ensure_future(engine.run(wf))
    async with asyncio.timeout(BOUND):
        await body.started.wait()
        await clock.wait_for_sleepers(1)  # the lease renewer
    return run


@contextlib.asynccontextmanager
async def napping(
    store: DurableStore, clock: FakeClock, workflow_id: str
) -> AsyncIterator[tuple[WorkflowEngine, Sleeper, asyncio.Future[RunResult]]]:
    """Engine "a" on its own queue, running a one-step workflow whose body sleeps."""
    body = Sleeper()
    async with Queue(clock=clock) as queue:
        a = engine_on(queue, store, "a", clock)
        yield a, body, await running(a, Workflow(workflow_id, [StepDef("nap", body)]), body, clock)


async def test_a_cancel_from_another_engine_stops_the_body_within_a_renewal(
    stores: tuple[SqliteStore, SqliteStore], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    body = Sleeper()
    wf = Workflow("wf-remote", [StepDef("nap", body)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a, b = engine_on(qa, stores[0], "a", clock), engine_on(qb, stores[1], "b", clock)
        run_a = await running(a, wf, body, clock)
        assert await b.cancel(wf.id, "stopped by b")
        await asyncio.sleep(0)
        assert body.seen == []  # not before a's next renewal
        with caplog.at_level(logging.INFO, logger="agentq"):
            await clock.advance(RENEWAL)
            async with asyncio.timeout(BOUND):
                result = await run_a
        assert body.seen == ["cancelled"]
        assert result.status is RunStatus.CANCELLED and result.reason == "stopped by b"
        assert a.tables()["attempts"] == 0 and clock.sleepers == 0
    # once the body stopped, a handed its revoked lease back: the step is fenced no more
    assert await kinds(stores[0], wf.id) == [
        "WorkflowStarted", "StepStarted", "WorkflowCancelled", "LeaseReleased"]
    assert (await stores[0].step_rows(wf.id))[0].lease_expires_at is None
    assert any(
        ": the workflow was cancelled (lease #1 of worker 'a' was revoked" in r.message
        and r.levelno == logging.INFO
        for r in caplog.records
    )


async def test_a_cancel_from_the_command_line_stops_the_body(
    db: Path, stores: tuple[SqliteStore, SqliteStore], clock: FakeClock
) -> None:
    async with napping(stores[0], clock, "wf-cli") as (_, body, run_a):
        done = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            ["cancel", str(db), "wf-cli", "--reason", "from the shell"],
            obj=Settings(clock=clock),
        )
        assert done.exit_code == 0, done.output
        await clock.advance(RENEWAL)
        async with asyncio.timeout(BOUND):
            result = await run_a
    assert body.seen == ["cancelled"]
    assert result.status is RunStatus.CANCELLED and result.reason == "from the shell"


async def test_a_lease_taken_over_after_expiry_cancels_the_first_body_which_records_nothing(
    stores: tuple[SqliteStore, SqliteStore], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Engine b's clock is past a's lease: b takes the step over while a's body still runs
    (as after a long pause of a's process); a's next renewal is refused, its body is
    cancelled, and a's run then waits for b's outcome instead of recording its own."""
    first, second = Sleeper("a"), Sleeper("b")
    wf_a = Workflow("wf-taken", [StepDef("nap", first)])
    wf_b = Workflow("wf-taken", [StepDef("nap", second)])
    later = FakeClock(clock.time() + TTL + 1)
    async with Queue(clock=clock) as qa, Queue(clock=later) as qb:
        a, b = engine_on(qa, stores[0], "a", clock), engine_on(qb, stores[1], "b", later)
        run_a = await running(a, wf_a, first, clock)
        run_b = await running(b, wf_b, second, later)
        assert "WorkerRecovered" in await kinds(stores[1], wf_b.id)
        with caplog.at_level(logging.WARNING, logger="agentq"):
            await clock.advance(RENEWAL)  # a's renewal is refused: its body is cancelled
            async with asyncio.timeout(BOUND):
                await until(lambda: first.seen == ["cancelled"])
                await clock.wait_for_sleepers(1)  # a's run polls the step b holds
        assert any("another worker took it over" in r.message for r in caplog.records)
        assert not run_a.done()
        second.release.set()
        async with asyncio.timeout(BOUND):
            result_b = await run_b
        await clock.advance(a.poll_interval)
        async with asyncio.timeout(BOUND):
            result_a = await run_a
    assert result_b.status is RunStatus.COMPLETED and result_b.outputs == ("b",)
    assert result_a.status is RunStatus.COMPLETED and result_a.outputs == ("b",)
    events = await stores[0].load_events(wf_a.id)
    ks = [str(e.kind) for e in events]
    assert ks.count("StepCompleted") == 1 and "StepFailed" not in ks
    assert first.seen == ["cancelled"] and second.seen == ["returned"]


async def test_the_owners_own_cancel_still_stops_the_body_at_once(
    stores: tuple[SqliteStore, SqliteStore], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with napping(stores[0], clock, "wf-own") as (a, body, run_a):
        start = clock.time()
        with caplog.at_level(logging.INFO, logger="agentq"):
            assert await a.cancel("wf-own", "mine")
            async with asyncio.timeout(BOUND):
                result = await run_a
    assert result.status is RunStatus.CANCELLED and result.reason == "mine"
    assert body.seen == ["cancelled"] and clock.time() == start  # no renewal needed
    assert not any("lease is gone" in r.message for r in caplog.records)


async def test_a_thread_body_cancelled_elsewhere_is_no_longer_waited_for(
    stores: tuple[SqliteStore, SqliteStore], clock: FakeClock
) -> None:
    """A plain ``def`` cannot be interrupted: the run returns cancelled at the renewal while
    the thread still runs; what it returns later is refused (nothing recorded)."""
    entered, leave = threading.Event(), threading.Event()

    def stuck(ctx: StepContext) -> str:
        entered.set()
        assert leave.wait(BOUND)
        return "late"

    wf = Workflow("wf-thread", [StepDef("nap", stuck)])
    async with Queue(clock=clock) as qa, Queue(clock=clock) as qb:
        a, b = engine_on(qa, stores[0], "a", clock), engine_on(qb, stores[1], "b", clock)
        run_a = asyncio.ensure_future(a.run(wf))
        async with asyncio.timeout(BOUND):
            assert await asyncio.to_thread(entered.wait, BOUND)
            await clock.wait_for_sleepers(1)
        assert await b.cancel(wf.id, "stop")
        await clock.advance(RENEWAL)
        async with asyncio.timeout(BOUND):
            result = await run_a
        assert result.status is RunStatus.CANCELLED
        assert a.tables()["lingering"] == 1  # the thread, until it returns
        leave.set()
        async with asyncio.timeout(BOUND):
            await until(lambda: a.tables()["lingering"] == 0)
    assert "StepCompleted" not in await kinds(stores[0], wf.id)


def marked(marks: Path, word: str, bound: float = 30.0) -> bool:
    """Whether a line of `marks` starts with `word` within `bound` seconds (another
    process's progress is polled: it has no event to wait on)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if any(line.split()[0] == word for line in marks.read_text().splitlines()):
            return True
        time.sleep(0.02)
    return False


async def test_a_cancel_from_the_command_line_stops_a_body_in_another_process(
    tmp_path: Path, db: Path
) -> None:
    """Real time, real process: the child's engine (lease 1.5 s, renewed every 0.5 s) runs a
    body that sleeps an hour; ``agentq cancel`` from here stops it within about a renewal."""
    marks = tmp_path / "marks"
    marks.touch()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), "nap", str(db), str(marks),
        env={**os.environ, "AGENTQ_TEST_TTL": "1.5"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert await asyncio.to_thread(marked, marks, "nap")
        done = await asyncio.to_thread(
            CliRunner().invoke, cli, ["cancel", str(db), "nap", "--reason", "enough"]
        )
        assert done.exit_code == 0, done.output
        start = time.monotonic()
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
        elapsed = time.monotonic() - start
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["status"] == "cancelled"
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["nap", "cancelled"]
    assert elapsed < 0.5 + 4.0  # one renewal, plus a loaded machine's slack
