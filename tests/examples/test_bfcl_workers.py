"""The BFCL replay across worker processes (`examples.bfcl_replay.workers`): a coordinator
starts every task's workflow and answers the approvals through an engine that holds no
definitions, two worker processes serve the store, one is killed with SIGKILL while it holds a
lease, and the survivor finishes everything: every task matches the ground truth, no tool call
is applied twice, and the service host refuses only calls left in doubt by the kill."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentq.store import PostgresStore
from examples.bfcl_replay import workers
from examples.bfcl_replay.dataset import DEFAULT_CATEGORY
from examples.bfcl_replay.workers import (
    DSN_ENV,
    OWNER_MARK,
    NotOurFile,
    StoreNotEmpty,
    WorkersOptions,
    WorkersReport,
    check_files,
    coordinate,
    main,
    parse_args,
)


def _options(
    tmp_path: Path, *, workers: int = 2, kill_one: bool = True, pg: Any = None
) -> WorkersOptions:
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
        dsn=None if pg is None else pg.dsn,
        pg_schema="agentq" if pg is None else pg.schema,
    )


def test_twenty_tasks_on_two_workers_one_killed_all_match_and_nothing_applied_twice(
    tmp_path: Path,
) -> None:
    options = _options(tmp_path)

    report = asyncio.run(coordinate(options))

    _check_killed_run(report, options)
    assert options.db.exists()


def test_twenty_tasks_on_two_workers_on_postgresql_one_killed(
    tmp_path: Path, pg_target: Any
) -> None:
    """The same run with agentq's store in a PostgreSQL schema (the workers are woken by
    LISTEN/NOTIFY); no SQLite file is made for the store."""
    options = _options(tmp_path, pg=pg_target)

    report = asyncio.run(coordinate(options))

    _check_killed_run(report, options)
    assert not options.db.exists()

    async def stored() -> int:
        async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
            return len(await store.workflows())

    assert asyncio.run(stored()) == 20


def test_a_postgresql_schema_that_holds_workflows_is_refused_untouched(
    tmp_path: Path, pg_target: Any
) -> None:
    async def seed() -> int:
        async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
            await store.start_workflow("mine", ["s"], None, 1_767_225_600.0, definition="d")
            return len(await store.load_events())

    before = asyncio.run(seed())
    options = _options(tmp_path, pg=pg_target)
    # finding 6: the service host file that goes with that schema (made by an earlier run)
    # is kept too: the schema is checked before any file is touched
    with sqlite3.connect(options.services_db) as db:
        db.execute("CREATE TABLE applied_calls (idempotency_key TEXT)")
        db.execute("INSERT INTO applied_calls VALUES ('k1')")
    db.close()
    options.services_db.with_name(options.services_db.name + ".owner").write_text(OWNER_MARK)
    kept = options.services_db.read_bytes()
    with pytest.raises(StoreNotEmpty, match=f"schema '{pg_target.schema}' already holds 1"):
        asyncio.run(coordinate(options))
    assert options.services_db.read_bytes() == kept

    async def after() -> int:
        async with PostgresStore(pg_target.dsn, schema=pg_target.schema) as store:
            return len(await store.load_events())

    assert asyncio.run(after()) == before


@pytest.mark.parametrize("which", ["db", "services_db"])
def test_a_file_this_example_did_not_make_is_refused_untouched(
    tmp_path: Path, which: str
) -> None:
    """Finding 7: `--db out/bfcl.db` (the single-process replay's store) or any other file
    the coordinator did not make is refused before anything is touched; --fresh deletes it."""
    options = _options(tmp_path, kill_one=False)
    theirs = getattr(options, which)
    with sqlite3.connect(theirs) as db:
        db.execute("CREATE TABLE workflows (id TEXT)")
    db.close()
    kept = theirs.read_bytes()
    with pytest.raises(NotOurFile, match=r"was not made by this coordinator.*--fresh"):
        asyncio.run(coordinate(options))
    assert theirs.read_bytes() == kept
    assert not (options.services_db if which == "db" else options.db).exists()
    assert check_files(replace(options, fresh=True)) == [options.db, options.services_db]
    theirs.with_name(theirs.name + ".owner").write_text(OWNER_MARK)  # a file it made
    assert check_files(options) == [options.db, options.services_db]


def test_an_unreachable_dsn_ends_in_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review of session 4: a ``--dsn`` nothing answers at (a port bound but not listening,
    so the connection is refused; no PostgreSQL server needed) is one line on stderr and exit
    status 2, not a traceback; no worker was spawned and no file made."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, never listening: the port refuses connections
        port = taken.getsockname()[1]
        services = tmp_path / "services.db"
        status = main(["--dsn", f"postgresql://nobody@127.0.0.1:{port}/x", "--services-db",
                       str(services), "--tasks", "1", "--quiet"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: cannot open PostgreSQL database")
    assert f"port={port}" in err and "Traceback" not in err
    assert not services.exists()


def test_ctrl_c_in_the_coordinator_stops_the_workers_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (``KeyboardInterrupt``) is one line and exit status 130, and a worker left
    running (a second Ctrl-C cut the coordinator's own stop short) is killed, not orphaned."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], text=True)

    async def interrupted(
        options: WorkersOptions, spawned: list[subprocess.Popen[str]]
    ) -> WorkersReport:
        spawned.append(worker)
        raise KeyboardInterrupt

    monkeypatch.setattr(workers, "coordinate", interrupted)
    assert main(["--quiet"]) == 130
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("interrupted:") and "Traceback" not in err
    assert worker.poll() is not None  # killed and reaped


def test_one_file_for_both_or_a_directory_is_refused(tmp_path: Path) -> None:
    options = _options(tmp_path)
    with pytest.raises(NotOurFile, match="name one file"):
        check_files(replace(options, services_db=options.db))
    with pytest.raises(NotOurFile, match="is a directory"):
        check_files(replace(options, db=tmp_path))


def test_workers_read_the_dsn_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DSN_ENV, "postgresql://u:pw@db/x")
    worker, name = parse_args(["--serve", "w0", "--pg-schema", "s1"])
    assert name == "w0" and worker.dsn == "postgresql://u:pw@db/x" and worker.pg_schema == "s1"
    coordinator, _ = parse_args([])  # the coordinator takes --dsn only
    assert coordinator.dsn is None and "pw" not in coordinator.where()
    with_dsn, _ = parse_args(["--dsn", "postgresql://u:pw@db/x"])
    assert with_dsn.where() == "PostgreSQL schema 'agentq'"


def _check_killed_run(report: WorkersReport, options: WorkersOptions) -> None:
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
        (["--transient-rate", "2"], "--transient-rate must be in [0, 1), got 2.0"),
        (["--transient-rate", "-1"], "--transient-rate must be in [0, 1), got -1.0"),
        (["--tasks", "-1"], "--tasks must be >= 1, got -1"),
        (["--tasks", "0"], "--tasks must be >= 1, got 0"),
        (["--pg-schema", "nope"], "--pg-schema needs --dsn"),
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
