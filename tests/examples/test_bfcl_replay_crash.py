"""Crash tests: `python -m examples.bfcl_replay --crash-after N` SIGKILLs itself around a
state-changing call; the same command run again recovers, finishes and matches the ground truth,
and no call was applied twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TOTAL = 1142


def _replay(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "examples.bfcl_replay", "--db", str(tmp_path / "bfcl.db"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )


def _applied_keys(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        keys = [key for (key,) in db.execute("SELECT idempotency_key FROM applied_calls")]
    db.close()
    return keys


@pytest.mark.slow
@pytest.mark.parametrize(("point", "after"), [("before", 150), ("during", 500), ("after", 900)])
def test_a_replay_killed_around_a_state_changing_call_recovers_and_matches(
    tmp_path: Path, point: str, after: int
) -> None:
    command = ["--crash-after", str(after), "--crash-at", point, "--transient-rate", "0.05"]
    services = tmp_path / "bfcl-services.db"

    crashed = _replay(tmp_path, "--fresh", *command)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    marker = json.loads((tmp_path / f"bfcl-services.db.crashed-{point}-{after}").read_text())
    killed_at = marker["key"]  # the state-changing call the process died around
    committed = _applied_keys(services)
    assert len(committed) >= after
    assert (killed_at in committed) is (point == "after")

    rerun = _replay(tmp_path, *command)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "recovery: " in rerun.stdout
    assert rerun.stdout.rstrip().endswith("✔ 200/200 tasks match the ground truth")
    summary = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert summary["ok"] is True
    # No call was applied twice: the host holds each of the 1142 keys once, the rerun applied
    # exactly the calls the crashed process had not committed, and every call the rerun made
    # again (its step was interrupted) was answered from the stored result.
    keys = _applied_keys(services)
    assert len(keys) == len(set(keys)) == TOTAL
    assert summary["calls_applied_before"] == len(committed)
    assert summary["calls_applied_now"] == TOTAL - len(committed)
    if point == "after":  # the killed call's step was interrupted: its call came back
        assert summary["duplicates_refused_now"] >= 1
    # The crashed worker's steps were taken over once their leases expired.
    assert summary["leases_recovered_now"] + summary["held_by_dead_worker_now"] >= 1
    assert summary["approvals"] == 216

    again = _replay(tmp_path, *command)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((tmp_path / "bfcl-summary.json").read_text())["calls_applied_now"] == 0
