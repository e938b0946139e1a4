"""What one run replays, and everything it reads back: only its own workflows.

A store may hold many runs: the default 200 base tasks, then ``--category all``, then a few
``--tasks 5`` tries, or workflows of another program altogether. The work around a replay
(recovery before it; summary, exports and dashboard after it) must cost what this run's tasks
hold, not what the store holds, so it never reads the whole log or the whole projection:

- `recover_selection`: agentq's `recover` procedure limited to this run's workflows. It reads
  the expired leases and the running workflows (both bounded by unfinished work, not by the
  store's size) and the steps of this run's running workflows. (`agentq.recover(engine)`
  reads every step row of the store to find the live leases.)
- `read_selection`: this run's events, steps and durable calls, one workflow at a time
  (``store.event_rows(workflow_id)``, ``store.step_rows(workflow_id)``,
  ``store.calls(workflow_id)``): the summary, the event export and the dashboard are built
  from it; `count_reruns` reads the events of this run (``after_seq``) of the few
  workflows that have a call run more than once, for the ``rerun`` flags.

`Selection` names the run (``--category``, ``--tasks``) so that its exports never overwrite a
fuller run's: the default run (every base task) writes ``out/bfcl-events.*``; any other
selection adds its name, e.g. ``out/bfcl-all-events.*``, ``out/bfcl-base-first5-events.*``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentq import EventKind, RecoveryReport, RunResult, Workflow, WorkflowEngine
from agentq.store import CallKind, CallRow, Execution, StepRow, StepState, WorkflowState
from agentq.workflows.workers import take_back

from .dataset import DEFAULT_CATEGORY, Task, categories, load_category


@dataclass(frozen=True)
class Selection:
    """The tasks of one run.

    Attributes:
        categories: The categories replayed, in order.
        tasks: The tasks, category after category.
        limit: ``--tasks N``: at most N tasks of each category; None for all.
        complete: Whether every task of each category is replayed.
    """

    categories: tuple[str, ...]
    tasks: tuple[Task, ...]
    limit: int | None = None
    complete: bool = True

    @property
    def name(self) -> str:
        """The name its exports carry: ``""`` for the default run (every base task), else
        ``<category or all>`` with ``-first<N>`` for a partial one, e.g. ``base-first5``."""
        if self.categories == (DEFAULT_CATEGORY,) and self.complete:
            return ""
        every = len(self.categories) > 1 and set(self.categories) == set(categories())
        name = "all" if every else "+".join(self.categories)
        return name if self.complete else f"{name}-first{self.limit}"

    @property
    def label(self) -> str:
        """For people: ``base``, ``all: base, miss_func, ...``, ``base, first 5 tasks``."""
        every = len(self.categories) > 1 and set(self.categories) == set(categories())
        text = ("all: " if every else "") + ", ".join(self.categories)
        return text if self.complete else f"{text}, first {self.limit} tasks of each"

    def export_stem(self, stem: Path) -> Path:
        """The path prefix of this run's exports, beside `stem`."""
        return stem if not self.name else stem.with_name(f"{stem.name}-{self.name}")

    def by_category(self) -> dict[str, list[Task]]:
        """The tasks grouped by category, in order."""
        groups: dict[str, list[Task]] = {name: [] for name in self.categories}
        for task in self.tasks:
            groups.setdefault(task.category, []).append(task)
        return groups


def select_tasks(
    names: Sequence[str], limit: int | None = None, tasks: Sequence[Task] | None = None
) -> Selection:
    """Choose the tasks of a run.

    Args:
        names: Category names (see `dataset.categories`); ignored when `tasks` is given.
        limit: At most this many tasks of each category; None for all.
        tasks: The tasks to choose from instead of loading `names` (tests pass edited tasks);
            their categories are read from their ids.

    Raises:
        DatasetError: An unknown category, or a malformed data file.
    """
    groups: dict[str, list[Task]] = {}
    if tasks is None:
        for name in names:
            groups[name] = load_category(name, strict=False)
    else:
        for task in tasks:
            groups.setdefault(task.category, []).append(task)
    chosen = tuple(task for group in groups.values() for task in group[:limit])
    complete = limit is None or all(len(group) <= limit for group in groups.values())
    return Selection(tuple(groups), chosen, limit, complete)


@dataclass(frozen=True)
class SelectionReading:
    """This run's workflows as the store holds them.

    Attributes:
        events: Their events as `EVENT_COLUMNS` tuples, by sequence number.
        steps: Their step rows, workflow by workflow, in the run's order.
        calls: Their durable calls and waits (`CallRow`), workflow by workflow.
    """

    events: list[tuple[Any, ...]]
    steps: list[StepRow]
    calls: list[CallRow]


