"""The demo as one run group: ``python -m examples.bfcl_replay`` (what ``make demo`` runs) is
SIGKILLed in the middle and the same command is run again on the same files. The rerun
continues the group ``bfcl``: it runs only the members that had not completed, leaves each
completed member's log untouched, prints 200/200, and the service host holds every call once.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
from pathlib import Path

import pytest
from bfcl_crash_log import applied_keys, run_replay

from agentq.events import Event
from agentq.store import SqliteStore, WorkflowState
from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.report import format_summary
from examples.bfcl_replay.run import Options, replay

TOTAL = 1142
"""Tool calls of the 200 base tasks."""


async def _read_all(db: Path) -> tuple[dict[str, str], dict[str, list[Event]], dict[str, str], int]:
    """The group's manifest (key -> definition name), the events of each member that
    completed, every member's state, and the log's last seq."""
    async with SqliteStore(db) as store:
        manifest = await store.load_group("bfcl")
        assert manifest is not None
        rows = await store.group_members("bfcl")
        done = [r.workflow_id for r in rows if r.state is WorkflowState.COMPLETED]
        events = {wid: await store.load_events(wid) for wid in done}
        last = await store.last_seq()
    return manifest.definitions, events, {r.workflow_id: r.state.value for r in rows}, last


def _read(db: Path) -> tuple[dict[str, str], dict[str, list[Event]], dict[str, str], int]:
    return asyncio.run(_read_all(db))


@pytest.mark.slow
def test_make_demo_killed_mid_group_continues_the_group_on_the_rerun(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    command = ["--crash-after", "500"]  # the same command both times: no --fresh

    crashed = run_replay(tmp_path, *command)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    definitions, before, states, crash_seq = _read(tmp_path / "bfcl.db")
    assert list(definitions) == [task.id for task in bfcl_tasks]  # members bfcl/<task id>
    assert definitions[bfcl_tasks[0].id] == f"bfcl:{bfcl_tasks[0].id}"
    assert 0 < len(before) < 200  # killed in the middle: some members completed, not all
    assert set(states) <= {f"bfcl/{task.id}" for task in bfcl_tasks}
    applied_before = len(applied_keys(tmp_path / "bfcl-services.db"))
    assert applied_before >= 500

    rerun = run_replay(tmp_path, *command)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    out = rerun.stdout
    assert f"group bfcl: resuming · {len(before)} of 200 members completed earlier" in out
    assert "200/200 tasks done" in out
    assert out.rstrip().endswith("✔ 200/200 tasks match the ground truth")

    # every call applied once: the host holds each key once, and the rerun applied only what
    # the killed process had not committed
    keys = applied_keys(tmp_path / "bfcl-services.db")
    assert len(keys) == len(set(keys)) == TOTAL
    summary = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert summary["ok"] is True and summary["calls_recorded"] == TOTAL
    assert summary["calls_applied_before"] == applied_before
    assert summary["calls_applied_now"] == TOTAL - applied_before

    # a member completed before the kill was not run again: its log is exactly as it was
    _, after, states, _ = _read(tmp_path / "bfcl.db")
    assert set(states.values()) == {"completed"} and len(states) == 200
    for wid, events in before.items():
        assert after[wid] == events, wid
    # ... and each member that had not completed was run by the rerun (events after the kill)
    rerun_members = set(after) - set(before)
    assert len(rerun_members) == 200 - len(before)
    for wid in rerun_members:
        assert after[wid][-1].seq > crash_seq, wid

    again = run_replay(tmp_path, *command)  # a finished group: nothing runs
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming" not in again.stdout
    final = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert final["calls_applied_now"] == 0
    assert _read(tmp_path / "bfcl.db")[1] == after


async def test_another_selection_on_the_same_file_replaces_the_manifest_and_reuses_members(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    options = Options(
        db=tmp_path / "bfcl.db", services_db=tmp_path / "bfcl-services.db", stem=None, seed=3
    )
    first = await replay(options, tasks=bfcl_tasks[:3], out=io.StringIO())
    assert first.ok, format_summary(first)
    _, before, _, _ = await _read_all(tmp_path / "bfcl.db")

    out = io.StringIO()
    second = await replay(options, tasks=bfcl_tasks[:5], out=out)
    assert second.ok, format_summary(second)
    assert "group bfcl: the store holds it with 3 other tasks; replacing its manifest with " \
        "these 5 (stored workflows are kept)" in out.getvalue()
    definitions, after, states, _ = await _read_all(tmp_path / "bfcl.db")
    assert list(definitions) == [task.id for task in bfcl_tasks[:5]]
    assert set(states.values()) == {"completed"} and len(states) == 5
    for wid, events in before.items():  # the three tasks done before were not run again
        assert after[wid] == events, wid
    calls = sum(len(texts) for task in bfcl_tasks[3:5] for texts in task.call_texts)
    assert second.calls_applied_now == calls
