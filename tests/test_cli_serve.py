"""``agentq serve MODULE:ATTR`` as a real worker process (issue 20, fault 8).

Each test runs ``python -m agentq serve serve_app:ATTR`` (``serve_app.py``, a user's
module) over a SQLite file and sends it signals: the first SIGTERM or SIGINT stops it
taking work, it says in one line what it waits for, waits its grace, hands back its leases
and exits 0, and another worker takes the handed-back work at once (leases are 60 s: one
waited out would time these tests out); a second signal ends it at once (128 + the
signal's number), in one line, without a traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentq.events import EventKind
from agentq.store import HANDED_BACK_REASON, Claimed, SqliteStore, StepState, WorkflowState

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

HERE = Path(__file__).parent


@dataclass
class Worker:
    """A running ``agentq serve`` process and what it wrote to stderr so far."""

    proc: asyncio.subprocess.Process
    lines: list[str]

    async def line(self, containing: str) -> str:
        """Read stderr until a line containing `containing` (bounded)."""
        async with asyncio.timeout(30):
            while True:
                found = [line for line in self.lines if containing in line]
                if found:
                    return found[0]
                assert self.proc.stderr is not None
                raw = await self.proc.stderr.readline()
                assert raw, f"stderr ended before {containing!r}: {self.lines}"
                self.lines.append(raw.decode().rstrip("\n"))

    async def ended(self) -> int:
        """Wait (bounded) for the exit; read the rest of stderr; the exit code."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(30):
            rest = await self.proc.stderr.read()
            code = await self.proc.wait()
        self.lines += [line for line in rest.decode().splitlines() if line]
        return code


@dataclass
class Place:
    db: Path
    marks: Path
    workers: list[Worker] = field(default_factory=list)

    async def spawn(self, attr: str, mode: str, *args: str) -> Worker:
        env = dict(os.environ, AGENTQ_TEST_DB=str(self.db), AGENTQ_TEST_MARKS=str(self.marks),
                   AGENTQ_TEST_MODE=mode)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentq", "serve", f"serve_app:{attr}", "--poll", "0.1",
            *args, cwd=HERE, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        self.workers.append(Worker(proc, []))
        return self.workers[-1]

    async def started(self, pid: int) -> None:
        """Wait (bounded) until a body started in process `pid`."""
        async with asyncio.timeout(30):
            while True:
                if self.marks.exists() and f"started {pid}" in self.marks.read_text():
                    return
                await asyncio.sleep(0.02)

    async def completed(self, workflow_id: str, within: float) -> str:
        """Wait until `workflow_id` completed, at most `within` seconds; its output."""
        async with asyncio.timeout(within), SqliteStore(self.db) as store:
            while True:
                row = await store.get_workflow(workflow_id)
                if row is not None and row.state is WorkflowState.COMPLETED:
                    [step] = await store.step_rows(workflow_id)
                    return str(step.output)
                await asyncio.sleep(0.05)


@pytest.fixture
async def place(tmp_path: Path) -> AsyncIterator[Place]:
    db = tmp_path / "serve.db"
    async with SqliteStore(db) as store:
        await store.start_workflow("j-1", ["a"], None, time.time(), definition="job")
    made = Place(db, tmp_path / "marks.txt")
    yield made
    for worker in made.workers:  # a test that failed half-way leaves none behind
        if worker.proc.returncode is None:
            worker.proc.kill()
            await worker.proc.wait()


def no_traceback(worker: Worker) -> None:
    assert not [line for line in worker.lines if "Traceback" in line], worker.lines


@pytest.mark.parametrize(("sig", "attr"), [(signal.SIGTERM, "engine_cm"),
                                           (signal.SIGINT, "make_engine")])
async def test_a_signal_stops_the_worker_which_hands_back_its_lease_and_exits_0(
    place: Place, sig: signal.Signals, attr: str
) -> None:
    worker = await place.spawn(attr, "block", "--grace", "0.5")
    await worker.line("serving 'job' as worker")
    await place.started(worker.proc.pid)
    worker.proc.send_signal(sig)
    said = await worker.line("serve() stops")
    assert said == (
        "agentq: serve() stops: taking no more work; waiting up to 0.5 s for 1 step in "
        "progress (of 'j-1'), then interrupting what is left and handing its leases back"
    )
    assert await worker.ended() == 0
    no_traceback(worker)
    async with SqliteStore(place.db) as store:
        [step] = await store.step_rows("j-1")
        assert step.state is StepState.PENDING  # handed back: another worker may take it
        [back] = [e for e in await store.load_events("j-1")
                  if e.kind is EventKind.WORKER_RECOVERED]
        assert back.data["reason"] == HANDED_BACK_REASON

    other = await place.spawn("engine_cm", "quick")
    try:
        output = await place.completed("j-1", within=15)  # its lease (60 s) was not waited
    finally:
        other.proc.send_signal(signal.SIGTERM)
        assert await other.ended() == 0
    assert output == f"done by {other.proc.pid}"


