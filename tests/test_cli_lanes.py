"""``agentq resume-lane STORE LANE`` on a real SQLite file: a stored pause lifted for all."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner, Result

from agentq import Rate
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.store import SqliteStore

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=FakeClock(NOW), width=200))


async def _pause(path: Path, lane: str, until: float) -> None:
    async with SqliteStore(path) as store:
        await store.pause_lane(lane, until)


async def _paused_until(path: Path, lane: str) -> float:
    async with SqliteStore(path) as store:  # a take says the stored pause
        grant = await store.take_budget(lane, rate=Rate(100, 1.0), tokens=None, estimate=0,
                                        now=NOW)
        return grant.paused_until


def test_resume_lane_lifts_the_stored_pause_and_says_so(tmp_path: Path) -> None:
    db = tmp_path / "agentq.db"
    asyncio.run(_pause(db, "low", NOW + 600))
    asyncio.run(_pause(db, "high", NOW + 600))
    result = run("resume-lane", str(db), "low")
    assert result.exit_code == 0, result.output
    assert "lifted the pause of lane 'low'" in result.output
    assert asyncio.run(_paused_until(db, "low")) == 0.0
    assert asyncio.run(_paused_until(db, "high")) == NOW + 600  # another lane: kept
    again = run("resume-lane", str(db), "low")
    assert again.exit_code == 0 and "not paused in the store: nothing changed" in again.output


def test_resume_lane_refuses_an_unknown_lane_or_store(tmp_path: Path) -> None:
    db = tmp_path / "agentq.db"
    asyncio.run(_pause(db, "low", NOW + 600))
    bad = run("resume-lane", str(db), "urgent")
    assert bad.exit_code == 2 and "'urgent'" in bad.output and "'low'" in bad.output
    missing = run("resume-lane", str(tmp_path / "nope.db"), "low")
    assert missing.exit_code == 1 and "agentq:" in missing.output
