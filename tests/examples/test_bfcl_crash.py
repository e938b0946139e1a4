"""Crash tests: a replay SIGKILLed mid-way, rerun on the same file, matches the direct run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.direct import TaskRun, compare_runs, format_mismatches
from examples.bfcl_replay.servicehost import ServiceHost
from examples.bfcl_replay.services import Kind, kind_of

CHILD = Path(__file__).with_name("bfcl_crash_child.py")
ROOT = Path(__file__).parents[2]
TOTAL = 1142


def _child(*args: object) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, str(CHILD), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )


def _ordinal(tasks: list[Task], kind: Kind, at_least: int) -> int:
    """1-based position, in replay order, of the first call of a kind at or after a position."""
    calls = [call for task in tasks for turn in task.calls for call in turn]
    return next(
        number
        for number, call in enumerate(calls, start=1)
        if number >= at_least and kind_of(call.function) is kind
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "kind", "at_least"),
    [
        ("before", Kind.WRITE, 40),
        ("during", Kind.WRITE, 300),
        ("during", Kind.APPROVAL, 700),
        ("after", Kind.APPROVAL, 1000),
    ],
)
def test_a_killed_replay_resumes_and_matches_with_no_call_applied_twice(
    tmp_path: Path,
    bfcl_tasks: list[Task],
    bfcl_direct: dict[str, TaskRun],
    point: str,
    kind: Kind,
    at_least: int,
) -> None:
    path = tmp_path / "host.sqlite3"
    n = _ordinal(bfcl_tasks, kind, at_least)

    crashed = _child(path, point, n, 0.0)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    committed = n if point == "after" else n - 1

    resumed = _child(path, "none", 0, 0.2)
    assert resumed.returncode == 0, resumed.stderr
    stats = json.loads(resumed.stdout)
    assert stats["duplicates"] == committed
    assert stats["applied"] == TOTAL - committed
    assert stats["transient_errors"] > 0

    with ServiceHost(path, bfcl_tasks) as host:
        runs = {}
        for task in bfcl_tasks:
            results = host.results(task.id)
            assert list(results) == [
                f"{task.id}/{turn}/{index}"
                for turn, calls in enumerate(task.call_texts)
                for index in range(len(calls))
            ]
            grouped = tuple(
                tuple(results[f"{task.id}/{turn}/{index}"] for index in range(len(calls)))
                for turn, calls in enumerate(task.call_texts)
            )
            runs[task.id] = TaskRun(task.id, grouped, host.final_states(task.id))
    assert format_mismatches(compare_runs(bfcl_direct, runs)) == "no mismatches"