async def read_selection(engine: WorkflowEngine, workflow_ids: Sequence[str]) -> SelectionReading:
    """Read the events, steps and calls of these workflows only (one query each per workflow)."""
    store = engine.store
    events: list[tuple[Any, ...]] = []
    steps: list[StepRow] = []
    calls: list[CallRow] = []
    for workflow in workflow_ids:
        events += await store.event_rows(workflow)
        steps += await store.step_rows(workflow)
        calls += await store.calls(workflow)
    events.sort(key=lambda row: int(row[0]))
    return SelectionReading(events, steps, calls)


async def count_reruns(
    engine: WorkflowEngine, calls: Sequence[CallRow], after_seq: int
) -> list[str]:
    """Return the keys of the calls in doubt that this run sent again, in log order.

    A call in doubt (``CallStarted`` recorded, no outcome: the process died while it ran)
    starts again with ``rerun: true`` on its new ``CallStarted``. Only workflows holding a
    call that started more than once since `after_seq` can have one, so only their events of
    this run are read (``load_events(workflow, after_seq=...)``): none in a run without a
    crash or a retried call.

    Args:
        engine: The engine (its store is read).
        calls: This run's call rows (`SelectionReading.calls`).
        after_seq: The log's last sequence number before this run.
    """
    suspects = list(
        dict.fromkeys(
            row.workflow_id
            for row in calls
            if row.kind == CallKind.CALL and row.runs > 1 and row.last_seq > after_seq
        )
    )
    keys: list[tuple[int, str]] = []
    for workflow in suspects:
        for event in await engine.store.load_events(workflow, after_seq=after_seq):
            if event.kind is EventKind.CALL_STARTED and event.data.get("rerun") is True:
                keys.append((event.seq, str(event.data.get("key"))))
    return [key for _, key in sorted(keys)]


async def recover_selection(engine: WorkflowEngine, workflow_ids: Sequence[str]) -> RecoveryReport:
    """`agentq.recover`, limited to these workflows.

    1. Re-admits each expired lease of these workflows, and each live one whose worker's
       process is gone (``WorkerRecovered``).
    2. Starts, as the engine's background runs, each of them that is still running,
       registered with this engine (as a workflow, or as an instance of a registered
       definition: a run group's member), and not held by a live lease of another worker (those are
       reported in ``held_elsewhere``; ``engine.run`` takes them over once their lease
       expires). It does not wait for them: ``drive_all`` joins them.

    Reads the expired leases and the running workflows of the store (what crashed or is in
    progress), and the steps of the running workflows of this run: never a finished one.

    Returns:
        A `RecoveryReport`, as `agentq.recover` gives.
    """
    store = engine.store
    mine = set(workflow_ids)
    now = engine.clock.time()
    recovered: list[Execution] = []
    for execution in await store.expired_leases(now):
        if execution.workflow_id in mine and await store.release_expired(execution, now):
            recovered.append(execution)
    now = engine.clock.time()
    resumed: list[str] = []
    held: list[str] = []
    unregistered: list[str] = []
    joins: dict[str, Callable[[], Awaitable[RunResult]]] = {}
    for row in await store.workflows(WorkflowState.RUNNING):
        workflow = row.workflow_id
        if workflow not in mine:
            continue
        registered: Workflow | str | None = engine.registered(workflow)
        if registered is None and row.definition is not None:  # an instance (a group member)
            registered = workflow if engine.definition(row.definition) is not None else None
        if registered is None:
            unregistered.append(workflow)
            continue
        live = False
        for step in await store.step_rows(workflow):
            if _leased(step, now):
                released = await take_back(store, step, now)  # its process is gone
                if released is None:
                    live = True
                else:
                    recovered.append(released)
        if live and not engine.running(workflow):
            held.append(workflow)
            continue
        engine.run_soon(registered)
        resumed.append(workflow)
        joins[workflow] = functools.partial(engine.run, registered)
    return RecoveryReport(
        tuple(recovered), tuple(resumed), tuple(unregistered), tuple(held), {}, joins
    )


def _leased(row: StepRow, now: float) -> bool:
    return (
        row.state is StepState.LEASED
        and row.lease_expires_at is not None
        and now <= row.lease_expires_at
    )


def tasks_per_category(tasks: Sequence[Task]) -> Mapping[str, int]:
    """How many tasks of each category, in order of first appearance."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.category] = counts.get(task.category, 0) + 1
    return counts
