"""Runs of any selection (``--category``, ``--tasks``) into a store that holds other runs: each
run counts, exports and reads only its own workflows."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentq import Queue, StepDef, Workflow, WorkflowEngine
from agentq.store import SqliteStore, WorkflowState
from examples.bfcl_replay.__main__ import parse_args
from examples.bfcl_replay.dataset import Task, categories
from examples.bfcl_replay.plan import workflow_id
from examples.bfcl_replay.report import Summary, format_summary
from examples.bfcl_replay.run import Options, remove_files, replay


class CountingStore(SqliteStore):
    """A `SqliteStore` that counts the rows its read verbs return, and the whole-store reads."""

    reads: Counter[str]
    whole: list[str]

    def _count(self, verb: str, rows: Any, whole: bool) -> Any:
        if not hasattr(self, "reads"):
            self.reads, self.whole = Counter(), []
        self.reads[verb] += len(rows) if isinstance(rows, list) else rows is not None
        if whole:
            self.whole.append(verb)
        return rows

    async def event_rows(self, workflow_id: str | None = None, *, after_seq: int = 0) -> Any:
        rows = await super().event_rows(workflow_id, after_seq=after_seq)
        return self._count("event_rows", rows, workflow_id is None and after_seq == 0)

    async def load_events(
        self, workflow_id: str | None = None, *, after_seq: int = 0, limit: int | None = None
    ) -> Any:
        rows = await super().load_events(workflow_id, after_seq=after_seq, limit=limit)
        return self._count("load_events", rows, workflow_id is None and after_seq == 0)

    async def step_rows(self, workflow_id: str | None = None) -> Any:
        rows = await super().step_rows(workflow_id)
        return self._count("step_rows", rows, workflow_id is None)

    async def calls(self, workflow_id: str | None = None, step_index: int | None = None) -> Any:
        rows = await super().calls(workflow_id, step_index)
        return self._count("calls", rows, workflow_id is None)

    async def workflows(self, state: WorkflowState | None = None) -> Any:
        rows = await super().workflows(state)
        return self._count("workflows", rows, state is None)

    async def get_workflow(self, workflow_id: str) -> Any:
        return self._count("get_workflow", await super().get_workflow(workflow_id), False)

    async def expired_leases(self, now: float) -> Any:
        return self._count("expired_leases", await super().expired_leases(now), False)


def _options(folder: Path, **changes: Any) -> Options:
    options = Options(
        db=folder / "bfcl.db",
        services_db=folder / "bfcl-services.db",
        stem=folder / "bfcl",
        transient_rate=0.0,
        quiet=True,
    )
    return dataclasses.replace(options, **changes)


async def _replay(folder: Path, chosen: list[Task], **changes: Any) -> Summary:
    summary = await replay(_options(folder, **changes), tasks=chosen)
    assert summary.ok, format_summary(summary)
    return summary


def _files(folder: Path) -> dict[str, bytes]:
    """The exports in a folder (not the databases), by name."""
    folder.mkdir(parents=True, exist_ok=True)
    databases = (".db", ".db-wal", ".db-shm")
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.endswith(databases)}


async def _counted(folder: Path, tasks: list[Task]) -> tuple[Summary, CountingStore]:
    _files(folder)  # creates the folder
    async with CountingStore(folder / "bfcl.db") as store:
        store._count("open", [], False)
        summary = await replay(_options(folder), tasks=tasks, store=store)
    assert summary.ok, format_summary(summary)
    return summary, store


async def _crowd(folder: Path, workflows: int) -> None:
    """Another program's workflows in the same file: many, each with a few events."""

    async def step(_: object) -> str:
        return "done"

    async with Queue() as queue, SqliteStore(folder / "bfcl.db") as store:
        engine = WorkflowEngine(queue, store)
        for number in range(workflows):
            steps = [StepDef(f"s{index}", step) for index in range(3)]
            await engine.run(Workflow(f"other/{number}", steps, input={"n": number}))
        await engine.close()


@pytest.mark.slow
async def test_the_work_around_a_replay_reads_only_its_own_workflows(
    tmp_path: Path, bfcl_categories: dict[str, list[Task]]
) -> None:
    mine = bfcl_categories["miss_param"][:6]

    alone, alone_store = await _counted(tmp_path / "alone", mine)

    crowded = tmp_path / "crowded"
    await _replay(crowded, bfcl_categories["base"][:40])  # an earlier run, other tasks
    await _replay(crowded, bfcl_categories["long_context"][:20], stem=None)
    await _crowd(crowded, 300)
    among, among_store = await _counted(crowded, mine)

    # Recovery, the drive, the summary, the exports and the dashboard read the same rows
    # whether the store holds nothing else or 360 other workflows (~1,700 other events),
    # and never the whole log, the whole projection or every workflow.
    assert among_store.whole == alone_store.whole == []
    assert among_store.reads == alone_store.reads
    assert among_store.reads["event_rows"] == alone.events == among.events
    assert among.tasks == 6 and among.events > 0
    assert among_store.reads["calls"] > 0  # the engine's per-attempt reads, the summary's

    again, again_store = await _counted(crowded, mine)  # everything found complete
    assert again_store.whole == []
    assert again_store.reads["event_rows"] == again.events == among.events
    assert again.calls_applied_now == 0


