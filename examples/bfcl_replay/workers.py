"""The BFCL replay across worker processes: ``python -m examples.bfcl_replay.workers``.

Each task's workflow becomes a `WorkflowDef` named like its workflow id (``bfcl/<task id>``:
one definition per task, since a task's steps close over its calls), registered identically in
every worker process. The coordinator (this module's `coordinate`):

1. removes the two SQLite files (agentq's store, default ``out/bfcl-workers.db``, and the
   service host's beside it) and starts every instance (``engine.start``) on an engine of its
   own that then holds no definitions;
2. spawns N worker processes (``--serve``) that register the definitions and ``await
   engine.serve()`` on the same store; they apply the calls through the same service host
   file (its ``apply`` is one ``BEGIN IMMEDIATE`` transaction keyed by the call's key, and its
   cache is checked against the file in every transaction, so it is safe across processes);
3. answers every approval wait with the same `ApprovalPolicy` as the single-process replay,
   through ``engine.resume`` (the coordinator holds no definition: it gets `Recorded`, and a
   serving worker runs the step on);
4. with ``--kill-one``, SIGKILLs the first worker (``w0``) once a fifth of the calls were
   applied and it holds a step's lease (looked at every ``POLL / 10`` s until then: a worker
   that started late may hold few leases) (so that there is something to take over): the others
   take over its expired leases (``WorkerRecovered``), and a call it left in doubt is sent
   again and refused by the service host if it had applied it, which returns the stored
   result;
5. waits until every workflow is closed, stops the survivors (SIGTERM: each prints its host
   counts as one JSON line), rebuilds each task's run from the store (an ended workflow's
   ``engine.run(id)`` returns its stored result) and checks it against the ground truth run
   directly, prints the summary, and exits 0 only when every task matches.

Decisions: a separate module, so that run.py (the single-process replay) stays as it is; its
own default files (``out/bfcl-workers.db``), since the single-process replay stores the same
workflow ids as plain workflows; worker i injects transient errors with seed ``--seed + i``.

The store: a SQLite file (``--db``, removed and made anew by each run, but only a file this
coordinator made, known by the owner mark ``<file>.owner`` it writes beside it, or an absent or
empty one; any other existing file is refused, `NotOurFile`, unless ``--fresh`` is given; the
same for ``--services-db``; every refusal comes before any file is touched), or PostgreSQL with
``--dsn DSN [--pg-schema NAME]`` (the DSN forms and the option name of the ``agentq`` command
line; schema ``agentq`` by default). A PostgreSQL schema is never dropped: one that already
holds workflows is refused (`StoreNotEmpty`: drop it or name another). The workers get the
DSN through the environment (``AGENTQ_BFCL_DSN``), not their argv, so that ``ps`` never shows
its password. The service host stays a SQLite file (``--services-db``) either way: it stands
for the outside world, not for agentq's store.

How it ends badly (`main`): a refusal, or a store that cannot be reached or fails (an
unreachable ``--dsn``: `agentq.StoreError`), prints one line ``error: …`` on stderr and exits 2;
Ctrl-C (``KeyboardInterrupt`` in the coordinator) prints ``interrupted: …`` and exits 130. No
traceback either way, and no worker outlives the coordinator: the workers run in a process
group of their own (so the terminal's Ctrl-C reaches only the coordinator, which stops them),
every one spawned is stopped with SIGTERM (SIGKILL after `STOP_WAIT` s) however `coordinate`
ends, and `main` kills any left running by a second Ctrl-C during that stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentq import (
    EventKind,
    Queue,
    StepStatus,
    StoreError,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.store import EVENT_COLUMNS, DurableStore, PostgresStore, SqliteStore, StepState

from .approval import ApprovalPolicy
from .dataset import DEFAULT_CATEGORY, Task, categories
from .direct import run_tasks
from .plan import LANES, STEP_LANE, workflow_id
from .replay import ReplayEnv, build_workflow
from .report import Verdict, check, collect_runs
from .selection import count_reruns, read_selection, select_tasks
from .servicehost import ServiceHost

LEASE_TTL = 2.0
"""Seconds a step's lease lasts: how soon a survivor takes over a killed worker's steps."""

POLL = 0.2
"""Seconds between two reads of the ready work (workers) or of the waits (coordinator)."""

STOP_WAIT = 60.0
"""Seconds a worker has to stop after SIGTERM before it is killed with SIGKILL."""

DSN_ENV = "AGENTQ_BFCL_DSN"
"""The environment variable that hands ``--dsn`` to the worker processes."""


class Refused(Exception):
    """The coordinator refuses to start; nothing was changed (exit status 2)."""


class StoreNotEmpty(Refused):
    """The PostgreSQL schema given already holds workflows (it is never dropped for you)."""


class NotOurFile(Refused):
    """A file the coordinator would make anew (``--db``, ``--services-db``) exists and is
    not one it made (no owner mark beside it): it is never deleted without ``--fresh``."""


OWNER_MARK = "made by python -m examples.bfcl_replay.workers; deleted by its next run\n"
"""The text of the owner mark ``<file>.owner`` the coordinator writes beside each file it
makes: a later run deletes a file only when this mark is beside it (or with ``--fresh``)."""


def _mark(path: Path) -> Path:
    return path.with_name(path.name + ".owner")


def _ours(path: Path) -> bool:
    """Whether `path` may be deleted and made anew: absent, empty, or marked as ours."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return True
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return _mark(path).read_text(encoding="utf-8") == OWNER_MARK
    return False


