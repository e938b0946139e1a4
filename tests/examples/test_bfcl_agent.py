"""``--agent pydantic-ai``: each BFCL task one `DurableAgent` run of a pydantic-ai agent whose
scripted model emits the ground-truth calls as tool calls; the same check, 200/200, and a
crash-and-recover path where completed model requests and tool calls answer from agentq's log."""

from __future__ import annotations

import dataclasses
import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from bfcl_crash_log import applied_keys, run_replay

from agentq.store import CallKind, CallRow, SqliteStore
from examples.bfcl_replay.__main__ import parse_args
from examples.bfcl_replay.agent import segments
from examples.bfcl_replay.dataset import Task
from examples.bfcl_replay.plan import needs_approval, workflow_id
from examples.bfcl_replay.report import format_summary
from examples.bfcl_replay.run import Options, replay

TOTAL = 1142


def _options(tmp_path: Path, **changes: object) -> Options:
    options = Options(
        db=tmp_path / "bfcl.db",
        services_db=tmp_path / "bfcl-services.db",
        stem=tmp_path / "bfcl",
        transient_rate=0.1,
        seed=7,
        quiet=True,
        agent="pydantic-ai",
    )
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]


def test_the_agent_option_and_its_default_files() -> None:
    assert parse_args([]).agent == "agentq"
    options = parse_args(["--agent", "pydantic-ai"])
    assert options.agent == "pydantic-ai" and options.db == Path("out/bfcl-agent.db")
    assert options.services_db == Path("out/bfcl-agent-services.db")
    with pytest.raises(SystemExit):
        parse_args(["--agent", "langgraph"])


def test_a_response_ends_at_each_call_needing_approval(bfcl_tasks: list[Task]) -> None:
    for task in bfcl_tasks:
        plan = segments(task)
        played = [(turn, i) for turn, indexes in plan for i in indexes]
        assert played == [(t, i) for t, texts in enumerate(task.call_texts)
                          for i in range(len(texts))]
        for turn, indexes in plan:
            calls = task.turn_calls(turn)
            assert not any(needs_approval(calls[i]) for i in indexes[:-1])
            # and only there: the other calls of a turn are parallel calls of one response
            assert needs_approval(calls[indexes[-1]]) or indexes[-1] == len(calls) - 1
    several = [ix for task in bfcl_tasks for _, ix in segments(task) if len(ix) > 1]
    assert len(several) > 100


async def test_agent_runs_match_the_ground_truth_and_a_rerun_applies_nothing(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    tasks = bfcl_tasks[:24]
    summary = await replay(_options(tmp_path), tasks=tasks)
    assert summary.ok, format_summary(summary)
    assert summary.match_line == "24/24 tasks match the ground truth"
    calls = sum(len(texts) for task in tasks for texts in task.call_texts)
    assert summary.calls_applied_now == calls
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        rows = await store.calls(workflow_id(tasks[0].id))
    kinds = {(row.label or {}).get("kind") for row in rows if row.kind is CallKind.CALL}
    assert kinds == {"model", "tool"}
    assert all(row.lane == "high" for row in rows if row.key.startswith("model:"))

    again = await replay(_options(tmp_path), tasks=tasks)
    assert again.ok and again.calls_applied_now == 0 and again.calls_applied_before == calls


async def test_the_agent_summary_counts_what_its_log_holds(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    # Review 11, #7: lanes, runs vs. turns, the tools' retries and the approved turns.
    tasks = bfcl_tasks[:10]
    summary = await replay(_options(tmp_path), tasks=tasks)
    assert summary.ok, format_summary(summary)
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        rows = [r for t in tasks for r in await store.calls(workflow_id(t.id))]
    tool_lanes = Counter(r.lane for r in rows if (r.label or {}).get("kind") == "tool")
    model_lanes = Counter(r.lane for r in rows if (r.label or {}).get("kind") == "model")
    assert summary.lanes == {"tool calls": dict(tool_lanes), "model requests": dict(model_lanes)}
    assert (summary.steps, summary.steps_completed) == (10, 10)
    assert summary.turns == sum(len(t.call_texts) for t in tasks)
    approved_turns = {(t.id, turn) for t in tasks for turn in range(len(t.call_texts))
                      if any(needs_approval(c) for c in t.turn_calls(turn))}
    assert summary.approved_turns == len(approved_turns) > 0
    assert summary.call_retries_now > 0  # transient_rate=0.1: retried inside the tools
    text = format_summary(summary)
    assert "10/10 agent runs completed" in text and "(LOW lane)" not in text
    assert "tool calls in medium" in text and "inside the agent's tools" in text


@pytest.mark.slow
def test_agent_replay_killed_mid_call_recovers_200_of_200(tmp_path: Path) -> None:
    command = ["--agent", "pydantic-ai", "--crash-after", "500", "--crash-at", "during",
               "--quiet"]
    crashed = run_replay(tmp_path, "--fresh", *command)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr

    rerun = run_replay(tmp_path, *command)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert rerun.stdout.rstrip().endswith("✔ 200/200 tasks match the ground truth")
    summary = json.loads((tmp_path / "bfcl-summary.json").read_text())
    assert summary["ok"] is True
    assert summary["calls_answered_from_log_now"] > 0
    assert summary["calls_applied_before"] >= 500
    keys = applied_keys(tmp_path / "bfcl-services.db")
    assert len(keys) == len(set(keys)) == TOTAL  # no tool call applied twice


def _responses(rows: list[CallRow]) -> dict[tuple[str, str], list[CallRow]]:
    """The tool calls of each model response (``tool:<n>.<i>:<id>``), by run and response."""
    out: dict[tuple[str, str], list[CallRow]] = {}
    for row in rows:
        if row.kind is CallKind.CALL and row.key.startswith("tool:"):
            n = row.key.split(":")[1].split(".")[0]
            out.setdefault((row.workflow_id, n), []).append(row)
    return out


@pytest.mark.slow
async def test_all_200_tasks_as_agent_runs_with_parallel_tool_calls(
    tmp_path: Path, bfcl_tasks: list[Task]
) -> None:
    summary = await replay(_options(tmp_path, transient_rate=0.05, seed=0))
    assert summary.ok, format_summary(summary)
    assert summary.match_line == "200/200 tasks match the ground truth"
    assert summary.calls_applied_now == TOTAL
    keys = applied_keys(tmp_path / "bfcl-services.db")
    assert len(keys) == len(set(keys)) == TOTAL  # each call applied once
    async with SqliteStore(tmp_path / "bfcl.db") as store:
        rows = [r for t in bfcl_tasks for r in await store.calls(workflow_id(t.id))]
    responses = _responses(rows)
    several = [calls for calls in responses.values() if len(calls) > 1]
    assert len(several) > 100  # responses with several tool calls: parallel tool calls
    # and they ran side by side: a call started before another of its response completed
    overlapping = [
        calls for calls in several
        if any(a.first_seq < b.first_seq < a.last_seq for a in calls for b in calls)
    ]
    assert len(overlapping) > 50, len(overlapping)
