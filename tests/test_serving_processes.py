"""Serving engines in real processes on one SQLite file or PostgreSQL database: each step body
runs once; a worker killed with SIGKILL mid-run leaves its steps to the other, which takes the
expired leases over.

Each child (`serve_child.py`) serves definition ``job`` (steps a, b, c); every body appends a
line to a side file, so the counts below are what really ran, and where.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import serve_child as child

from agentq import Queue, Recorded, WorkflowEngine
from agentq.events import EventKind
from agentq.store import PostgresStore, SqliteStore, WorkflowState

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "serve_child.py"
N = 50


@dataclass(frozen=True)
class Db:
    """The shared store: a SQLite file, or a PostgreSQL DSN and schema."""

    place: str
    schema: str | None = None

    @property
    def args(self) -> list[str]:
        """The child's DB (and SCHEMA) arguments."""
        return [self.place] if self.schema is None else [self.place, self.schema]

    def open(self) -> SqliteStore | PostgresStore:
        return child.open_store(self.place, self.schema)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    if request.param == "sqlite":
        return Db(str(tmp_path / "serve.db"))
    target = request.getfixturevalue("pg_target")
    return Db(target.dsn, target.schema)


@asynccontextmanager
async def servers(
    db: Db, side: Path, *names: str
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(CHILD), db.args[0], str(side), name, *db.args[1:],
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for name in names
    ]
    try:
        for proc in procs:  # each has opened the file and registered its definition
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                assert (await proc.stdout.readline()).strip() == b"serving"
        yield procs
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


async def start_all(db: Db, side: Path) -> list[str]:
    ids = [f"job-{i:02d}" for i in range(N)]
    async with Queue() as queue, db.open() as store:
        engine = WorkflowEngine(queue, store, worker_id="starter")
        for i, wid in enumerate(ids):
            assert await engine.start(child.definition(side), wid, i)
    return ids


async def all_completed(db: Db, ids: list[str], but: str | None = None) -> None:
    """Poll the store (bounded) until every workflow in `ids` completed, and `but` waits: the
    servers are other processes, so there is nothing in this one to wait on."""
    async with db.open() as store, asyncio.timeout(60):
        while True:
            done = {w.workflow_id for w in await store.workflows(WorkflowState.COMPLETED)}
            waiting = {w.workflow_id for w in await store.workflows(WorkflowState.WAITING)}
            if done >= set(ids) and (but is None or but in waiting):
                return
            await asyncio.sleep(0.1)


def started_by(side: Path, pid: int) -> int:
    """How many bodies process `pid` has started so far."""
    return side.read_text().count(f" {pid}\n") if side.exists() else 0


async def bodies_ran(side: Path, pid: int, count: int) -> None:
    """Poll the side file (bounded) until process `pid` has started `count` bodies."""
    async with asyncio.timeout(30):
        while True:
            if started_by(side, pid) >= count:
                return
            await asyncio.sleep(0.01)


def ran(side: Path) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], list[str]]]:
    runs: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], list[str]] = {}
    for line in side.read_text().splitlines():
        wid, step, pid = line.split()
        runs[(wid, step)] += 1
        where.setdefault((wid, step), []).append(pid)
    return runs, where


async def test_two_serving_processes_run_each_step_body_once(db: Db, tmp_path: Path) -> None:
    side = tmp_path / "side.txt"
    ids = await start_all(db, side)
    async with db.open() as store:  # this process holds no definition at all
        await store.start_workflow("ap-1", ["ask"], None, time.time(), definition="approval")
    async with servers(db, side, "one", "two") as procs:
        await all_completed(db, ids, but="ap-1")
        pids = {str(p.pid) for p in procs}
        async with Queue() as queue, db.open() as store:
            clerk = WorkflowEngine(queue, store, worker_id="clerk")
            assert await clerk.resume("ap-1", "ask", {"ok": True}) == Recorded(
                "ap-1", "approval", "resumed"
            )
        await all_completed(db, [*ids, "ap-1"])  # the servers noticed the recorded input
    async with db.open() as store:
        [asked] = await store.step_rows("ap-1")
    assert asked.output == {"ok": True}
    runs, where = ran(side)
    assert runs == Counter({(w, s): 1 for w in ids for s in "abc"})
    assert {pid for ps in where.values() for pid in ps} == pids  # both served
    async with db.open() as store:
        events = await store.load_events()
        rows = {r.workflow_id: r for r in await store.workflows()}
        steps = await store.step_rows(ids[7])
    assert not [e for e in events if e.kind is EventKind.WORKER_RECOVERED]
    assert all(rows[w].state is WorkflowState.COMPLETED for w in ids)
    assert [s.output for s in steps] == ["a:7", "b:7", "c:7"]


async def test_a_server_killed_mid_run_leaves_its_steps_to_the_other(
    db: Db, tmp_path: Path
) -> None:
    side = tmp_path / "side.txt"
    ids = await start_all(db, side)
    async with servers(db, side, "doomed", "survivor") as procs:
        doomed = procs[0]
        await bodies_ran(side, doomed.pid, 10)  # it is serving: kill it mid-run
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()
        await all_completed(db, ids)
        survivor = str(procs[1].pid)
    runs, where = ran(side)
    assert set(runs) == {(w, s) for w in ids for s in "abc"}  # everything ran
    async with db.open() as store:
        events = await store.load_events()
    recovered = [e for e in events if e.kind is EventKind.WORKER_RECOVERED]
    assert recovered, "the dead worker's leases were taken over"
    assert all(e.data["previous_worker"] == f"doomed:{doomed.pid}" for e in recovered)
    assert all(e.data["reason"] == "lease expired" for e in recovered)
    taken = {(e.workflow_id, e.step_name) for e in recovered}
    twice = {key for key, n in runs.items() if n > 1}
    assert twice <= taken and len(taken) <= 4  # at most its 4 permits were in flight
    for key in twice:  # the body in flight when it died ran once more, in the survivor
        assert runs[key] == 2 and where[key] == [str(doomed.pid), survivor]
    assert os.getpid() not in {int(p) for ps in where.values() for p in ps}
