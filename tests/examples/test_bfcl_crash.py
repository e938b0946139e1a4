"""Crash tests, one call at a time: a replay run with ``--concurrency 1`` (one turn, so one
call, in flight at any moment) is SIGKILLed around the first state-changing call after the
n-th; the same command run again resumes it. The tasks run as one run group, whose members
interleave (a member parked on an approval lets the next one run), so the call killed is read
from the crash marker, not predicted. Exactly one call is in doubt; the calls completed before
it in its turn are answered from agentq's log; only the call in doubt reaches the service host
again, which refuses it when it had applied it (killed after the commit). The final results and
states match the direct run.
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


def _killed(tasks: list[Task], key: str) -> tuple[int, Kind]:
    """The index in its turn and the kind of the call whose key is `key`."""
    return next(
        (index, kind_of(call.function))
        for task in tasks
        for turn, turn_calls in enumerate(task.calls)
        for index, call in enumerate(turn_calls)
        if call_key(task.id, turn, index) == key
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "after"), [("before", 40), ("during", 150), ("during", 200), ("after", 280)]
)
def test_a_killed_replay_resumes_with_one_call_in_doubt_and_none_applied_twice(
    tmp_path: Path,
    bfcl_tasks: list[Task],
    bfcl_direct: dict[str, TaskRun],
    point: str,
    after: int,
) -> None:
    tasks = bfcl_tasks[:TASKS]
    total = sum(len(texts) for task in tasks for texts in task.call_texts)
    flags = ["--tasks", str(TASKS), "--concurrency", "1", "--crash-after", str(after)]
    flags += ["--crash-at", point]

    crashed = run_replay(tmp_path, "--fresh", *flags, "--transient-rate", "0")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    left = read_crash(tmp_path, point, after)
    key = left.killed
    index, kind = _killed(tasks, key)
    assert kind in (Kind.WRITE, Kind.APPROVAL)  # killed around a state-changing call
    assert left.in_doubt == {key}  # one call in flight: the one the process died around
    # every other applied call completed in agentq's log; the killed one applied only after
    assert left.completed == left.applied - {key}
    assert (key in left.applied) is (point == "after")
    committed = len(left.applied)
    assert committed >= after + (point == "after")
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
