"""Crash tests, one call at a time: a replay run with ``--concurrency 1`` (one workflow, so one
call, in flight at any moment) is SIGKILLed around the n-th call; the same command run again
resumes it. Exactly one call is in doubt; the calls completed before it in its turn are answered
from agentq's log; only the call in doubt reaches the service host again, which refuses it when
it had applied it (killed after the commit). The final results and states match the direct run.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from bfcl_crash_log import read_crash, run_replay

from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.direct import TaskRun, compare_runs, format_mismatches
from examples.bfcl_replay.plan import call_key
from examples.bfcl_replay.servicehost import ServiceHost
from examples.bfcl_replay.services import Kind, kind_of

TASKS = 60
"""The first 60 base tasks: 344 calls."""


def _target(tasks: list[Task], kind: Kind, at_least: int) -> tuple[int, str, int]:
    """The first call of a kind at or after a position (1-based, in replay order) that is not
    the first of its turn: its position, its key and its index in the turn."""
    calls = [
        (task.id, turn, index, call)
        for task in tasks
        for turn, turn_calls in enumerate(task.calls)
        for index, call in enumerate(turn_calls)
    ]
    return next(
        (number, call_key(task_id, turn, index), index)
        for number, (task_id, turn, index, call) in enumerate(calls, start=1)
        if number >= at_least and index > 0 and kind_of(call.function) is kind
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "kind", "at_least"),
    [
        ("before", Kind.WRITE, 40),
        ("during", Kind.WRITE, 150),
        ("during", Kind.APPROVAL, 200),
        ("after", Kind.APPROVAL, 280),
    ],
)
def test_a_killed_replay_resumes_with_one_call_in_doubt_and_none_applied_twice(
    tmp_path: Path,
    bfcl_tasks: list[Task],
    bfcl_direct: dict[str, TaskRun],
    point: str,
    kind: Kind,
    at_least: int,
) -> None:
    tasks = bfcl_tasks[:TASKS]
    total = sum(len(texts) for task in tasks for texts in task.call_texts)
    n, key, index = _target(tasks, kind, at_least)
    flags = ["--tasks", str(TASKS), "--concurrency", "1", "--crash-after", str(n - 1)]
    flags += ["--crash-at", point]

    crashed = run_replay(tmp_path, "--fresh", *flags, "--transient-rate", "0")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    left = read_crash(tmp_path, point, n - 1)
    committed = n if point == "after" else n - 1
    assert left.killed == key
    assert left.in_doubt == {key}  # one call in flight: the one the process died around
    assert len(left.completed) == n - 1
    assert len(left.applied) == committed
    assert left.answered_later == index  # the calls before it in its turn

    resumed = run_replay(tmp_path, *flags, "--transient-rate", "0.2")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.rstrip().endswith(f"✔ {TASKS}/{TASKS} tasks match the ground truth")
    summary = json.loads((tmp_path / f"bfcl-base-first{TASKS}-summary.json").read_text())
    assert summary["rerun_keys_now"] == [key]
    assert summary["calls_answered_from_log_now"] == index
    assert summary["refused_keys_now"] == ([key] if point == "after" else [])
    assert summary["duplicates_refused_now"] == (point == "after")
    assert summary["calls_applied_before"] == committed
    assert summary["calls_applied_now"] == total - committed
    assert summary["call_retries_now"] > 0  # the transient errors, absorbed by the jobs

    with ServiceHost(tmp_path / "bfcl-services.db", tasks) as host:
        runs = {}
        for task in tasks:
            results = host.results(task.id)
            keys = [
                call_key(task.id, turn, i)
                for turn, texts in enumerate(task.call_texts)
                for i in range(len(texts))
            ]
            assert list(results) == keys  # each call applied once, in order
            grouped = tuple(
                tuple(results[call_key(task.id, turn, i)] for i in range(len(texts)))
                for turn, texts in enumerate(task.call_texts)
            )
            runs[task.id] = TaskRun(task.id, grouped, host.final_states(task.id))
    reference = {task.id: bfcl_direct[task.id] for task in tasks}
    assert format_mismatches(compare_runs(reference, runs)) == "no mismatches"