def check_files(options: WorkersOptions) -> list[Path]:
    """Return the files the coordinator will make anew, after checking it may.

    Raises:
        NotOurFile: A file is a directory, `db` and `services_db` are one file, or a file
            exists that this example did not make and `fresh` is not set. Nothing was
            changed.
    """
    files = [options.services_db] if options.dsn else [options.db, options.services_db]
    if len({f.resolve() for f in files}) < len(files):
        raise NotOurFile(f"--db and --services-db name one file ({options.db}): give two")
    for path in files:
        if path.is_dir():
            raise NotOurFile(f"{path} is a directory: give a file path")
        if not options.fresh and not _ours(path):
            raise NotOurFile(
                f"{path} exists and was not made by this coordinator (no {_mark(path).name} "
                "beside it): give another path, or pass --fresh to delete it"
            )
    return files


def _make_anew(files: Sequence[Path]) -> None:
    """Delete `files` (and their -wal/-shm), mark each as ours for the next run."""
    for db in files:
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            path.unlink(missing_ok=True)
        db.parent.mkdir(parents=True, exist_ok=True)
        _mark(db).write_text(OWNER_MARK, encoding="utf-8")


def definitions(tasks: Sequence[Task], env: ReplayEnv) -> list[tuple[WorkflowDef, object]]:
    """Return each task's definition (named like its workflow id) with its instance's input."""
    pairs: list[tuple[WorkflowDef, object]] = []
    for task in tasks:
        workflow = build_workflow(task, env)
        pairs.append((WorkflowDef(workflow.id, workflow.steps), workflow.input))
    return pairs


@dataclass(frozen=True)
class WorkersReport:
    """What a run across workers left (`coordinate`).

    Attributes:
        verdict: The ground-truth check of every task whose workflow closed.
        tasks: Tasks replayed.
        calls: Tool calls in those tasks.
        applied: Rows in the service host's ``applied_calls`` (one per key, never two).
        workers: Worker processes spawned.
        killed: Workers killed with SIGKILL (0 or 1).
        worker_recovered: ``WorkerRecovered`` events in the log (leases taken over).
        reruns: Keys of the calls in doubt that were sent again (``CallStarted`` rerun).
        refused: Keys the surviving workers' host refused as already applied.
        survivors: Each surviving worker's host counts (its JSON line).
        wall: Seconds from the first start to the last workflow closed.
    """

    verdict: Verdict
    tasks: int
    calls: int
    applied: int
    workers: int
    killed: int
    worker_recovered: int
    reruns: tuple[str, ...]
    refused: tuple[str, ...]
    survivors: tuple[dict[str, Any], ...]
    wall: float

    @property
    def ok(self) -> bool:
        """Every task matches, each call applied once, and only calls in doubt refused."""
        return (
            self.verdict.ok
            and self.verdict.total == self.tasks
            and self.applied == self.calls
            and set(self.refused) <= set(self.reruns)
        )

    def format(self) -> str:
        """The summary lines a person reads."""
        return (
            f"{self.verdict.headline()}\n"
            f"workers {self.workers} · killed {self.killed} · WorkerRecovered "
            f"{self.worker_recovered} · wall {self.wall:.1f} s\n"
            f"calls {self.calls} · applied {self.applied} (once each) · calls in doubt sent "
            f"again {len(self.reruns)} · refused by the host {len(self.refused)} "
            f"{list(self.refused)}\n"
            f"survivors' host counts: {list(self.survivors)}"
        )


