"""Crash tests: `python -m examples.bfcl_replay --crash-after N` SIGKILLs itself around a
state-changing call, 16 workflows at a time; the same command run again recovers, finishes and
matches the ground truth. Every call completed before the crash is answered from agentq's log,
never sent to the service host again: the host refuses only calls in doubt (started, never
recorded) that it had applied before the kill."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from bfcl_crash_log import applied_keys, read_crash, run_replay

TOTAL = 1142


@pytest.mark.slow
@pytest.mark.parametrize(("point", "after"), [("before", 150), ("during", 500), ("after", 900)])
def test_a_replay_killed_around_a_state_changing_call_recovers_and_matches(
    tmp_path: Path, point: str, after: int
) -> None:
    command = ["--crash-after", str(after), "--crash-at", point, "--transient-rate", "0.05"]

    crashed = run_replay(tmp_path, "--fresh", *command)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    left = read_crash(tmp_path, point, after)
    assert len(left.applied) >= after
    # What agentq's log knows: every completed call was applied; the killed call is in doubt
    # (its CallStarted was committed before its job ran), applied only when killed after.
    assert left.completed <= left.applied
    assert left.killed in left.in_doubt
    assert (left.killed in left.applied) is (point == "after")

    rerun = run_replay(tmp_path, *command)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "recovery: " in rerun.stdout
    assert rerun.stdout.rstrip().endswith("✔ 200/200 tasks match the ground truth")
    summary = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert summary["ok"] is True and summary["calls_recorded"] == TOTAL

    # A call completed before the crash never reached the service host again: it was answered
    # from agentq's log. Only the calls in doubt were sent again (CallStarted rerun); the host
    # refused exactly those of them it had applied before the kill, and applied the others.
    refused = summary["refused_keys_now"]
    assert len(refused) == len(set(refused)) == summary["duplicates_refused_now"]
    assert not set(refused) & left.completed
    assert set(refused) == left.in_doubt & left.applied
    assert set(summary["rerun_keys_now"]) == left.in_doubt
    assert summary["calls_rerun_now"] == len(left.in_doubt)
    assert (left.killed in refused) is (point == "after")
    assert summary["calls_answered_from_log_now"] == left.answered_later
    assert summary["duplicates_prevented_now"] == left.answered_later + len(refused)

    # No call was applied twice: the host holds each of the 1142 keys once, and the rerun
    # applied exactly the calls the crashed process had not committed.
    keys = applied_keys(tmp_path / "bfcl-services.db")
    assert len(keys) == len(set(keys)) == TOTAL
    assert summary["calls_applied_before"] == len(left.applied)
    assert summary["calls_applied_now"] == TOTAL - len(left.applied)
    # The crashed worker's steps were taken over once their leases expired.
    assert summary["leases_recovered_now"] + summary["held_by_dead_worker_now"] >= 1
    assert summary["approvals"] == 220

    again = run_replay(tmp_path, *command)
    assert again.returncode == 0, again.stdout + again.stderr
    final = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert final["calls_applied_now"] == final["duplicates_prevented_now"] == 0