async def test_the_summary_counts_this_run_only(
    tmp_path: Path, bfcl_categories: dict[str, list[Task]]
) -> None:
    first = bfcl_categories["base"][:6]
    other = bfcl_categories["miss_param"][:4]
    calls = {
        "first": sum(len(texts) for task in first for texts in task.call_texts),
        "other": sum(len(texts) for task in other for texts in task.call_texts),
    }

    a = await _replay(tmp_path, first)
    b = await _replay(tmp_path, other)
    assert (b.tasks, b.tasks_by_category, b.completed) == (4, {"miss_param": 4}, 4)
    assert b.calls == b.calls_applied_now == calls["other"]
    assert b.calls_applied_before == 0
    assert b.steps == sum(len(task.turns) for task in other)
    assert b.approvals == b.approvals_now
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        events = [len(await store.event_rows(workflow_id(task.id))) for task in other]
    assert b.events == sum(events)

    again = await _replay(tmp_path, first)
    assert again.tasks == 6 and again.calls == calls["first"]
    assert (again.calls_applied_now, again.calls_applied_before) == (0, calls["first"])
    assert (again.approvals, again.approvals_now) == (a.approvals, 0)
    assert again.events == a.events


async def test_a_subset_run_never_overwrites_a_fuller_runs_exports(
    tmp_path: Path, bfcl_categories: dict[str, list[Task]]
) -> None:
    base = bfcl_categories["base"][:8]
    full = await _replay(tmp_path, base)
    assert Path(full.events_path).name.startswith("bfcl-events.")
    saved = _files(tmp_path)
    assert set(saved) == {"bfcl-events.parquet", "bfcl-dashboard.html", "bfcl-summary.json"}

    subset = await _replay(tmp_path, base, tasks=3)
    assert subset.tasks == 3 and subset.selection == "base, first 3 tasks of each"
    assert Path(subset.events_path).name.startswith("bfcl-base-first3-events.")
    assert Path(subset.dashboard_path).name == "bfcl-base-first3-dashboard.html"
    assert (tmp_path / "bfcl-base-first3-summary.json").is_file()

    other = await _replay(tmp_path, bfcl_categories["miss_func"][:2])
    assert Path(other.dashboard_path).name == "bfcl-miss_func-dashboard.html"

    now = _files(tmp_path)
    assert {name: now[name] for name in saved} == saved  # the fuller run's exports, untouched

    removed = {path.name for path in remove_files(_options(tmp_path))}
    assert {"bfcl.db", "bfcl-services.db", "bfcl-dashboard.html"} <= removed
    assert {"bfcl-base-first3-dashboard.html", "bfcl-miss_func-summary.json"} <= removed
    assert _files(tmp_path) == {}


async def test_category_all_replays_a_few_tasks_of_every_category(tmp_path: Path) -> None:
    names = tuple(categories())
    summary = await replay(_options(tmp_path, categories=names, tasks=2, transient_rate=0.1))
    assert summary.ok, format_summary(summary)
    assert summary.tasks_by_category == dict.fromkeys(names, 2)
    assert summary.matched_by_category == dict.fromkeys(names, 2)
    assert (summary.long_context_tasks, summary.held_back_functions) == (2, 2)
    assert Path(summary.events_path).name.startswith("bfcl-all-first2-events.")
    text = format_summary(summary)
    assert text.splitlines()[0] == (
        "BFCL multi-turn replay through agentq: 8 tasks "
        "(all: base, miss_func, miss_param, long_context, first 2 tasks of each)"
    )
    assert "  categories   base 2/2 · miss_func 2/2 · miss_param 2/2 · long_context 2/2 " in text
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        inputs = {
            row.workflow_id: row.input
            for row in await store.workflows()  # a test may read the whole (small) store
        }
    assert inputs["bfcl/multi_turn_long_context_0"]["long_context"] is True
    assert inputs["bfcl/multi_turn_miss_func_0"]["held_back"] == {"3": ["sort"]}
    assert set(inputs["bfcl/multi_turn_base_0"]) == {"task", "classes", "calls_per_turn"}


def test_the_command_line_selects_categories() -> None:
    assert parse_args([]).categories == ("base",)
    assert parse_args(["--category", "long_context"]).categories == ("long_context",)
    assert parse_args(["--category", "all", "--tasks", "3"]).categories == tuple(categories())
    with pytest.raises(SystemExit):
        parse_args(["--category", "composite"])