@dataclass(frozen=True)
class WorkersOptions:
    """The command line (see `parse_args`)."""

    workers: int
    kill_one: bool
    db: Path
    services_db: Path
    categories: tuple[str, ...]
    tasks: int | None
    transient_rate: float
    seed: int
    quiet: bool
    dsn: str | None = None
    """A PostgreSQL DSN: agentq's store is there (in `pg_schema`) instead of `db`."""
    pg_schema: str = "agentq"
    fresh: bool = False
    """Delete `db` and `services_db` even when this example did not make them."""

    def store(self) -> SqliteStore | PostgresStore:
        """agentq's store, not yet open (``async with`` opens and closes it)."""
        if self.dsn is None:
            return SqliteStore(self.db)
        return PostgresStore(self.dsn, schema=self.pg_schema)

    def where(self) -> str:
        """The store as the coordinator names it (a DSN's password left out)."""
        if self.dsn is None:
            return str(self.db)
        return f"PostgreSQL schema {self.pg_schema!r}"


def _tasks(options: WorkersOptions) -> list[Task]:
    return list(select_tasks(options.categories, options.tasks, None).tasks)


async def serve(options: WorkersOptions, name: str) -> None:
    """A worker process: register every task's definition and serve until SIGTERM.

    On SIGTERM it stops serving (handing its leases back) and prints its service host's
    counts as one JSON line: ``{"worker": ..., "applied": n, "duplicates": n, "refused": [...]}``.
    """
    tasks = _tasks(options)
    loop = asyncio.get_running_loop()
    with ServiceHost(
        options.services_db, tasks, transient_error_rate=options.transient_rate,
        seed=options.seed,
    ) as host:
        async with Queue(LANES) as queue, options.store() as store:
            engine = WorkflowEngine(
                queue, store, worker_id=f"{name}:{os.getpid()}", lease_ttl=LEASE_TTL,
                priority=STEP_LANE,
            )
            for definition, _ in definitions(tasks, ReplayEnv(host)):
                engine.register(definition)
            server = asyncio.ensure_future(engine.serve(poll_interval=POLL))
            loop.add_signal_handler(signal.SIGTERM, server.cancel)
            print("serving", flush=True)
            with contextlib.suppress(asyncio.CancelledError):
                await server
        stats = host.stats()
        line = {"worker": name, "applied": stats.applied, "duplicates": stats.duplicates,
                "refused": host.refused_keys()}
        print(json.dumps(line), flush=True)


def _applied(services_db: Path) -> int:
    with contextlib.closing(sqlite3.connect(services_db, timeout=10)) as db:
        (count,) = db.execute("SELECT count(*) FROM applied_calls").fetchone()
    return int(count)


async def _approve(engine: WorkflowEngine, policy: ApprovalPolicy) -> int:
    """Answer every wait now open; return how many were answered."""
    answered = 0
    for row in await engine.store.step_rows():
        if row.state is not StepState.WAITING:
            continue
        status = (await engine.status(row.workflow_id))[row.step_index]
        if not isinstance(status, StepStatus.Waiting):
            continue
        resumed = await policy.answer(
            engine, row.workflow_id, row.step_name, row.reason or "", key=status.key,
            details=status.details,
        )
        answered += resumed is not None
    return answered


async def _holding(
    store: DurableStore, services_db: Path, proc: subprocess.Popen[str], calls: int
) -> bool:
    """Whether a fifth of the calls were applied and worker w0 (`proc`) holds a step's lease."""
    if _applied(services_db) * 5 < calls:
        return False
    worker = f"w0:{proc.pid}"
    return any(
        row.state is StepState.LEASED and row.worker_id == worker
        for row in await store.step_rows()
    )


