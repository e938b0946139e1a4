"""The durable service host: exactly-once per key, same results as the direct run."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from examples.bfcl_replay.dataset import Call, Task, parse_call
from examples.bfcl_replay.direct import TaskRun, compare_runs, format_mismatches
from examples.bfcl_replay.errors import (
    KeyConflictError,
    ToolCallError,
    TransientToolError,
    UnknownFunctionError,
)
from examples.bfcl_replay.servicehost import Applied, HostStats, ServiceHost
from examples.bfcl_replay.services import Services
from examples.bfcl_replay.snapshot import canonical_json


def call_key(task_id: str, turn: int, index: int) -> str:
    """The idempotency key these tests give a ground-truth call."""
    return f"{task_id}/{turn}/{index}"


def _calls(task: Task) -> Iterator[tuple[str, Call]]:
    for turn, calls in enumerate(task.calls):
        for index, call in enumerate(calls):
            yield call_key(task.id, turn, index), call


def _apply_task(host: ServiceHost, task: Task) -> None:
    for key, call in _calls(task):
        while True:
            try:
                host.apply(task.id, key, call)
                break
            except TransientToolError:
                continue


def _runs(host: ServiceHost, tasks: list[Task]) -> dict[str, TaskRun]:
    runs = {}
    for task in tasks:
        stored = host.results(task.id)
        results = tuple(
            tuple(stored[call_key(task.id, turn, i)] for i in range(len(texts)))
            for turn, texts in enumerate(task.call_texts)
        )
        runs[task.id] = TaskRun(task.id, results, host.final_states(task.id))
    return runs


def _rows(path: Path) -> tuple[int, str]:
    with sqlite3.connect(path) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM applied_calls").fetchone()
        states = db.execute("SELECT * FROM service_state ORDER BY 1, 2").fetchall()
    db.close()
    return count, repr(states)


@pytest.fixture
def task(bfcl_tasks: list[Task]) -> Task:
    """A travel task: books (with a random booking id), insures, pays, messages."""
    return next(t for t in bfcl_tasks if t.id == "multi_turn_base_171")


def test_all_200_tasks_match_the_direct_run(
    tmp_path: Path, bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    with ServiceHost(tmp_path / "host.sqlite3", bfcl_tasks) as host:
        for task in bfcl_tasks:
            _apply_task(host, task)
        assert host.stats() == HostStats(applied=1142)
        runs = _runs(host, bfcl_tasks)
    assert format_mismatches(compare_runs(bfcl_direct, runs)) == "no mismatches"


def test_with_transient_errors_and_from_threads_it_still_matches(
    tmp_path: Path, bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    path = tmp_path / "host.sqlite3"
    with ServiceHost(path, bfcl_tasks, transient_error_rate=0.3, seed=5) as host:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda task: _apply_task(host, task), bfcl_tasks))
        stats = host.stats()
        runs = _runs(host, bfcl_tasks)
    assert stats.applied == 1142
    assert stats.duplicates == 0
    assert stats.transient_errors > 300
    assert format_mismatches(compare_runs(bfcl_direct, runs)) == "no mismatches"


def test_a_duplicate_key_returns_the_stored_result_and_applies_nothing(
    tmp_path: Path, task: Task
) -> None:
    key, call = next(_calls(task))
    path = tmp_path / "host.sqlite3"
    with ServiceHost(path, [task]) as host:
        first = host.apply(task.id, key, call)
        states = canonical_json(host.final_states(task.id))
        rows = _rows(path)
        again = host.apply(task.id, key, call)
        assert again == Applied(first.result, duplicate=True)
        assert first.duplicate is False
        assert canonical_json(host.final_states(task.id)) == states
        assert _rows(path) == rows
        assert host.stats() == HostStats(applied=1, duplicates=1)
    with ServiceHost(path, [task]) as reopened:
        assert reopened.apply(task.id, key, call) == Applied(first.result, duplicate=True)


def test_a_key_reused_for_another_call_is_refused(tmp_path: Path, task: Task) -> None:
    (key, call), (_, other) = list(_calls(task))[:2]
    with ServiceHost(tmp_path / "host.sqlite3", [task]) as host:
        host.apply(task.id, key, call)
        with pytest.raises(KeyConflictError, match=f"{key!r} was applied to"):
            host.apply(task.id, key, other)


def test_a_transient_error_leaves_no_trace(tmp_path: Path, task: Task) -> None:
    path = tmp_path / "host.sqlite3"
    calls = list(_calls(task))
    with ServiceHost(path, [task], transient_error_rate=0.5, seed=1) as host:
        failures = 0
        for key, call in calls:
            before = (_rows(path), canonical_json(host.final_states(task.id)))
            while True:
                try:
                    host.apply(task.id, key, call)
                    break
                except TransientToolError:
                    failures += 1
                    assert (_rows(path), canonical_json(host.final_states(task.id))) == before
        assert failures == host.stats().transient_errors > 0
        results = host.results(task.id)
    with ServiceHost(tmp_path / "clean.sqlite3", [task]) as clean:
        for key, call in calls:
            clean.apply(task.id, key, call)
        assert clean.results(task.id) == results


def test_a_call_that_raises_is_not_applied_and_the_cache_is_dropped(
    tmp_path: Path, task: Task
) -> None:
    path = tmp_path / "host.sqlite3"
    calls = list(_calls(task))
    with ServiceHost(path, [task]) as host:
        host.apply(task.id, *calls[0])
        rows = _rows(path)
        bad = parse_call("compute_exchange_rate(base_currency='USD', target_currency='X', value=1)")
        with pytest.raises(ToolCallError, match="raised ValueError"):
            host.apply(task.id, "bad", bad)
        with pytest.raises(UnknownFunctionError):
            host.apply(task.id, "unknown", parse_call("teleport()"))
        assert _rows(path) == rows
        for key, call in calls[1:]:
            host.apply(task.id, key, call)
        results = host.results(task.id)
    with ServiceHost(tmp_path / "clean.sqlite3", [task]) as clean:
        for key, call in calls:
            clean.apply(task.id, key, call)
        assert clean.results(task.id) == results


def test_a_failure_before_commit_rolls_everything_back(tmp_path: Path, task: Task) -> None:
    calls = list(_calls(task))
    failing = {calls[1][0]}

    def before_commit(key: str) -> None:
        if key in failing:
            failing.discard(key)
            raise OSError("disk on fire")

    path = tmp_path / "host.sqlite3"
    with ServiceHost(path, [task], before_commit=before_commit) as host:
        host.apply(task.id, *calls[0])
        rows = _rows(path)
        with pytest.raises(OSError, match="disk on fire"):
            host.apply(task.id, *calls[1])
        assert _rows(path) == rows
        for key, call in calls[1:]:
            assert host.apply(task.id, key, call).duplicate is False
        results = host.results(task.id)
    with ServiceHost(tmp_path / "clean.sqlite3", [task]) as clean:
        for key, call in calls:
            clean.apply(task.id, key, call)
        assert clean.results(task.id) == results


def test_two_hosts_on_one_file_never_use_a_stale_cache(
    tmp_path: Path, bfcl_tasks: list[Task], bfcl_direct: dict[str, TaskRun]
) -> None:
    tasks = bfcl_tasks[:40]
    path = tmp_path / "host.sqlite3"
    with ServiceHost(path, tasks) as one, ServiceHost(path, tasks) as two:
        for task in tasks:
            for number, (key, call) in enumerate(_calls(task)):
                (one if number % 2 else two).apply(task.id, key, call)
        runs = _runs(one, tasks)
    expected = {task.id: bfcl_direct[task.id] for task in tasks}
    assert format_mismatches(compare_runs(expected, runs)) == "no mismatches"


def test_states_of_untouched_services_are_their_initial_states(
    tmp_path: Path, task: Task, bfcl_direct: dict[str, TaskRun]
) -> None:
    with ServiceHost(tmp_path / "host.sqlite3", [task]) as host:
        assert host.results(task.id) == {}
        states = host.final_states(task.id)
    assert canonical_json(states) == canonical_json(Services.fresh(task).states())


def test_misuse_raises_value_error(tmp_path: Path, task: Task) -> None:
    with pytest.raises(ValueError, match="transient_error_rate must be in"):
        ServiceHost(tmp_path / "host.sqlite3", [task], transient_error_rate=1.0)
    with ServiceHost(tmp_path / "host.sqlite3", [task]) as host:
        with pytest.raises(ValueError, match="unknown task id 'nope'"):
            host.apply("nope", "k", parse_call("ls()"))
        with pytest.raises(ValueError, match="unknown task id"):
            host.final_states("nope")


def test_the_file_is_in_wal_mode_and_closes_cleanly(tmp_path: Path, task: Task) -> None:
    path = tmp_path / "host.sqlite3"
    host = ServiceHost(path, [task])
    host.apply(task.id, *next(_calls(task)))
    host.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()
