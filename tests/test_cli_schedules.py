"""``agentq schedules STORE``: the stored schedules as a table and as JSON lines, after an
engine scheduled them and fired a tick."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner, Result

from agentq import StepDef, WorkflowDef, WorkflowEngine, recover
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.queue import Queue
from agentq.store import SqliteStore


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=FakeClock(), width=200))


async def _made(path: Path, clock: FakeClock) -> None:
    report = WorkflowDef("report", [StepDef("go", lambda ctx: "ok")])
    async with Queue(clock=clock) as queue, SqliteStore(path) as store:
        engine = WorkflowEngine(queue, store, clock=clock)
        await engine.schedule("nightly", report, cron="0 9 * * *", input={"to": "ops"})
        await engine.schedule("ping", report, every=30)
        await clock.advance(45)
        await (await recover(engine)).wait()  # fires ping's first tick
        await engine.close()


def test_schedules_lists_spec_next_tick_and_last_instance(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    asyncio.run(_made(path, FakeClock()))
    result = invoke("schedules", str(path))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 schedule(s)" in out
    assert "cron 0 9 * * *" in out and "2026-01-01 09:00:00" in out
    assert "every 30s" in out and "2026-01-01 00:01:00" in out
    assert "ping@2026-01-01T00:00:30Z" in out and '{"to": "ops"}' in out
    listed = invoke("schedules", str(path), "--json").output
    lines = [json.loads(line) for line in listed.splitlines()]
    assert [(d["name"], d["cron"], d["every"], d["last_instance"]) for d in lines] == [
        ("nightly", "0 9 * * *", None, None),
        ("ping", None, 30.0, "ping@2026-01-01T00:00:30Z"),
    ]


def test_schedules_of_an_empty_store_and_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    asyncio.run(_empty(path))
    result = invoke("schedules", str(path))
    assert result.exit_code == 0 and "0 schedule(s)" in result.output
    missing = invoke("schedules", str(tmp_path / "nope.db"))
    assert missing.exit_code != 0 and "nope.db" in missing.output
    assert not (tmp_path / "nope.db").exists()


async def _empty(path: Path) -> None:
    async with SqliteStore(path):
        pass
