"""The conversation view's models and HTML (no ipywidgets): an agent run folded into turns and
tool cards, prices and costs, a child run nested, a fork's lineage, a comparison, escaping."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import agent_crash_child as child
import agent_delegates
import pytest

from agentq import Queue, WorkflowEngine
from agentq.errors import UnknownWorkflowError
from agentq.integrations.pydantic_ai import DurableAgent
from agentq.store import CallKind, CallRow, CallState, MemoryStore
from agentq.widgets import Price, compare, export_html
from agentq.widgets.html.conversation import conversation_html, cost_text, events_html
from agentq.widgets.models.folding import fold_conversation
from agentq.widgets.models.prices import cost_of, price_table
from agentq.widgets.models.runs import event_page, load_conversation

pytestmark = pytest.mark.timeout(60)
MODEL = "function:respond:"


@pytest.fixture
async def engine() -> AsyncIterator[WorkflowEngine]:
    async with Queue() as queue:
        eng = WorkflowEngine(queue, MemoryStore())
        yield eng
        await eng.close()


@pytest.fixture
async def waiting(engine: WorkflowEngine, tmp_path: Path) -> DurableAgent[None]:
    """Run ``r1`` of the approval agent: two parallel adds, a mul, then ``send`` waits."""
    durable = DurableAgent(child.build_agent(tmp_path / "side", approval=True), engine)
    run = await durable.run(child.PROMPT, run_id="r1")
    assert run.status.value == "waiting"
    return durable


def shown(html: str) -> str:
    """The text a person sees (tags and attributes dropped)."""
    return re.sub(r"<[^>]+>", "", html)


def test_prices_and_cost_math() -> None:
    table = price_table({MODEL: (2.5, 10.0), "b": Price(1, 0)})
    assert table[MODEL] == Price(2.5, 10.0)
    usage = {"input_tokens": 1_000, "output_tokens": 200}
    assert cost_of(MODEL, usage, table) == pytest.approx((1_000 * 2.5 + 200 * 10.0) / 1e6)
    assert cost_of("unknown", usage, table) is None  # never a guessed price
    assert cost_of("b", {"input_tokens": True}, table) == 0  # a bool is not a count
    assert cost_text(None) == "\u2013" and cost_text(0.0045) == "0.0045"
    assert cost_text(1234.5) == "1,234.50"
    with pytest.raises(ValueError, match=r"prices\['m'\]: Price.input_per_million"):
        price_table({"m": (-1, 2)})
    with pytest.raises(TypeError, match=r"prices\['m'\] must be a Price"):
        price_table({"m": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="must be a number"):
        Price("1", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapping"):
        price_table([("m", (1, 2))])  # type: ignore[arg-type]


async def test_a_waiting_run_folds_into_turns_parallel_cards_and_an_approval(
    waiting: DurableAgent[None],
) -> None:
    store = waiting.engine.store
    conv = await load_conversation(store, "r1", prices={MODEL: Price(1_000_000, 0)})
    assert conv.state == "waiting" and conv.prompt == child.PROMPT and conv.output is None
    assert [t.key for t in conv.turns] == ["model:0", "model:1", "model:2"]
    first = conv.turns[0]
    # The parallel calls of one response keep the response's order, with args and results.
    assert [(c.tool, c.tool_call_id, c.args, c.result, c.state) for c in first.tools] == [
        ("add", "a1", {"a": 1, "b": 2}, 3, "completed"),
        ("add", "a2", {"a": 3, "b": 4}, 7, "completed"),
    ]
    assert first.tools[0].key == "tool:0.0:a1"
    assert first.model == MODEL and first.input_tokens > 0
    assert first.cost == pytest.approx(first.input_tokens)  # 1e6 per million input tokens
    assert conv.cost == pytest.approx(sum(t.input_tokens for t in conv.turns))
    [send] = conv.turns[2].tools
    assert send.state == "waiting" and send.waiting is not None
    assert send.waiting.key == "approval:2.0:s1" and send.args == {"to": "bob"}
    assert [(c.tool, a.key) for c, a in conv.waiting()] == [("send", "approval:2.0:s1")]
    html = conversation_html(conv)
    assert 'data-agentq="final-answer" data-pending="1"' in html
    assert 'data-state="waiting"' in html
    assert "tool:0.0:a1" not in shown(html)  # keys and fingerprints: behind "details" only
    assert "fingerprint" not in shown(html)
    assert "tool:0.0:a1" in shown(conversation_html(conv, details=True))


async def test_an_answered_approval_and_the_final_answer(waiting: DurableAgent[None]) -> None:
    await waiting.approve("r1", note="ok", override_args={"to": "eve"})
    conv = await load_conversation(waiting.engine.store, "r1")
    assert conv.state == "completed" and conv.output == "done after 3 requests"
    [send] = conv.turns[2].tools
    assert send.state == "completed" and send.result == "sent to eve"
    [ask] = send.approvals
    assert (ask.state, ask.approved, ask.note, ask.override_args) == (
        "answered", True, "ok", {"to": "eve"})
    assert conv.turns[-1].text == "done after 3 requests"
    assert conv.cost is None  # no price table: unknown, not 0
    html = conversation_html(conv)
    assert html.index('data-agentq="final-answer"') < html.index('data-agentq="prompt"')


async def test_a_denied_call_and_a_fork_with_its_lineage_and_comparison(
    waiting: DurableAgent[None],
) -> None:
    await waiting.deny("r1", note="no")
    conv = await load_conversation(waiting.engine.store, "r1")
    assert conv.turns[2].tools[0].state == "denied"
    assert conv.forked_from is None
    key = "tool:1.0:m1"
    await waiting.fork("r1", "f1", at=key, replace={key: 100})
    fork = await load_conversation(waiting.engine.store, "f1")
    assert fork.forked_from == ("r1", key, (key,))  # parent, at, the keys edited
    assert fork.turns[1].tools[0].result == 100 and fork.turns[1].tools[0].edited
    assert not fork.turns[0].tools[0].edited and not fork.turns[1].edited
    assert conversation_html(fork).count('data-agentq="edited"') == 1
    assert 'data-agentq="lineage" data-parent="r1"' in conversation_html(fork)
    compared = await compare(waiting.engine, "r1", "f1", prices={MODEL: (1, 1)})
    assert compared.diverged_at == 1 and compared.why == "request 1: a tool result differs"
    html = compared._repr_html_()
    assert 'data-agentq="compare" data-diverged="1"' in html
    assert html.count('data-agentq="compare-side"') == 2
    answers = html.split('data-figure="answer"')[1].split("</tr>")[0]
    assert "done after 3 requests" in answers and ">waiting<" in answers  # the fork asks again
    lineage = html.split('data-figure="lineage"')[1].split("</tr>")[0]
    assert "fork of r1 at tool:1.0:m1" in lineage
    same = await compare(waiting.engine.store, "r1", "r1")
    assert same.diverged_at is None and same.why.startswith("the runs do not differ")
    with pytest.raises(UnknownWorkflowError, match="nope"):
        await compare(waiting.engine, "r1", "nope")


async def test_a_child_run_nests_under_the_tool_call_that_started_it(
    waiting: DurableAgent[None],
) -> None:
    store = waiting.engine.store
    wf = await store.get_workflow("r1")
    assert wf is not None
    calls = list(await store.calls("r1"))
    kid = CallRow("r1", "child:tool:1.0:m1", CallKind.WAIT, 0, CallState.ANSWERED,
                  output={"total": 1}, details={"child": "r1/sub"}, first_seq=0)
    loose = replace(kid, key="child:top", details={"child": "r1/top"}, first_seq=0)
    conv = fold_conversation(wf, await store.step_rows("r1"), [loose, kid, *calls],
                             child_states={"r1/sub": "completed"})
    [mul_card] = conv.turns[1].tools
    assert [c.workflow_id for c in mul_card.children] == ["r1/sub"]  # recorded before it
    assert mul_card.children[0].output == {"total": 1}
    assert mul_card.children[0].state == "completed"
    assert [c.workflow_id for c in conv.children] == ["r1/top"]  # names no tool call
    html = conversation_html(conv)
    card = html[html.index('data-call-id="m1"'):]
    assert card.index('data-workflow="r1/sub"') < card.index('data-agentq="tool-card"')


async def test_each_child_run_sits_under_its_own_call_with_the_child_runs_state(
    engine: WorkflowEngine,
) -> None:
    """One response calls ``delegate`` twice and ``plain``: each child run under the call its
    wait names (``child:<call key>``), not under the last call recorded; ``d1``'s child
    completed (its wait row stays open), ``d2``'s waits for an approval and its call with it
    (recorded ended by the parking signal: shown waiting for the child, not failed)."""
    boss, helper = agent_delegates.build(engine)
    assert (await boss.run("go", run_id="b")).status.value == "waiting"
    conv = await load_conversation(engine.store, "b")
    d1, d2, p1 = conv.turns[0].tools
    assert [(c.workflow_id, c.state) for c in d1.children] == [("b/tool:0.0:d1", "completed")]
    assert [(c.workflow_id, c.state) for c in d2.children] == [("b/tool:0.1:d2", "waiting")]
    assert p1.children == () and conv.children == ()
    assert (d2.state, d2.error, d2.waiting_on) == ("waiting", None,
                                                  "child run 'b/tool:0.1:d2' (helper)")
    assert d1.children[0].conversation is not None
    html = conversation_html(conv)
    at = [html.index(f'data-call-id="{i}"') for i in ("d1", "d2", "p1")]
    d1_html, d2_html, p1_html = html[at[0]:at[1]], html[at[1]:at[2]], html[at[2]:]
    assert d1_html.count('data-agentq="child-run"') == 1
    assert 'data-workflow="b/tool:0.0:d1"' in d1_html
    assert d2_html.count('data-agentq="child-run"') == 1
    assert 'data-workflow="b/tool:0.1:d2"' in d2_html and "InputRequested" not in html
    assert "waits for child run 'b/tool:0.1:d2' (helper)" in shown(d2_html).replace("&#x27;", "'")
    assert 'data-agentq="child-run"' not in p1_html
    assert (await helper.approve("b/tool:0.1:d2")).status.value == "completed"
    assert (await boss.run("go", run_id="b")).status.value == "completed"
    done = await load_conversation(engine.store, "b")
    d1, d2, p1 = done.turns[0].tools
    assert [c.state for c in (*d1.children, *d2.children)] == ["completed", "completed"]
    assert (d2.state, d2.result, p1.children) == ("completed", "helper done", ())


async def test_every_user_string_is_escaped_and_isolated_per_value(
    waiting: DurableAgent[None],
) -> None:
    store = waiting.engine.store
    wf = await store.get_workflow("r1")
    assert wf is not None
    evil = "<img src=x onerror=alert(1)>"
    rlo = "thanks\u202e"
    wf = replace(wf, input={**wf.input, "prompt": evil})
    calls = []
    for row in await store.calls("r1"):
        if row.key == "model:2":
            out = dict(row.output)
            out["parts"] = [{"part_kind": "text", "content": evil},
                            {"part_kind": "tool-call", "tool_name": evil, "tool_call_id": "s1",
                             "args": {"memo": rlo, "amount": 1900}}]
            row = replace(row, output=out)
        calls.append(row)
    html = conversation_html(fold_conversation(wf, await store.step_rows("r1"), calls))
    assert evil not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    # One isolate per JSON string: the RLO in "memo" cannot reverse the amount after it.
    assert "<bdi>&quot;thanks\u202e&quot;</bdi>,\n  &quot;amount&quot;: 1900" in html
    assert "<bdi>" not in html.split("&quot;amount&quot;")[1].split("</pre>")[0]


async def test_an_event_page_and_its_table(waiting: DurableAgent[None]) -> None:
    store = waiting.engine.store
    first = await event_page(store, "r1", limit=5)
    assert len(first.events) == 5 and first.more
    second = await event_page(store, "r1", after=first.events[-1].seq, limit=100)
    assert not second.more and second.events[0].seq > first.events[-1].seq
    html = events_html(first)
    assert html.count('data-agentq="event-row"') == 5 and "WorkflowStarted" in html
    with pytest.raises(ValueError, match="limit must be >= 1"):
        await event_page(store, "r1", limit=0)


async def test_the_static_export_keeps_the_conversation_view(
    waiting: DurableAgent[None], tmp_path: Path
) -> None:
    await waiting.approve("r1")
    key = "tool:1.0:m1"
    await waiting.fork("r1", "f1", at=key, replace={key: 100})
    out = await export_html(waiting.engine.store, tmp_path / "page.html", now=time.time(),
                            prices={MODEL: (1.0, 2.0)})
    page = out.read_text()
    assert page.count('data-agentq="export-conversation"') == 2
    assert 'data-agentq="conversation" data-run="f1"' in page
    assert 'data-agentq="lineage" data-parent="r1" data-at="tool:1.0:m1"' in page
    assert "done after 3 requests" in shown(page) and "<script" not in page
    costs = re.findall(r'data-agentq="run-totals"[^>]*data-cost="([^"]*)"', page)
    assert len(costs) == 2 and all(float(c) > 0 for c in costs)  # the prices given


async def test_errors_show_where_they_happened(engine: WorkflowEngine, tmp_path: Path) -> None:
    durable = DurableAgent(child.build_agent(tmp_path / "side", mul_down=[True]), engine)
    run = await durable.run(child.PROMPT, run_id="down")
    assert run.status.value == "failed"
    conv = await load_conversation(engine.store, "down")
    [mul] = conv.turns[1].tools
    assert mul.state == "failed" and mul.error is not None and "tool backend down" in mul.error
    assert conv.error is not None and conv.output is None
    html = conversation_html(conv)
    assert 'data-agentq="run-error"' in html and 'data-agentq="tool-error"' in html
    card = html[html.index('data-call-id="m1"'):]  # the last card: the run stopped there
    assert 'data-agentq="tool-card"' not in card and "tool backend down" in card


def test_a_huge_tool_result_is_cut_and_tooltips_carry_no_bidi_controls() -> None:
    """A 500,000-character result is drawn up to SHOWN_AT_MOST characters and said to be
    longer; a shortened value's tooltip has no bidi control (a title cannot isolate one)."""
    from agentq.markup import json_text
    from agentq.widgets.html.detail import SHOWN_AT_MOST, json_html

    html = json_html({"blob": "x" * 500_000})
    assert len(html) < SHOWN_AT_MOST + 5_000
    assert 'data-agentq="cut"' in html and "480,0" in html
    assert 'data-agentq="cut"' not in json_html({"small": 1})
    short = json_text({"memo": "thanks\u202e", "amount": 1900, "pad": "y" * 300})
    title = short.split('title="', 1)[1].split('"', 1)[0]
    assert "\u202e" not in title and "thanks" in title