async def test_a_run_that_ends_within_the_grace_completes_then_the_worker_exits_0(
    place: Place,
) -> None:
    worker = await place.spawn("engine_cm", "short", "--grace", "30")
    await place.started(worker.proc.pid)
    worker.proc.send_signal(signal.SIGTERM)
    assert await worker.ended() == 0
    no_traceback(worker)
    assert await place.completed("j-1", within=5) == f"done by {worker.proc.pid}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_second_signal_ends_the_worker_at_once_in_one_line(
    place: Place, sig: signal.Signals
) -> None:
    """The body blocks in a thread for 30 s and the grace is 60 s: the first signal would
    wait; the second ends the process at once, and a worker on this host takes its lease
    back at once (its process is gone) instead of waiting 60 s."""
    worker = await place.spawn("engine_cm", "thread", "--grace", "60")
    await place.started(worker.proc.pid)
    worker.proc.send_signal(sig)
    await worker.line("waiting up to 60 s for 1 step in progress (of 'j-1')")
    began = time.monotonic()
    worker.proc.send_signal(sig)
    assert await worker.ended() == 128 + sig
    assert time.monotonic() - began < 10
    no_traceback(worker)
    assert worker.lines[-1] == (
        f"agentq: second {sig.name}: stopping at once, without handing leases back (a "
        "serving engine on this host takes them back at once; others when they expire)"
    )

    other = await place.spawn("engine_cm", "quick")
    try:
        assert await place.completed("j-1", within=15) == f"done by {other.proc.pid}"
    finally:
        other.proc.send_signal(signal.SIGTERM)
        assert await other.ended() == 0


@pytest.mark.parametrize(
    ("target", "code", "words"),
    [
        ("serve_app", 2, "expected MODULE:ATTR"),
        ("no_such_module_here:engine", 1,
         "agentq: cannot import module 'no_such_module_here': ModuleNotFoundError"),
        ("serve_app:nothing", 1, "agentq: module 'serve_app' has no attribute 'nothing'"),
        ("serve_app:not_an_engine", 1, "agentq: serve_app:not_an_engine is int, not a "
         "WorkflowEngine"),
        ("serve_app:bare", 1, "has no registered definition: nothing to serve"),
        ("serve_app:failing_factory", 1, "agentq: serve_app:failing_factory() raised "
         "RuntimeError: factory boom"),
        ("serve_app:failing_async_factory", 1, "agentq: serve_app:failing_async_factory() "
         "raised RuntimeError: async boom"),
    ],
)
async def test_a_target_that_cannot_be_served_is_refused_in_one_line(
    place: Place, target: str, code: int, words: str
) -> None:
    module, _, attr = target.partition(":")
    worker = await place.spawn(attr, "quick") if module == "serve_app" and attr else None
    if worker is None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentq", "serve", target, cwd=HERE,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        worker = Worker(proc, [])
        place.workers.append(worker)
    assert await worker.ended() == code
    no_traceback(worker)
    if code == 1:  # a refusal: one line
        assert len(worker.lines) == 1 and words in worker.lines[0], worker.lines
    else:  # a usage error, as click says every one
        assert words in worker.lines[-1], worker.lines


@pytest.mark.parametrize("option", ["--poll", "--grace", "--retention"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
async def test_a_number_that_is_not_finite_is_a_usage_error(
    place: Place, option: str, value: str
) -> None:
    """Review A #4: ``--poll nan`` or ``--grace nan`` is said in click's usage lines, exit 2,
    never a traceback."""
    worker = await place.spawn("make_engine", "quick", option, value)
    assert await worker.ended() == 2
    no_traceback(worker)
    assert f"Invalid value for '{option}'" in worker.lines[-1], worker.lines


async def test_retention_sweeps_what_ended_long_ago_as_the_worker_serves(place: Place) -> None:
    async with SqliteStore(place.db) as store:
        await store.start_workflow("ancient", ["a"], None, 1_000_000.0)
        claimed = await store.claim_step("ancient", 0, "old", 10.0, 1_000_000.0)
        assert isinstance(claimed, Claimed)
        await store.complete_step(claimed.execution, "done", 1_000_000.0)
    worker = await place.spawn("make_engine", "quick", "--retention", "3600")
    assert (await place.completed("j-1", 30)).startswith("done by ")
    async with asyncio.timeout(30), SqliteStore(place.db) as store:
        while True:  # the first poll's sweep removes it (another process: polled)
            if await store.get_workflow("ancient") is None:
                break
            await asyncio.sleep(0.05)
        assert await store.get_workflow("j-1") is not None  # ended just now: kept
    worker.proc.send_signal(signal.SIGTERM)
    assert await worker.ended() == 0
    no_traceback(worker)


def test_the_worker_lines_print_stored_strings_literally(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A workflow id holding ESC/OSC or an RLO reaches the terminal made visible, in the log
    lines of a serving worker and in its own one-line messages."""
    import logging

    from agentq.cli import serve as serve_module

    hostile = "wf\x1b]0;pwned\x07\u202e"
    record = logging.LogRecord("agentq", logging.WARNING, __file__, 1, "still running: %s",
                               (hostile,), None)
    line = serve_module._LiteralFormatter("agentq: %(message)s").format(record)
    assert "\x1b" not in line and "\u202e" not in line and "\x07" not in line
    assert "\\x1b" in line and "\\u202e" in line
    serve_module._say(f"stopping {hostile}")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b" in err
