"""A wait an agent run left ``waiting`` when it was cancelled has ended with the run:
`pending_approvals` does not list it, `approve` / `deny` raise `NotWaitingError` naming the run
and its state, and ``agentq show`` prints it with the run's state in its calls table and its
messages section (text and ``--json``) alike; a retry of the run re-opens it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import agent_delegates
import pytest
from click.testing import CliRunner, Result
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import agentq.integrations.pydantic_ai._decisions as decisions
from agentq.cli import cli
from agentq.cli.commands import Settings
from agentq.clock import FakeClock
from agentq.errors import NotWaitingError, WorkflowClosedError
from agentq.integrations.pydantic_ai import (
    ChildCancelledWithParent,
    DurableAgent,
    PendingApproval,
)
from agentq.queue import Queue
from agentq.store import SqliteStore
from agentq.widgets import pending_waits
from agentq.widgets.html.conversation import conversation_html
from agentq.widgets.models.runs import load_conversation
from agentq.workflows import WorkflowEngine

pytestmark = pytest.mark.timeout(60)


def pay_agent() -> Agent[None, str]:
    """The first request asks for ``pay(n=1)`` (``p1``, needs approval), the next answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("pay", {"n": 1}, tool_call_id="p1")])
        return ModelResponse(parts=[TextPart("paid")])

    agent = Agent(FunctionModel(respond), name="payer")

    @agent.tool_plain(requires_approval=True)
    def pay(n: int) -> str:
        return f"paid {n}"

    return agent


def keys(pending: list[PendingApproval]) -> list[tuple[str, str]]:
    return [(p.run_id, p.key) for p in pending]


async def test_a_cancelled_runs_approval_is_not_pending_and_cannot_be_answered(
    tmp_path: Path,
) -> None:
    async with Queue() as queue, SqliteStore(tmp_path / "a.db") as store, WorkflowEngine(
        queue, store
    ) as engine:
        durable = DurableAgent(pay_agent(), engine)
        for run_id in ("solo", "other"):
            assert (await durable.run("pay", run_id=run_id)).status.value == "waiting"
        await engine.cancel("solo", "nope")
        assert await durable.pending_approvals("solo") == []
        assert keys(await durable.pending_approvals()) == [("other", "approval:0.0:p1")]
        assert [r.workflow_id for r in await pending_waits(store)] == ["other"]
        for verb in (durable.approve, durable.deny):
            with pytest.raises(NotWaitingError, match=r"run 'solo' is cancelled \(nope\)"):
                await verb("solo")
        row = await store.get_workflow("solo")
        assert row is not None and row.state.value == "cancelled"  # nothing was recorded
        assert (await durable.approve("other")).output == "paid"


async def test_a_child_cancelled_with_its_parent_waits_no_more_until_the_parent_retries(
    tmp_path: Path,
) -> None:
    async with Queue() as queue, SqliteStore(tmp_path / "c.db") as store, WorkflowEngine(
        queue, store
    ) as engine:
        boss, helper = agent_delegates.build(engine)
        assert (await boss.run("go", run_id="job")).status.value == "waiting"
        child = "job/tool:0.1:d2"
        assert keys(await boss.pending_approvals("job")) == [(child, "approval:0.0:h1")]
        await engine.cancel("job", "stop")
        assert await boss.pending_approvals("job") == []
        assert await boss.pending_approvals() == []
        assert await helper.pending_approvals() == []
        assert await helper.pending_approvals(child) == []
        with pytest.raises(NotWaitingError, match=rf"run '{child}' is cancelled"):
            await helper.approve(child)
        assert (await engine.retry("job")).status.value == "waiting"  # re-opens the child
        assert keys(await boss.pending_approvals("job")) == [(child, "approval:0.0:h1")]
        assert (await helper.approve(child)).status.value == "completed"


