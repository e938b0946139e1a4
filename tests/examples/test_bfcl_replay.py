"""The BFCL replay through agentq: all 200 tasks match the ground truth, each tool call a durable
call recorded once in agentq's log; bad data fails alone."""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
from pathlib import Path

import pytest

from agentq.store import SqliteStore
from examples.bfcl_replay.__main__ import parse_args
from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.plan import call_key, step_name, workflow_id
from examples.bfcl_replay.report import format_summary
from examples.bfcl_replay.run import Options, replay


def _options(tmp_path: Path, **changes: object) -> Options:
    options = Options(
        db=tmp_path / "bfcl.db",
        services_db=tmp_path / "bfcl-services.db",
        stem=tmp_path / "bfcl",
        transient_rate=0.1,
        seed=7,
        quiet=True,
    )
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]


def _read(path: Path | str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _with_call(tasks: list[Task], task_id: str, turn: int, index: int, text: str) -> list[Task]:
    def change(task: Task) -> Task:
        if task.id != task_id:
            return task
        texts = [list(t) for t in task.call_texts]
        texts[turn][index] = text
        return dataclasses.replace(task, call_texts=tuple(tuple(t) for t in texts))

    return [change(task) for task in tasks]


@pytest.mark.slow
async def test_all_200_tasks_match_the_ground_truth_with_transient_errors(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    summary = await replay(_options(tmp_path), tasks=bfcl_tasks)

    assert summary.ok, format_summary(summary)
    assert summary.match_line == "200/200 tasks match the ground truth"
    assert (summary.tasks, summary.completed, summary.failed, summary.waiting) == (200, 200, 0, 0)
    assert (summary.steps, summary.steps_completed) == (734, 734)
    assert summary.calls == summary.calls_applied_now == 1142
    assert summary.calls_by_kind == {"read": 480, "write": 442, "approval": 220}
    assert summary.call_retries_now > 50
    assert set(summary.retry_causes_now) == {"TransientToolError"}
    assert summary.approvals == summary.approvals_now == 220  # one wait per approval call
    assert (summary.approved_calls, summary.approved_turns) == (220, 216)
    # Every call is a durable call, recorded once; nothing ran twice, nothing was in doubt.
    assert summary.calls_recorded == 1142
    assert summary.duplicates_prevented_now == 0
    assert summary.calls_answered_from_log_now == summary.duplicates_refused_now == 0
    assert summary.calls_rerun_now == 0 and summary.refused_keys_now == []
    with sqlite3.connect(tmp_path / "bfcl-services.db") as db:
        (applied,) = db.execute(
            "SELECT COUNT(DISTINCT idempotency_key) FROM applied_calls"
        ).fetchone()
    db.close()
    assert applied == 1142

    import pandas as pd

    events = pd.read_parquet(summary.events_path)
    assert len(events) == summary.events
    assert (events.kind == "StepResumed").sum() == 220
    assert (events.kind == "CallStarted").sum() == (events.kind == "CallCompleted").sum() == 1142
    assert (events.kind == "WorkflowCompleted").sum() == 200
    assert summary.step_retries == 0 and (events.kind == "CallFailed").sum() == 0
    page = _read(summary.dashboard_path)
    assert 'data-agentq="lanes"' in page and 'data-agentq="timeline"' in page
    assert "200/200 tasks match the ground truth" in page
    saved = json.loads(_read(tmp_path / "bfcl-summary.json"))
    assert saved["ok"] is True and saved["calls_applied_now"] == 1142

    # The same command again: everything is found complete, nothing is applied again.
    again = await replay(_options(tmp_path), tasks=bfcl_tasks)
    assert again.ok, format_summary(again)
    assert again.calls_applied_now == 0 and again.calls_applied_before == 1142
    assert again.approvals_now == 0 and again.approvals == 220
    assert again.duplicates_prevented_now == 0  # completed workflows: no step runs again
    assert again.events == summary.events


async def test_bad_calls_fail_their_workflow_with_a_clear_reason_and_the_rest_match(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    tasks = bfcl_tasks[:60]
    tasks = _with_call(tasks, "multi_turn_base_0", 1, 0, "cd(folder='temp'")
    tasks = _with_call(tasks, "multi_turn_base_10", 2, 0, "teleport(destination='Mars')")
    tasks = _with_call(tasks, "multi_turn_base_56", 1, 1, "fillFuelTank(fuelAmount='forty')")

    summary = await replay(_options(tmp_path, transient_rate=0.05), tasks=tasks)

    assert not summary.ok
    assert (summary.completed, summary.failed, summary.matched) == (57, 3, 57)
    assert summary.match_line == "57/60 tasks match the ground truth (3 did not complete)"
    assert not summary.mismatch_report
    reasons = summary.unfinished
    assert list(reasons) == ["multi_turn_base_0", "multi_turn_base_10", "multi_turn_base_56"]
    assert reasons["multi_turn_base_0"] == (
        "failed at turn-1: task multi_turn_base_0 turn 1 call 0: cannot parse \"cd(folder='temp'\""
        ": not valid Python syntax ('(' was never closed)"
    )
    assert reasons["multi_turn_base_10"].startswith(
        "failed at turn-2: turn 2 call 0: unknown function 'teleport': not offered by "
    )
    assert reasons["multi_turn_base_56"] == (
        "failed at turn-1: turn 1 call 1: fillFuelTank(fuelAmount='forty') raised TypeError: "
        "'<' not supported between instances of 'str' and 'int'"
    )
    # Nothing of a turn that failed its checks was applied; a call that raised was not either,
    # while the call before it in its turn was.
    with sqlite3.connect(tmp_path / "bfcl-services.db") as db:
        keys = {key for (key,) in db.execute("SELECT idempotency_key FROM applied_calls")}
    db.close()
    assert call_key("multi_turn_base_0", 0, 0) in keys
    task_0 = sorted(k for k in keys if k.startswith("bfcl/multi_turn_base_0/"))
    assert task_0 == [call_key("multi_turn_base_0", 0, index) for index in range(3)]
    assert call_key("multi_turn_base_10", 1, 0) in keys
    assert call_key("multi_turn_base_10", 2, 0) not in keys
    assert call_key("multi_turn_base_56", 1, 0) in keys
    assert call_key("multi_turn_base_56", 1, 1) not in keys
    text = format_summary(summary)
    assert "✘ multi_turn_base_10: failed at turn-2: turn 2 call 0: unknown function" in text
    assert text.endswith("✘ 57/60 tasks match the ground truth (3 did not complete)")


async def test_rejected_approvals_fail_those_workflows_and_apply_none_of_their_calls(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    tasks = bfcl_tasks[:12]
    summary = await replay(_options(tmp_path, approve=False, stem=None), tasks=tasks)

    assert summary.rejections_now == summary.failed > 0
    assert summary.approvals == summary.approvals_now == 0
    assert summary.completed + summary.failed == 12
    for reason in summary.unfinished.values():
        assert " not approved (reject-all policy of the headless demo): " in reason
    assert summary.matched == summary.completed
    # The approvals come before any call of their turn: a rejected turn applied nothing, and
    # agentq's log holds its waits but none of its calls.
    with sqlite3.connect(tmp_path / "bfcl-services.db") as db:
        keys = {key for (key,) in db.execute("SELECT idempotency_key FROM applied_calls")}
    db.close()
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        for task in tasks:
            if task.id not in summary.unfinished:
                continue
            failed = next(
                row for row in await store.step_rows(workflow_id(task.id)) if row.state == "failed"
            )
            turn = failed.step_index
            assert failed.step_name == step_name(turn)
            turn_keys = {call_key(task.id, turn, i) for i in range(len(task.call_texts[turn]))}
            assert not keys & turn_keys
            logged = await store.calls(workflow_id(task.id), step_index=turn)
            assert {row.kind for row in logged} == {"wait"}


def test_the_command_line_defaults_to_sqlite_files_under_out() -> None:
    options = parse_args([])
    assert options.db == Path("out/bfcl.db")
    assert options.services_db == Path("out/bfcl-services.db")
    assert options.stem == Path("out/bfcl")
    assert (options.transient_rate, options.crash_after, options.fresh) == (0.05, None, False)
    custom = parse_args(["--db", "x/run.db", "--crash-after", "9", "--crash-at", "after"])
    assert custom.services_db == Path("x/run-services.db")
    assert (custom.crash_after, custom.crash_at.value) == (9, "after")
    assert parse_args(["--db", ":memory:"]).db is None
    with pytest.raises(SystemExit):
        parse_args(["--transient-rate", "1.5"])


async def test_progress_lines_are_printed_while_it_runs(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    out = io.StringIO()
    summary = await replay(
        _options(tmp_path, quiet=False, db=None, stem=None), tasks=bfcl_tasks[:25], out=out
    )
    assert summary.ok, format_summary(summary)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("replaying 25 BFCL tasks (")
    assert lines[-1].endswith("duplicates refused") and " 25/25 tasks done · " in lines[-1]
