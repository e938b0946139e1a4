"""What the views say must be what happened (issue 22 fault 6): a refused approval is not
"approved", a cancelled run's step is not "failed", the replay count says what it counts, and
no two outcomes share a colour."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agentq import MemoryStore, Queue, WorkflowEngine
from agentq.clock import FakeClock
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.markup import COLORS
from agentq.widgets import ApprovalPanel, StepTable
from agentq.widgets.html import workflow_detail_html
from agentq.widgets.html.calls import call_totals_html
from agentq.widgets.html.detail import step_detail_html
from agentq.widgets.models.calls import CallCounts
from agentq.widgets.models.detail import load_detail
from agentq.widgets.models.tree import build_tree
from agentq.workflows import StepContext, StepDef, Workflow

# --- a refused approval ----------------------------------------------------------------------


def _refund_agent(refunds: list[int]) -> Agent[None, str]:
    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 0:
            call = ToolCallPart("refund", {"order_id": 42, "amount": 120}, "call-refund")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(scripted), name="support")

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: int, amount: int) -> str:
        refunds.append(amount)
        return f"refunded {amount}"

    return agent


@pytest.fixture
async def durable() -> AsyncIterator[tuple[DurableAgent[None, str], list[int]]]:
    refunds: list[int] = []
    async with Queue() as queue:
        engine = WorkflowEngine(queue, MemoryStore(), worker_id="w")
        yield DurableAgent(_refund_agent(refunds), engine), refunds
        await engine.close()


async def test_arguments_of_the_wrong_type_are_refused_and_the_editor_keeps_them(
    durable: tuple[DurableAgent[None, str], list[int]],
) -> None:
    agent, refunds = durable
    assert (await agent.run("refund order 42", run_id="t")).status == "waiting"
    panel = ApprovalPanel(agent.engine)
    await panel.refresh()
    slot = panel.slots[0]
    typed = '{"order_id": 42, "amount": "lots"}'
    slot.args.value = typed
    slot.note.value = "half"
    slot.approve.click()
    await panel.join()
    assert 'data-outcome="refused"' in slot.status.value, slot.status.value
    assert "not accepted" in slot.status.value and "approved" not in slot.status.value
    assert "do not fit" in slot.status.value  # why, from the wait asked again
    await panel.refresh()  # the same approval, asked again: the slot shows it anew
    assert slot.key == ("t", 0) and not slot.approve.disabled
    assert slot.args.value == typed and slot.note.value == "half"  # what was typed stays
    assert 'data-outcome="refused"' in slot.status.value
    slot.args.value = '{"order_id": 42, "amount": 60}'
    slot.approve.click()
    await panel.join()
    assert 'data-outcome="completed"' in slot.status.value and refunds == [60]
    await panel.stop()


async def test_a_new_wait_in_the_slot_gets_the_new_arguments_not_old_typing(
    durable: tuple[DurableAgent[None, str], list[int]],
) -> None:
    agent, _ = durable
    await agent.run("refund order 42", run_id="t")
    panel = ApprovalPanel(agent.engine)
    await panel.refresh()
    slot = panel.slots[0]
    slot.args.value = '{"order_id": 42, "amount": "lots"}'
    slot.approve.click()
    await panel.join()
    await agent.engine.cancel("t")
    await panel.refresh()
    assert slot.key is None
    await agent.run("refund order 42", run_id="t2")
    await panel.refresh()
    assert slot.key == ("t2", 0) and '"amount": 120' in slot.args.value
    await panel.stop()


# --- a cancelled run's step ------------------------------------------------------------------


async def test_a_cancelled_runs_step_is_shown_cancelled_not_failed(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    async def ask(ctx: StepContext) -> Any:
        return await ctx.wait_for_input("ok", reason="go on?")

    await engine.run(Workflow("c", [StepDef("ask", ask)]))
    assert await engine.cancel("c", reason="changed my mind")
    table = StepTable(engine.store, clock=clock)
    await table.refresh()
    assert 'data-status="cancelled"' in table.html.value
    assert 'data-status="failed"' not in table.html.value
    await table.stop()
    snap = await load_detail(engine.store, "c")
    assert snap is not None
    assert build_tree(snap.workflow, snap.steps, snap.calls).children[0].state == "cancelled"
    for html in (workflow_detail_html(snap, now=clock.time()),
                 step_detail_html(snap, 0, now=clock.time())):
        assert 'data-status="cancelled"' in html and 'data-status="failed"' not in html


# --- the replay count ------------------------------------------------------------------------


def test_the_replay_count_says_it_counts_calls_and_answered_waits() -> None:
    html = call_totals_html(CallCounts(calls=2, runs=2, completed=2), 3)
    assert 'data-answered="3"' in html
    assert "3 calls and waits replayed from the log" in html
    assert "approvals" in html  # the tooltip says an answered approval counts


# --- colours ---------------------------------------------------------------------------------

_FAMILIES = ({"leased", "running"}, {"failed", "error"}, {"waiting", "waited", "resumed"},
             {"pending", "backoff"}, {"timeout", "timed_out"}, {"completed", "answered"},
             {"started", "running", "leased"})
"""Shades of one meaning (a wait and its phases, a run and its lease...)."""


def _lab(colour: str) -> tuple[float, float, float]:
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = lin(r), lin(g), lin(b)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_outcomes_of_different_meaning_have_colours_a_person_tells_apart() -> None:
    # "timed out" (#ea580c) and "waiting for input" (#d97706) were 22 apart (CIE76 ΔE).
    close = []
    for (a, (ca, _)), (b, (cb, _)) in itertools.combinations(COLORS.items(), 2):
        if any({a, b} <= family for family in _FAMILIES):
            continue
        distance = sum((p - q) ** 2 for p, q in zip(_lab(ca), _lab(cb), strict=True)) ** 0.5
        if distance < 25:
            close.append((a, b, round(distance, 1)))
    assert close == []


def test_every_call_state_has_its_colour() -> None:
    # A call "started", a wait "answered" or "timed_out" fell back to pending's grey.
    for state in ("started", "completed", "failed", "waiting", "answered", "timed_out"):
        assert state in COLORS, state