async def test_a_run_cancelled_while_an_answer_is_on_its_way_raises_not_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled after the approval was chosen, before it was recorded: the engine's
    `WorkflowClosedError` reaches the caller as the `NotWaitingError` the docs promise."""
    async with Queue() as queue, SqliteStore(tmp_path / "r.db") as store, WorkflowEngine(
        queue, store
    ) as engine:
        durable = DurableAgent(pay_agent(), engine)
        assert (await durable.run("pay", run_id="solo")).status.value == "waiting"
        chosen = decisions.waiting_call

        async def then_cancel(*args: Any) -> PendingApproval:
            found = await chosen(*args)
            await engine.cancel("solo", "meanwhile")
            return found

        monkeypatch.setattr(decisions, "waiting_call", then_cancel)
        with pytest.raises(NotWaitingError, match=r"run 'solo'.*cancelled \(meanwhile\)"):
            await durable.approve("solo")


def show(db: Path, *options: str) -> str:
    result: Result = CliRunner().invoke(
        cli, ["show", str(db), "solo", *options], obj=Settings(clock=FakeClock(), width=300))
    assert result.exit_code == 0, result.output
    return result.output


def test_show_prints_a_cancelled_runs_approval_with_the_runs_state_everywhere(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"

    async def make(cancel: bool) -> None:
        async with Queue() as queue, SqliteStore(db) as store, WorkflowEngine(
            queue, store
        ) as engine:
            durable = DurableAgent(pay_agent(), engine)
            if not cancel:
                assert (await durable.run("pay", run_id="solo")).status.value == "waiting"
            else:
                await engine.cancel("solo", "nope")

    asyncio.run(make(cancel=False))
    lines = show(db).splitlines()
    assert "approval approval:0.0:p1: waiting" in [line.strip() for line in lines]
    asyncio.run(make(cancel=True))
    text = show(db)
    [row] = [line for line in text.splitlines() if "│ approval:0.0:p1" in line]
    assert "cancelled" in row and "waiting" not in row
    section = [line.strip() for line in text.splitlines()[text.splitlines().index("messages"):]]
    assert "approval approval:0.0:p1: cancelled" in section
    assert not any("waiting" in line for line in section)
    got: dict[str, Any] = json.loads(show(db, "--json"))
    assert [c["state"] for c in got["calls"]] == ["completed", "cancelled"]
    [card] = got["messages"][1]["tool_calls"]
    assert (card["state"], card["waiting_on"]) == ("cancelled", None)
    assert [a["state"] for a in card["approvals"]] == ["cancelled"]


async def test_a_cancelled_runs_approval_card_says_cancelled_not_asked_again(
    tmp_path: Path,
) -> None:
    async with Queue() as queue, SqliteStore(tmp_path / "v.db") as store, WorkflowEngine(
        queue, store
    ) as engine:
        durable = DurableAgent(pay_agent(), engine)
        assert (await durable.run("pay", run_id="solo")).status.value == "waiting"
        await engine.cancel("solo", "nope")
        html = conversation_html(await load_conversation(store, "solo"))
    assert 'data-agentq="approval-ask"' in html and 'data-state="cancelled"' in html
    assert "approval cancelled" in html
    assert "asked again" not in html


async def test_a_stored_cancel_reason_is_escaped_in_not_waiting_messages(
    tmp_path: Path,
) -> None:
    reason = "\x1b[31mRED\x1b[0m \u202eevil"
    async with Queue() as queue, SqliteStore(tmp_path / "r.db") as store, WorkflowEngine(
        queue, store
    ) as engine:
        durable = DurableAgent(pay_agent(), engine)
        assert (await durable.run("pay", run_id="solo")).status.value == "waiting"
        await engine.cancel("solo", reason)
        for verb in (durable.approve, durable.deny):
            with pytest.raises(NotWaitingError) as caught:
                await verb("solo")
            message = str(caught.value)
            assert "\x1b" not in message and "\u202e" not in message
            assert r"(\x1b[31mRED\x1b[0m \u202eevil)" in message
        with pytest.raises(WorkflowClosedError) as closed:  # the store's own message too
            await engine.resume("solo", "agent", {"approved": True}, key="approval:0.0:p1")
        assert "\x1b" not in str(closed.value) and r"\u202eevil" in str(closed.value)


def test_show_shortens_a_long_approval_note_like_arguments(tmp_path: Path) -> None:
    db = tmp_path / "n.db"
    note = "why " * 25_000

    async def make() -> None:
        async with Queue() as queue, SqliteStore(db) as store, WorkflowEngine(
            queue, store
        ) as engine:
            durable = DurableAgent(pay_agent(), engine)
            assert (await durable.run("pay", run_id="solo")).status.value == "waiting"
            await durable.deny("solo", note=note)

    asyncio.run(make())
    text = show(db)
    [line] = [line.strip() for line in text.splitlines() if "(note: " in line]
    assert line.startswith("approval approval:0.0:p1: answered denied (note: why why")
    assert "why…)" in text and text.count("why") < 100  # 300 characters, as arguments
    assert len(text) < 20_000


def test_a_child_cancelled_with_its_parent_shows_its_stored_reason_escaped() -> None:
    """The stored cancel reason goes into the error's message with its control and bidi
    characters escaped (a terminal printing the message must not act on them)."""
    exc = ChildCancelledWithParent("P/k", "cancelled", "\x1b[31mRED\x1b[0m \u202eevil")
    text = str(exc)
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[31mRED\\x1b[0m \\u202eevil" in text
    assert exc.reason == "\x1b[31mRED\x1b[0m \u202eevil"  # the attribute keeps it as stored
