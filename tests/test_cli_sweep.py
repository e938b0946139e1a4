"""``agentq sweep STORE --ended-before T [--state S ...]`` on a real SQLite file."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.store import Claimed, SqliteStore, WorkflowState

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=FakeClock(NOW), width=200))


async def _make(path: Path) -> None:
    async with SqliteStore(path) as store:
        for wid, at, end in (
            ("old-done", NOW - 7200, "complete"),
            ("old-cancelled", NOW - 7200, "cancel"),
            ("old-failed", NOW - 7200, "fail"),
            ("recent", NOW - 600, "complete"),
            ("running", NOW - 7200, None),
        ):
            await store.start_workflow(wid, ["a"], None, at)
            if end == "cancel":
                await store.cancel_workflow(wid, "stop", at)
                continue
            claimed = await store.claim_step(wid, 0, "w", 10.0, at)
            assert isinstance(claimed, Claimed)
            if end == "complete":
                await store.complete_step(claimed.execution, "out", at)
            elif end == "fail":
                await store.fail_step(claimed.execution, "error", None, at, None)


async def _states(path: Path) -> dict[str, WorkflowState]:
    async with SqliteStore(path) as store:
        return {w.workflow_id: w.state for w in await store.workflows()}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "agentq.db"
    asyncio.run(_make(path))
    return path


def test_sweep_by_age_removes_completed_and_cancelled_and_says_so(db: Path) -> None:
    result = run("sweep", str(db), "--ended-before", "1h")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("swept 2 workflows that ended before ")
    assert "(6 events, 0 calls and waits)" in result.stdout
    assert set(asyncio.run(_states(db))) == {"old-failed", "recent", "running"}
    again = run("sweep", str(db), "--ended-before", "1h")
    assert again.exit_code == 0 and again.stdout.startswith("swept 0 workflows")


def test_sweep_states_and_an_iso_time(db: Path) -> None:
    when = datetime.fromtimestamp(NOW - 60, UTC).isoformat().replace("+00:00", "Z")
    result = run("sweep", str(db), "--ended-before", when, "--state", "failed",
                 "--state", "completed")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("swept 3 workflows")
    assert set(asyncio.run(_states(db))) == {"old-cancelled", "running"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ended-before", "soon"], "'soon' is neither an age"),
        (["--ended-before", "2026-01-01T00:00:00"], "has no zone"),
        (["--ended-before", "1h", "--state", "running"], "'running' is not one of"),
        ([], "Missing option '--ended-before'"),
        (["--ended-before", "99999999999999d"], "'99999999999999d' is an age of more than"),
    ],
)
def test_bad_arguments_are_usage_errors(db: Path, args: list[str], message: str) -> None:
    result = run("sweep", str(db), *args)
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(asyncio.run(_states(db))) == 5


def test_a_missing_store_is_refused_in_one_line(tmp_path: Path) -> None:
    result = run("sweep", str(tmp_path / "nope.db"), "--ended-before", "30d")
    assert result.exit_code == 1
    assert result.stderr.startswith("agentq: ") and result.stderr.count("\n") == 1
    assert not (tmp_path / "nope.db").exists()


def test_the_report_of_a_cutoff_no_date_can_show_is_the_number() -> None:
    from agentq.cli.sweep import _said
    from agentq.store import SweepReport

    assert "-1e+300 (Unix seconds)" in _said(SweepReport(0, 0, 0), -1e300)
