"""The BFCL replay across worker processes (`examples.bfcl_replay.workers`): a coordinator
starts every task's workflow and answers the approvals through an engine that holds no
definitions, two worker processes serve the store, one is killed with SIGKILL while it holds a
lease, and the survivor finishes everything: every task matches the ground truth, no tool call
is applied twice, and the service host refuses only calls left in doubt by the kill."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from examples.bfcl_replay.dataset import DEFAULT_CATEGORY
from examples.bfcl_replay.workers import WorkersOptions, coordinate, parse_args


def _options(tmp_path: Path, *, workers: int = 2, kill_one: bool = True) -> WorkersOptions:
    return WorkersOptions(
        workers=workers,
        kill_one=kill_one,
        db=tmp_path / "bfcl-workers.db",
        services_db=tmp_path / "bfcl-workers-services.db",
        categories=(DEFAULT_CATEGORY,),
        tasks=20,
        transient_rate=0.05,
        seed=0,
        quiet=True,
    )


def test_twenty_tasks_on_two_workers_one_killed_all_match_and_nothing_applied_twice(
    tmp_path: Path,
) -> None:
    options = _options(tmp_path)

    report = asyncio.run(coordinate(options))

    assert report.ok, report.format()
    assert report.tasks == 20 and len(report.verdict.matched) == 20
    assert report.killed == 1 and report.workers == 2
    # The survivor took over the killed worker's leases.
    assert report.worker_recovered >= 1
    # Each call's key is applied once (the host's primary key), every call of every task.
    with sqlite3.connect(options.services_db) as db:
        keys = [key for (key,) in db.execute("SELECT idempotency_key FROM applied_calls")]
    assert len(keys) == len(set(keys)) == report.calls == report.applied
    # The host refused only calls in doubt at the kill (started, never recorded), each once.
    assert len(report.refused) == len(set(report.refused))
    assert set(report.refused) <= set(report.reruns)
    (survivor,) = report.survivors
    assert survivor["worker"] == "w1" and survivor["duplicates"] == len(report.refused)
    assert "20/20 tasks match the ground truth" in report.format()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (["--workers", "1", "--kill-one"], "--kill-one needs --workers 2 or more"),
    ],
)
def test_bad_worker_counts_are_refused_with_the_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_services_file_defaults_beside_the_store() -> None:
    options, serve = parse_args(["--db", "out/x.db"])
    assert options.services_db == Path("out/x-services.db") and serve is None
