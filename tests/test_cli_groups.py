"""``agentq ls STORE --group G``: a run group's members with their state, and its summary."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agentq import (
    LaneConfig,
    NonRetryable,
    Priority,
    Queue,
    StepContext,
    StepDef,
    WorkflowDef,
    WorkflowEngine,
)
from agentq.cli import cli
from agentq.cli.group import Settings
from agentq.clock import FakeClock
from agentq.store import SqliteStore

pytestmark = pytest.mark.timeout(60)


def _body(ctx: StepContext) -> Any:
    if ctx.input == "boom":
        raise NonRetryable("the input is boom")
    return ctx.input


async def _make(path: Path) -> None:
    clock = FakeClock()
    async with (
        Queue({Priority.MEDIUM: LaneConfig(capacity=10, permits=2)}, clock=clock) as queue,
        SqliteStore(path) as store,
        WorkflowEngine(queue, store, worker_id="w1", clock=clock) as engine,
    ):
        group = engine.group("g")
        await group.submit(WorkflowDef("echo", [StepDef("s", _body)]),
                           {"one": 1, "bad": "boom", "two": 2})
        [m async for m in group.results()]
        await store.record_group("h", definition="echo", items={"x": 1}, now=0.0)
        own = {"x": "echo", "y": "shout", "z": "echo"}  # a definition per key
        await store.record_group("k", definition=own, items={"x": 1, "y": 2, "z": 3}, now=0.0)
        await store.start_workflow("other", ["s"], None, clock.time())


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=Settings(clock=FakeClock(), width=200))


@pytest.fixture
def made(tmp_path: Path) -> Path:
    path = tmp_path / "groups.db"
    asyncio.run(_make(path))
    return path


def test_ls_group_lists_the_members_in_submitted_order_and_a_summary(made: Path) -> None:
    result = run("ls", str(made), "--group", "g")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    members = [line for line in lines if " g/" in line]
    assert [m.split()[1] for m in members] == ["g/one", "g/bad", "g/two"]
    assert "failed" in members[1] and "the input is boom" in members[1]
    assert "other" not in result.stdout
    assert lines[-1] == (
        "group g (definition echo): 3 members: 2 completed, 1 failed, 0 cancelled, "
        "0 running, 0 waiting, 0 pending"
    )


def test_ls_group_of_members_with_their_own_definitions_counts_them(made: Path) -> None:
    result = run("ls", str(made), "--group", "k")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "group k (2 definitions): 3 members: 0 completed, 0 failed, 0 cancelled, "
        "0 running, 0 waiting, 3 pending"
    )


def test_ls_group_json_and_state_filter(made: Path) -> None:
    result = run("ls", str(made), "--group", "g", "--state", "completed", "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["workflow_id"] for r in rows] == ["g/one", "g/two"]
    assert "3 members: 2 completed, 1 failed" in result.stderr


def test_ls_group_counts_pending_members_and_refuses_unknown_groups(made: Path) -> None:
    result = run("ls", str(made), "--group", "h")
    assert result.exit_code == 0, result.output
    assert "1 members: 0 completed, 0 failed, 0 cancelled, 0 running, 0 waiting, 1 pending" in (
        result.stdout)
    missing = run("ls", str(made), "--group", "nope")
    assert missing.exit_code == 1 and "no run group 'nope'" in missing.stderr
    both = run("ls", str(made), "--group", "g", "--after", "x")
    assert both.exit_code == 2 and "not both" in both.output
