"""One replay from start to summary: stores, recovery, the run, the check, the exports.

`replay(options)` is what ``python -m examples.bfcl_replay`` runs:

1. selects the tasks (``--category``, ``--tasks``: `selection.select_tasks`) and runs their
   ground truth directly (the reference);
2. opens the service host (its own SQLite file: the external services) and agentq's store
   (a SQLite file, the embedded default, or a `MemoryStore`), and a `Queue` with the
   replay's lanes;
3. builds and registers one workflow definition per task, then recovers their instances
   (`selection.recover_selection`, agentq's `recover` limited to this run's workflows): a
   rerun after a crash re-admits the dead worker's leases (at once when its process is gone
   from this host, else once they expire) and resumes its workflows in the background;
4. runs the tasks as one run group, ``bfcl`` (`group.drive_group`: members ``bfcl/<task
   id>``), answering approvals with the headless `ApprovalPolicy` through ``engine.resume``
   and collecting the members with ``group.results()`` as they end; the steps' lane bounds
   how many turns run at once (``--concurrency``). Run again after a crash (the same
   command, on the same file), the group runs only the members that did not complete;
   workflows still leased by a worker that may be alive are taken over as soon as their
   lease expires;
5. reads back this run's workflows only (`selection.read_selection`), checks every task
   against the reference, exports the run's events and a static dashboard under the run's own
   name (`Selection.export_stem`), and returns the `Summary`, which keeps apart the repeated
   calls agentq's log answered (never sent again) and those the service host refused (calls
   in doubt after a crash, sent again).

Run it again on the same files and it finds everything done: no call is applied again. The
store may hold other runs (other categories, other programs): nothing here reads them, so the
work around the replay costs what this run's tasks hold, however large the store grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from agentq import (
    Queue,
    RecoveryReport,
    RunResult,
    RunStatus,
    WorkflowEngine,
)
from agentq.store import CallKind, CallState, DurableStore, MemoryStore, SqliteStore, StepState

from .approval import ApprovalPolicy
from .crash import CrashPlan, KillPoint, marker_path
from .dataset import DEFAULT_CATEGORY, Task, categories
from .direct import run_tasks
from .errors import CallParseError, UnknownFunctionError
from .export import count_events, export_events, write_dashboard
from .group import build_definition, drive_group, open_group
from .plan import (
    STEP_LANE,
    STEP_PERMITS,
    needs_approval,
    step_lanes,
    workflow_id,
)
from .progress import Progress, Tally
from .replay import ReplayEnv
from .report import Summary, check, collect_runs, format_summary, set_verdict
from .selection import (
    Selection,
    SelectionReading,
    count_reruns,
    read_selection,
    recover_selection,
    select_tasks,
    tasks_per_category,
)
from .servicehost import ServiceHost
from .services import kind_of


@dataclass(frozen=True)
class Options:
    """How to replay (the command line's flags).

    Attributes:
        db: agentq's SQLite file; None for a `MemoryStore` (nothing survives the process).
        services_db: The service host's SQLite file.
        stem: Path prefix of the exports (``<stem>-events.parquet``, ``-dashboard.html``,
            ``-summary.json``) of the default run; any other selection adds its name
            (`Selection.export_stem`); None writes no exports.
        categories: The BFCL multi-turn categories to replay (see `dataset.categories`).
        tasks: Replay only the first N tasks of each category; None for all.
        transient_rate: Probability that a call fails transiently before anything is applied.
        crash_after: Kill the process (SIGKILL) once this many calls were applied, at the
            next state-changing call; None never.
        crash_at: Where around that call: before, during (before the commit) or after.
        seed: Seed of the transient-error injector.
        fresh: Delete the files (and a crash marker) first.
        quiet: No progress lines.
        approve: The headless policy: approve every waiting turn (True) or reject it.
        concurrency: Turns worked on at once (the steps' lane permits); with
            ``agent="pydantic-ai"``, agent runs driven at once.
        lease_ttl: Seconds a step's lease lasts without renewal: how soon a rerun takes over
            a killed process's steps.
        agent: ``agentq`` (a workflow per task, a step per turn) or ``pydantic-ai`` (each
            task one `DurableAgent` run of a pydantic-ai agent: `agent`).
    """

    db: Path | None = Path("out/bfcl.db")
    services_db: Path = Path("out/bfcl-services.db")
    stem: Path | None = Path("out/bfcl")
    categories: tuple[str, ...] = (DEFAULT_CATEGORY,)
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
    agent: str = "agentq"


AGENTS = ("agentq", "pydantic-ai")
"""The ways to run a task (``--agent``)."""

EXPORTS = ("-events.parquet", "-events.csv", "-dashboard.html", "-summary.json")
"""The files a replay writes beside its export stem (`Selection.export_stem`)."""


def remove_files(options: Options) -> list[Path]:
    """Delete the replay's files: databases with their WAL, crash markers, and the exports of
    every selection under `Options.stem` (they describe the databases being deleted)."""
    paths: list[Path] = []
    for db in (options.db, options.services_db):
        if db is not None:
            paths += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    paths += sorted(options.services_db.parent.glob(f"{options.services_db.name}.crashed-*"))
    if options.stem is not None:
        stem, names = options.stem, [*categories(), "all"]
        for suffix in EXPORTS:
            paths.append(stem.with_name(stem.name + suffix))
            for name in names:
                paths.append(stem.with_name(f"{stem.name}-{name}{suffix}"))
                paths += sorted(stem.parent.glob(f"{stem.name}-{name}-first*{suffix}"))
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


@contextlib.asynccontextmanager
async def _store(db: Path | None, given: DurableStore | None) -> AsyncIterator[DurableStore]:
    if given is not None:  # the caller's store: used, not closed
        yield given
        return
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

    engine: WorkflowEngine
    env: ReplayEnv
    results: dict[str, RunResult]
    report: RecoveryReport
    wall: float
    start_seq: int
    tally: Tally
    policy: ApprovalPolicy


async def replay(
    options: Options,
    *,
    tasks: Sequence[Task] | None = None,
    out: TextIO = sys.stdout,
    store: DurableStore | None = None,
) -> Summary:
    """Replay the tasks through agentq and check them against the ground truth.

    Args:
        options: Files, categories, fault injection, policy (see `Options`).
        tasks: The tasks to choose from; default the tasks of ``options.categories`` (the
            first ``options.tasks`` of each category either way).
        out: Where progress lines go.
        store: An open store to use (and leave open) instead of opening ``options.db``.

    Returns:
        The summary (also written to ``<export stem>-summary.json`` when `stem` is set).

    Raises:
        DatasetError: An unknown category or a malformed data file.
    """
    if options.fresh:
        remove_files(options)
    selection = select_tasks(options.categories, options.tasks, tasks)
    tasks = list(selection.tasks)
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
        steps = options.concurrency if options.agent == "agentq" else STEP_PERMITS
        async with Queue(step_lanes(steps)) as queue, _store(options.db, store) as opened:
            outcome = await _drive(options, tasks, host, queue, opened, crash, out)
            reading = await read_selection(outcome.engine, [workflow_id(t.id) for t in tasks])
            summary = _summarize(selection, reading, outcome)
            if options.agent == "pydantic-ai":  # counted from the agent runs' own log
                from .agent import count_agent_runs

                count_agent_runs(summary, tasks, reading)
            summary.store = "memory (MemoryStore)" if options.db is None else str(options.db)
            summary.services = str(options.services_db)
            summary.crash = "" if crash is None else crash.describe()
            summary.calls_applied_before = applied_before
            stats = host.stats()
            summary.calls_applied_now = stats.applied
            applied_after = sum(len(host.results(task.id)) for task in tasks)
            summary.calls_applied_elsewhere = max(
                0, applied_after - applied_before - stats.applied
            )
            summary.duplicates_refused_now = stats.duplicates
            summary.refused_keys_now = host.refused_keys()
            summary.rerun_keys_now = await count_reruns(
                outcome.engine, reading.calls, outcome.start_seq
            )
            summary.calls_rerun_now = len(summary.rerun_keys_now)
            verdict = check(reference, collect_runs(tasks, outcome.results, host))
            set_verdict(summary, verdict, tasks)
            if options.stem is not None:
                stem = selection.export_stem(options.stem)
                events_path, summary.events_note = export_events(reading.events, stem)
                summary.events_path = str(events_path)
                dashboard = stem.with_name(f"{stem.name}-dashboard.html")
                summary.dashboard_path = str(dashboard)
                text = format_summary(summary)
                lanes = queue.stats().lanes
                write_dashboard(dashboard, text, lanes, reading.steps, reading.events)
                write_summary(summary, stem)
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
    env = ReplayEnv(host, crash)
    agents = options.agent == "pydantic-ai"
    definitions = {} if agents else {task.id: build_definition(task, env) for task in tasks}
    for definition in definitions.values():  # registered before recovery resumes them
        engine.register(definition)
    policy = ApprovalPolicy(approve=options.approve)
    tally = Tally()
    calls = sum(len(texts) for task in tasks for texts in task.call_texts)
    where = "memory (MemoryStore)" if options.db is None else str(options.db)
    groups = ", ".join(f"{name} {n}" for name, n in tasks_per_category(tasks).items())
    _say(
        options,
        out,
        f"replaying {len(tasks)} BFCL tasks ({groups}; {calls} tool calls) through agentq"
        f"{' as pydantic-ai agent runs' if agents else ''}"
        f" · store {where}"
        f" · services {options.services_db} · transient error rate {options.transient_rate:.0%}"
        f" · seed {options.seed}",
    )
    if crash is not None:
        _say(options, out, f"crash injection: {crash.describe()}")
    start_seq = await store.last_seq()
    progress = Progress(out, len(tasks), host, tally, policy)
    unsubscribe = queue.subscribe(tally.on_job)
    ticker = None if options.quiet else asyncio.get_running_loop().create_task(progress.run())
    started = time.perf_counter()

    def finished(_: object) -> None:
        tally.done += 1

    try:
        if not agents:  # before recovery resumes members: what the group holds now
            await open_group(engine, tasks, lambda text: _say(options, out, text))
        report = await recover_selection(engine, [workflow_id(task.id) for task in tasks])
        if report.recovered or report.resumed or report.held_elsewhere:
            _say(options, out, _recovery_line(report))
        if agents:  # each task's run continues where it stopped: `durable.run` of its id
            from .agent import drive_agents  # needs the pydantic-ai extra

            results = await drive_agents(
                engine, tasks, host, crash, policy,
                concurrency=options.concurrency, on_result=finished, retries=tally.retries,
            )
        else:
            results = await drive_group(engine, tasks, definitions, policy, on_member=finished)
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
    return _Outcome(engine, env, results, report, wall, start_seq, tally, policy)


def _answered_calls(engine: WorkflowEngine, env: ReplayEnv) -> int:
    # `answered_from_log` counts the durable calls and the waits answered from the log; every
    # approval wait that returned was answered from the log.
    return engine.answered_from_log - env.approvals_read


def _recovery_line(report: RecoveryReport) -> str:
    return (
        f"recovery: {len(report.recovered)} leases re-admitted · "
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


def _summarize(selection: Selection, reading: SelectionReading, outcome: _Outcome) -> Summary:
    # Only this run's tasks: `reading` holds their workflows' events and steps, nothing else.
    tasks = list(selection.tasks)
    rows = reading.events
    total = count_events(rows)
    now = count_events(rows, outcome.start_seq)
    steps = {(row.workflow_id, row.step_index): row for row in reading.steps}
    approved_calls = approved_turns = steps_total = steps_completed = 0
    for task in tasks:
        for turn in range(len(task.call_texts)):
            steps_total += 1
            row = steps.get((workflow_id(task.id), turn))
            if row is None or row.state is not StepState.COMPLETED:
                continue
            steps_completed += 1
            if isinstance(row.output, dict) and "approval" in row.output:
                approved_turns += 1
                approved_calls += sum(needs_approval(call) for call in task.turn_calls(turn))
    statuses = Counter(result.status for result in outcome.results.values())
    recovered = len(outcome.report.recovered)
    return Summary(
        tasks=len(tasks),
        selection=selection.label,
        tasks_by_category={name: len(group) for name, group in selection.by_category().items()},
        long_context_tasks=sum(task.long_context for task in tasks),
        held_back_functions=sum(len(names) for t in tasks for names in t.held_back.values()),
        completed=statuses[RunStatus.COMPLETED],
        failed=statuses[RunStatus.FAILED] + statuses[RunStatus.CANCELLED],
        waiting=statuses[RunStatus.WAITING],
        steps=steps_total,
        steps_completed=steps_completed,
        step_retries=total["RetryScheduled"],
        calls=sum(len(texts) for task in tasks for texts in task.call_texts),
        calls_by_kind=dict(_kinds(tasks)),
        calls_recorded=sum(
            row.kind == CallKind.CALL and row.state == CallState.COMPLETED for row in reading.calls
        ),
        call_retries_now=sum(outcome.tally.retries.values()),
        retry_causes_now=dict(outcome.tally.retries),
        approvals=total["approved"],
        rejections=total["rejected"],
        approvals_now=outcome.policy.approved,
        approved_calls=approved_calls,
        approved_turns=approved_turns,
        rejections_now=outcome.policy.rejected,
        approval_policy=outcome.policy.describe(),
        calls_answered_from_log_now=_answered_calls(outcome.engine, outcome.env),
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