def _spawn(options: WorkersOptions, index: int) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "examples.bfcl_replay.workers", "--serve", f"w{index}",
        "--db", str(options.db), "--services-db", str(options.services_db),
        "--pg-schema", options.pg_schema,
        "--transient-rate", str(options.transient_rate), "--seed", str(options.seed + index),
        "--category", *options.categories,
    ]
    if options.tasks is not None:
        argv += ["--tasks", str(options.tasks)]
    root = str(Path(__file__).resolve().parents[2])  # where `examples` is importable from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    env.pop(DSN_ENV, None)
    if options.dsn is not None:
        env[DSN_ENV] = options.dsn
    # a process group of its own: the terminal's Ctrl-C reaches the coordinator alone, which
    # stops every worker (`_stop`), rather than each worker dying with its own traceback
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, process_group=0)


def _stop(procs: Sequence[subprocess.Popen[str]]) -> list[str]:
    """Stop every worker still running (SIGTERM, then SIGKILL after `STOP_WAIT` s); return
    the JSON lines they printed (their host counts)."""
    lines: list[str] = []
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        lines += [line for line in (out or "").splitlines() if line.startswith("{")]
    return lines


def _wait_serving(proc: subprocess.Popen[str]) -> None:
    """Block until a worker printed ``serving`` (or exited: its end is seen later)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "serving":
            return


def _say(options: WorkersOptions, text: str) -> None:
    if not options.quiet:
        print(text, flush=True)


async def coordinate(
    options: WorkersOptions, spawned: list[subprocess.Popen[str]] | None = None
) -> WorkersReport:
    """Run the replay across `options.workers` processes (see the module docstring).

    Args:
        options: The command line.
        spawned: A list the worker processes are appended to as they are spawned, so that a
            caller can stop any left running by an interruption (`main` does); every one is
            stopped (`_stop`) however this ends.

    Raises:
        StoreError: agentq's store cannot be opened (an unreachable ``--dsn``) or failed;
            the workers spawned were stopped.
        StoreNotEmpty: The PostgreSQL schema already holds workflows (nothing was changed).
        NotOurFile: See `check_files` (nothing was changed).
    """
    files = check_files(options)  # every refusal comes before anything is touched
    if options.dsn is not None:
        async with options.store() as store:
            if existing := await store.workflows():
                raise StoreNotEmpty(
                    f"{options.where()} already holds {len(existing)} workflow(s): drop it "
                    f'(DROP SCHEMA "{options.pg_schema}" CASCADE) or give another --pg-schema'
                )
    _make_anew(files)
    tasks = _tasks(options)
    reference = run_tasks(tasks)
    calls = sum(len(texts) for task in tasks for texts in task.call_texts)
    policy = ApprovalPolicy(approve=True)
    ids = [workflow_id(task.id) for task in tasks]
    started = time.perf_counter()
    with ServiceHost(options.services_db, tasks) as host:
        async with Queue(LANES) as queue, options.store() as store:
            engine = WorkflowEngine(queue, store, lease_ttl=LEASE_TTL, priority=STEP_LANE)
            procs = spawned if spawned is not None else []
            killed = 0
            try:
                for index in range(options.workers):
                    procs.append(_spawn(options, index))
                # every worker serving before the work exists: each gets a share of it (a
                # slow start must not leave w0 with nothing to hold when --kill-one looks)
                for proc in procs:
                    await asyncio.to_thread(_wait_serving, proc)
                for definition, task_input in definitions(tasks, ReplayEnv(host)):
                    await engine.start(definition, definition.name, task_input)
                for name in list(engine.definitions):  # the coordinator runs nothing itself
                    engine.unregister(name)
                _say(options, f"started {len(tasks)} workflows ({calls} tool calls); "
                     f"{options.workers} workers serving {options.where()}")
                while True:
                    await _approve(engine, policy)
                    if options.kill_one and not killed and await _holding(
                        store, options.services_db, procs[0], calls
                    ):
                        procs[0].send_signal(signal.SIGKILL)
                        procs[0].wait()
                        killed = 1
                        _say(options, f"killed worker w0 (pid {procs[0].pid}) with SIGKILL")
                    rows = {row.workflow_id: row for row in await store.workflows()}
                    if all(i in rows and rows[i].state.closed for i in ids):
                        break
                    if all(p.poll() is not None for p in procs):
                        _say(options, "every worker exited before the end")
                        break
                    await asyncio.sleep(POLL / 10 if options.kill_one and not killed else POLL)
            finally:
                lines = _stop(procs)
            wall = time.perf_counter() - started
            counts = [json.loads(line) for line in lines]
            results = {i: await engine.run(i) for i in ids if rows.get(i) and rows[i].state.closed}
            verdict = check(reference, collect_runs(
                [t for t in tasks if workflow_id(t.id) in results], results, host))
            reading = await read_selection(engine, ids)
            kind = EVENT_COLUMNS.index("kind")
            recovered = sum(row[kind] == EventKind.WORKER_RECOVERED for row in reading.events)
            reruns = await count_reruns(engine, reading.calls, 0)
            refused = sorted(key for c in counts for key in c["refused"])
            applied_rows = _applied(options.services_db)
    return WorkersReport(
        verdict=verdict, tasks=len(tasks), calls=calls, applied=applied_rows,
        workers=options.workers, killed=killed, worker_recovered=recovered,
        reruns=tuple(reruns), refused=tuple(refused), survivors=tuple(counts), wall=wall,
    )


def parse_args(argv: Sequence[str] | None = None) -> tuple[WorkersOptions, str | None]:
    """Parse the command line: the options, and the worker's name with ``--serve``."""
    parser = argparse.ArgumentParser(prog="python -m examples.bfcl_replay.workers")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--kill-one", action="store_true")
    parser.add_argument("--db", type=Path, default=Path("out/bfcl-workers.db"))
    parser.add_argument("--services-db", type=Path, default=None)
    parser.add_argument(
        "--dsn", default=None,
        help="a PostgreSQL DSN (postgresql://… or libpq's key=value form): agentq's store "
        f"goes there instead of --db (workers get it through ${DSN_ENV})",
    )
    parser.add_argument("--pg-schema", default="agentq",
                        help="the PostgreSQL schema of agentq's tables (with --dsn)")
    parser.add_argument("--category", nargs="+", choices=[*categories()],
                        default=[DEFAULT_CATEGORY])
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--transient-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--fresh", action="store_true",
        help="delete --db and --services-db even if this example did not make them",
    )
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if not 0 <= args.transient_rate < 1:  # NaN too
        parser.error(f"--transient-rate must be in [0, 1), got {args.transient_rate}")
    if args.tasks is not None and args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")
    if args.dsn is None and args.serve is None and "--pg-schema" in (argv or sys.argv[1:]):
        parser.error("--pg-schema needs --dsn (the SQLite store has no schema)")
    if args.kill_one and args.workers < 2:
        parser.error("--kill-one needs --workers 2 or more (a survivor finishes the work)")
    services = args.services_db or args.db.with_name(f"{args.db.stem}-services.db")
    dsn = args.dsn if args.serve is None else os.environ.get(DSN_ENV)
    options = WorkersOptions(
        args.workers, args.kill_one, args.db, services, tuple(args.category), args.tasks,
        args.transient_rate, args.seed, args.quiet, dsn, args.pg_schema, args.fresh,
    )
    return options, args.serve


def _one_line(exc: BaseException) -> str:
    """`exc`'s message on one line (libpq's messages span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Coordinate (default) or serve (``--serve NAME``); return the exit status.

    Returns:
        0: every task matches; 1: some do not; 2: refused, or agentq's store cannot be
        reached or failed (one line ``error: …`` on stderr, no traceback); 130: Ctrl-C
        (``interrupted: …``), after every worker was stopped.
    """
    options, name = parse_args(argv)
    if name is not None:
        try:
            asyncio.run(serve(options, name))
        except StoreError as exc:
            print(f"error: worker {name}: {_one_line(exc)}", file=sys.stderr, flush=True)
            return 2
        return 0
    spawned: list[subprocess.Popen[str]] = []
    try:
        report = asyncio.run(coordinate(options, spawned))
    except (Refused, StoreError) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        for proc in spawned:  # a second Ctrl-C may have cut `_stop` short
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        print(f"interrupted: the workers ({len(spawned)}) were stopped; {options.where()} "
              "holds the run as far as it went", file=sys.stderr, flush=True)
        return 130
    print(report.format(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
