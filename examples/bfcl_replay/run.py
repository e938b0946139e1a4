"""One replay from start to summary: stores, recovery, the run, the check, the exports.

`replay(options)` is what ``python -m examples.bfcl_replay`` runs:

1. opens the service host (its own SQLite file) and agentq's store (a SQLite file, the
   embedded default, or a `MemoryStore`), and a `Queue` with the replay's lanes;
2. builds and registers one workflow per task, then calls `agentq.recover`: a rerun after a
   crash re-admits the dead worker's expired leases and resumes its workflows;
3. drives every workflow to its end, a bounded number at a time, answering approvals with the
   headless `ApprovalPolicy` through ``engine.resume``; workflows still leased by a dead
   worker are taken over as soon as their lease expires (``engine.run`` waits for that);
4. checks every task against the ground truth run directly, exports the event log and a
   static dashboard, and returns the `Summary`.

Run it again on the same files and it finds everything done: no call is applied again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from agentq import (
    DurableStore,
    JobEvent,
    JobEventKind,
    MemoryStore,
    Queue,
    RecoveryReport,
    RunResult,
    RunStatus,
    SqliteStore,
    StepState,
    WorkflowEngine,
    recover,
)
from agentq.store import EVENT_COLUMNS

from .approval import ApprovalPolicy
from .crash import CrashPlan, KillPoint, marker_path
from .dataset import Task, load_tasks
from .direct import run_tasks
from .errors import CallParseError, UnknownFunctionError
from .export import count_events, export_events, write_dashboard
from .plan import (
    LANES,
    STEP_LANE,
    STEP_PERMITS,
    WORKFLOW_PREFIX,
    needs_approval,
    workflow_id,
)
from .replay import ReplayEnv, build_workflows, drive_all
from .report import Summary, check, collect_runs, format_summary, set_verdict
from .servicehost import ServiceHost
from .services import kind_of


@dataclass(frozen=True)
class Options:
    """How to replay (the command line's flags).

    Attributes:
        db: agentq's SQLite file; None for a `MemoryStore` (nothing survives the process).
        services_db: The service host's SQLite file.
        stem: Path prefix of the exports (``<stem>-events.parquet``, ``-dashboard.html``,
            ``-summary.json``); None writes no exports.
        tasks: Replay only the first N tasks; None for all.
        transient_rate: Probability that a call fails transiently before anything is applied.
        crash_after: Kill the process (SIGKILL) once this many calls were applied, at the
            next state-changing call; None never.
        crash_at: Where around that call: before, during (before the commit) or after.
        seed: Seed of the transient-error injector.
        fresh: Delete the files (and a crash marker) first.
        quiet: No progress lines.
        approve: The headless policy: approve every waiting turn (True) or reject it.
        concurrency: Workflows driven at once.
        lease_ttl: Seconds a step's lease lasts without renewal: how soon a rerun takes over
            a killed process's steps.
    """

    db: Path | None = Path("out/bfcl.db")
    services_db: Path = Path("out/bfcl-services.db")
    stem: Path | None = Path("out/bfcl")
    tasks: int | None = None
    transient_rate: float = 0.05
    crash_after: int | None = None
    crash_at: KillPoint = KillPoint.DURING
    seed: int = 0
    fresh: bool = False
    quiet: bool = False
    approve: bool = True
    concurrency: int = STEP_PERMITS
    lease_ttl: float = 2.0


EXPORTS = ("-events.parquet", "-events.csv", "-dashboard.html", "-summary.json")
"""The files a replay writes beside its `Options.stem`."""


def remove_files(options: Options) -> list[Path]:
    """Delete the replay's files (databases with their WAL, crash markers, exports)."""
    paths: list[Path] = []
    for db in (options.db, options.services_db):
        if db is not None:
            paths += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    paths += sorted(options.services_db.parent.glob(f"{options.services_db.name}.crashed-*"))
    if options.stem is not None:
        paths += [options.stem.with_name(options.stem.name + suffix) for suffix in EXPORTS]
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


@dataclass
class _Tally:
    """What this process saw happen to the call jobs (from the queue's job events)."""

    retries: Counter[str] = field(default_factory=Counter)
    cached: int = 0
    done: int = 0

    def on_job(self, event: JobEvent) -> None:
        if not event.key.startswith(WORKFLOW_PREFIX):
            return  # a step attempt, not a call
        if event.kind is JobEventKind.RETRY:
            error = getattr(event.outcome, "error", None)
            name = str(getattr(error, "type", "error")).rsplit(".", 1)[-1]
            self.retries[name] += 1
        elif event.kind in (JobEventKind.CACHED, JobEventKind.JOINED):
            self.cached += 1


class _Progress:
    """Prints a line every `seconds` or every `tasks` finished tasks, whichever comes first."""

    def __init__(
        self, out: TextIO, total: int, host: ServiceHost, tally: _Tally, policy: ApprovalPolicy
    ) -> None:
        self.out, self.total, self.host, self.tally, self.policy = out, total, host, tally, policy
        self.start = time.perf_counter()
        self.printed_at = self.start
        self.printed_done = 0

    def line(self) -> None:
        stats = self.host.stats()
        elapsed = time.perf_counter() - self.start
        print(
            f"[{elapsed:6.1f} s] {self.tally.done:>3}/{self.total} tasks done · "
            f"{stats.applied:>4} calls applied · {self.policy.approved + self.policy.rejected} "
            f"approvals · {sum(self.tally.retries.values())} retries · "
            f"{stats.duplicates} duplicates refused",
            file=self.out,
            flush=True,
        )
        self.printed_at, self.printed_done = time.perf_counter(), self.tally.done

    async def run(self, seconds: float = 2.0, tasks: int = 20) -> None:
        while True:
            await asyncio.sleep(0.1)
            if (
                self.tally.done - self.printed_done >= tasks
                or time.perf_counter() - self.printed_at >= seconds
            ):
                self.line()


@contextlib.asynccontextmanager
async def _store(db: Path | None) -> AsyncIterator[DurableStore]:
    if db is None:
        async with MemoryStore() as memory:
            yield memory
        return
    db.parent.mkdir(parents=True, exist_ok=True)
    async with SqliteStore(db) as sqlite:
        yield sqlite


def _say(options: Options, out: TextIO, text: str) -> None:
    if not options.quiet:
        print(text, file=out, flush=True)


@dataclass
class _Outcome:
    """What driving the workflows left, for the summary."""

    results: dict[str, RunResult]
    report: RecoveryReport
    wall: float
    start_seq: int
    tally: _Tally
    policy: ApprovalPolicy


async def replay(
    options: Options, *, tasks: Sequence[Task] | None = None, out: TextIO = sys.stdout
) -> Summary:
    """Replay the tasks through agentq and check them against the ground truth.

    Args:
        options: Files, fault injection, policy (see `Options`).
        tasks: The tasks; default BFCL's 200 (the first ``options.tasks`` of them).
        out: Where progress lines go.

    Returns:
        The summary (also written to ``<stem>-summary.json`` when `stem` is set).
    """
    if options.fresh:
        remove_files(options)
    if tasks is None:
        tasks = load_tasks(strict=False)
    tasks = list(tasks)[: options.tasks]
    reference = run_tasks(tasks)
    crash = None
    if options.crash_after is not None:
        marker = marker_path(options.services_db, options.crash_at, options.crash_after)
        crash = CrashPlan(options.crash_after, options.crash_at, marker)
    options.services_db.parent.mkdir(parents=True, exist_ok=True)
    with ServiceHost(
        options.services_db,
        tasks,
        transient_error_rate=options.transient_rate,
        seed=options.seed,
        before_commit=None if crash is None else crash.before_commit,
    ) as host:
        applied_before = sum(len(host.results(task.id)) for task in tasks)
        async with Queue(LANES) as queue, _store(options.db) as store:
            outcome = await _drive(options, tasks, host, queue, store, crash, out)
            summary = await _summarize(tasks, store, outcome)
            summary.store = "memory (MemoryStore)" if options.db is None else str(options.db)
            summary.services = str(options.services_db)
            summary.crash = "" if crash is None else crash.describe()
            summary.calls_applied_before = applied_before
            stats = host.stats()
            summary.calls_applied_now = stats.applied
            summary.duplicates_refused_now = stats.duplicates
            set_verdict(summary, check(reference, collect_runs(tasks, outcome.results, host)))
            if options.stem is not None:
                events_path, summary.events = await export_events(store, options.stem)
                summary.events_path = str(events_path)
                dashboard = options.stem.with_name(f"{options.stem.name}-dashboard.html")
                summary.dashboard_path = str(dashboard)
                await write_dashboard(store, queue, dashboard, format_summary(summary))
                write_summary(summary, options.stem)
    return summary


async def _drive(
    options: Options,
    tasks: list[Task],
    host: ServiceHost,
    queue: Queue,
    store: DurableStore,
    crash: CrashPlan | None,
    out: TextIO,
) -> _Outcome:
    engine = WorkflowEngine(queue, store, lease_ttl=options.lease_ttl, priority=STEP_LANE)
    workflows = build_workflows(tasks, ReplayEnv(queue, host, crash))
    for workflow in workflows:
        engine.register_workflow(workflow)
    policy = ApprovalPolicy(approve=options.approve)
    tally = _Tally()
    calls = sum(len(texts) for task in tasks for texts in task.call_texts)
    where = "memory (MemoryStore)" if options.db is None else str(options.db)
    _say(
        options,
        out,
        f"replaying {len(tasks)} BFCL tasks ({calls} tool calls) through agentq · store {where}"
        f" · services {options.services_db} · transient error rate {options.transient_rate:.0%}"
        f" · seed {options.seed}",
    )
    if crash is not None:
        _say(options, out, f"crash injection: {crash.describe()}")
    start_seq = await store.last_seq()
    progress = _Progress(out, len(tasks), host, tally, policy)
    unsubscribe = queue.subscribe(tally.on_job)
    ticker = None if options.quiet else asyncio.get_running_loop().create_task(progress.run())
    started = time.perf_counter()

    def finished(_: RunResult) -> None:
        tally.done += 1

    try:
        report = await recover(engine)
        if report.recovered or report.resumed or report.held_elsewhere:
            _say(options, out, _recovery_line(report))
        results = await drive_all(
            engine,
            workflows,
            policy,
            concurrency=options.concurrency,
            on_result=finished,
            ungated=frozenset(report.held_elsewhere),
        )
        wall = time.perf_counter() - started
    finally:
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        unsubscribe()
        await engine.close()
    if not options.quiet:
        progress.line()
    return _Outcome(results, report, wall, start_seq, tally, policy)


def _recovery_line(report: RecoveryReport) -> str:
    return (
        f"recover(): {len(report.recovered)} expired leases re-admitted · "
        f"{len(report.resumed)} workflows resumed · {len(report.held_elsewhere)} still leased "
        "by a worker that may be alive (taken over once the lease expires) · "
        f"{len(report.unregistered)} unregistered · {len(report.errors)} errors"
    )


def _kinds(tasks: list[Task]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for task in tasks:
        for turn, texts in enumerate(task.call_texts):
            try:
                calls = task.turn_calls(turn)
            except CallParseError:
                kinds["malformed"] += len(texts)
                continue
            for call in calls:
                try:
                    kinds[kind_of(call.function).value] += 1
                except UnknownFunctionError:
                    kinds["unknown"] += 1
    return kinds


async def _summarize(tasks: list[Task], store: DurableStore, outcome: _Outcome) -> Summary:
    # Count only this run's tasks: the store may hold others (a full run, then --tasks 5).
    mine = {workflow_id(task.id) for task in tasks}
    column = EVENT_COLUMNS.index("workflow_id")
    rows = [row for row in await store.event_rows() if row[column] in mine]
    total = count_events(rows)
    now = count_events(rows, outcome.start_seq)
    steps = {
        (row.workflow_id, row.step_index): row
        for row in await store.step_rows()
        if row.workflow_id.startswith(WORKFLOW_PREFIX)
    }
    approved_calls = steps_total = steps_completed = 0
    for task in tasks:
        for turn in range(len(task.call_texts)):
            steps_total += 1
            row = steps.get((workflow_id(task.id), turn))
            if row is None or row.state is not StepState.COMPLETED:
                continue
            steps_completed += 1
            if isinstance(row.output, dict) and "approval" in row.output:
                approved_calls += sum(needs_approval(call) for call in task.turn_calls(turn))
    statuses = Counter(result.status for result in outcome.results.values())
    recovered = len(outcome.report.recovered)
    return Summary(
        tasks=len(tasks),
        completed=statuses[RunStatus.COMPLETED],
        failed=statuses[RunStatus.FAILED] + statuses[RunStatus.CANCELLED],
        waiting=statuses[RunStatus.WAITING],
        steps=steps_total,
        steps_completed=steps_completed,
        step_retries=total["RetryScheduled"],
        calls=sum(len(texts) for task in tasks for texts in task.call_texts),
        calls_by_kind=dict(_kinds(tasks)),
        call_retries_now=sum(outcome.tally.retries.values()),
        retry_causes_now=dict(outcome.tally.retries),
        approvals=total["approved"],
        rejections=total["rejected"],
        approvals_now=outcome.policy.approved,
        approved_calls=approved_calls,
        rejections_now=outcome.policy.rejected,
        approval_policy=outcome.policy.describe(),
        duplicates_cached_now=outcome.tally.cached,
        leases_recovered_now=recovered,
        workflows_resumed_now=len(outcome.report.resumed),
        held_by_dead_worker_now=max(0, now["WorkerRecovered"] - recovered),
        wall_seconds=outcome.wall,
        events=len(rows),
    )


def write_summary(summary: Summary, stem: Path) -> Path:
    """Write ``<stem>-summary.json`` (the summary with its derived counts)."""
    path = stem.with_name(f"{stem.name}-summary.json")
    path.write_text(json.dumps(summary.to_json(), indent=1) + "\n", encoding="utf-8")
    return path
