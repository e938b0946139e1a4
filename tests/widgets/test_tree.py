"""The run tree (issue 14): the model (`build_tree`: order, nesting of an agent's calls, a
waiting step, a failed call, a rerun call), the renderer (caps, escaping), and the live
`RunTree` in the dashboard (open nodes survive a refresh; a click opens the detail)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentq.clock import FakeClock
from agentq.queue import Job
from agentq.widgets import Dashboard, run_tree_html
from agentq.widgets.detail import REREAD_EVERY
from agentq.widgets.html import call_detail_html, tree_html
from agentq.widgets.models.detail import load_detail
from agentq.widgets.models.tree import TreeNode, build_tree, node_item
from agentq.workflows import StepContext, StepDef, Workflow, WorkflowEngine

from .fakes import Tools, agent_workflow
from .test_detail import PROBE, no_probe, probe_workflow

_DETAILS = re.compile(r'<details data-agentq="tree-node" data-node="([^"]*)"[^>]*?( open)?>')


def opened(html: str) -> set[str]:
    """The node ids drawn open."""
    return {m.group(1) for m in _DETAILS.finditer(html) if m.group(2)}


def kids(node: TreeNode) -> list[str]:
    return [c.node for c in node.children]


def three_steps(workflow_id: str = "three") -> Workflow:
    async def first(ctx: StepContext) -> Any:
        return await ctx.call(Job("a", lambda: 1))

    async def second(ctx: StepContext) -> Any:
        await ctx.call(Job("b", lambda: 2), label={"tool": "lookup"})
        return await ctx.call(Job("c", lambda: 3))

    async def third(ctx: StepContext) -> Any:
        return None

    return Workflow(workflow_id, [StepDef("first", first), StepDef("second", second),
                                  StepDef("third", third)])


def failing(workflow_id: str = "broken") -> Workflow:
    def boom() -> None:
        raise ValueError("service down")

    async def step(ctx: StepContext) -> Any:
        return await ctx.call(Job("charge", boom), label={"tool": "charge"})

    return Workflow(workflow_id, [StepDef("pay", step)])


async def test_steps_in_order_and_each_steps_calls_under_it(engine: WorkflowEngine) -> None:
    assert (await engine.run(three_steps())).status == "completed"
    snap = await load_detail(engine.store, "three")
    assert snap is not None
    root = build_tree(snap.workflow, tuple(reversed(snap.steps)), snap.calls)
    assert (root.node, root.kind, root.title, root.state) == ("w", "workflow", "three",
                                                              "completed")
    assert kids(root) == ["s:0", "s:1", "s:2"]  # step order, whatever the rows' order
    assert [c.title for c in root.children] == ["step 0 · first", "step 1 · second",
                                                "step 2 · third"]
    assert kids(root.children[0]) == ["c:a"] and kids(root.children[1]) == ["c:b", "c:c"]
    assert root.children[1].children[0].title == "tool lookup · b"
    assert root.children[2].children == []
    # Without step rows (an agent run's calls read alone), the calls hang on the root.
    bare = build_tree("three", (), snap.calls, state="completed")
    assert kids(bare) == ["c:a", "c:b", "c:c"] and bare.state == "completed"
    assert [n.node for n in root.walk()] == ["w", "s:0", "c:a", "s:1", "c:b", "c:c", "s:2"]


async def test_an_agent_step_nests_tools_under_the_model_request_and_shows_its_wait(
    engine: WorkflowEngine,
) -> None:
    assert (await engine.run(agent_workflow(Tools()))).status == "waiting"
    snap = await load_detail(engine.store, "trip")
    assert snap is not None
    root = build_tree(snap.workflow, snap.steps, snap.calls)
    step = root.children[0]
    assert (step.node, step.state) == ("s:0", "waiting")
    assert "attempt 2" in step.facts and "waits on approve" in step.facts
    assert not step.failed  # its first attempt's error is history, not a failure
    assert any(f.startswith("retried after: ") and "booking service down" in f
               for f in step.facts)
    assert kids(step) == ["c:plan"]
    model = step.children[0]
    assert model.kind == "model" and model.title == "model request · plan"
    assert kids(model) == ["c:tool:0", "c:tool:1", "c:tool:2", "c:approve"]
    book, wait = model.children[2], model.children[3]
    assert book.title == "tool book · tool:2" and "ran 2 times" in book.facts  # a rerun call
    assert (wait.kind, wait.state, wait.title) == ("wait", "waiting", "wait · approve")
    assert "book it?" in wait.facts


async def test_a_failed_call_shows_its_error_and_its_detail_the_traceback(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    assert (await engine.run(failing())).status == "failed"
    snap = await load_detail(engine.store, "broken")
    assert snap is not None
    root = build_tree(snap.workflow, snap.steps, snap.calls)
    call = root.children[0].children[0]
    assert (call.node, call.state, call.failed) == ("c:charge", "failed", True)
    assert "ValueError: service down" in call.facts
    assert root.failed and root.children[0].failed
    assert sum("service down" in f for f in root.children[0].facts) == 1  # said once
    html = tree_html(root)
    assert "color:#b91c1c" in html and "ValueError: service down" in html
    detail = call_detail_html(snap, "charge", now=clock.time())
    assert 'data-agentq="traceback"' in detail and "service down" in detail


def test_node_ids_map_to_detail_items_and_junk_is_refused() -> None:
    assert node_item("w") == ("workflow", None)
    assert node_item("s:3") == ("step", 3)
    assert node_item("c:tool:1") == ("call", "tool:1")
    for junk in ("x:1", "s:one", "c:", "", "s:-1"):
        with pytest.raises(ValueError, match="not a run tree node id"):
            node_item(junk)


def _wide(n: int) -> TreeNode:
    root = TreeNode("w", "workflow", "wide", "running")
    step = TreeNode("s:0", "step", "step 0 · loop", "leased")
    step.children = [TreeNode(f"c:k{i}", "call", f"call · k{i}", "completed") for i in range(n)]
    root.children = [step]
    return root


def test_caps_keep_the_latest_children_and_count_the_rest() -> None:
    html = tree_html(_wide(120), open_nodes={"w", "s:0"}, limit=50)
    assert html.count('data-agentq="tree-node"') == 2 + 50
    assert 'data-node="c:k119"' in html and 'data-node="c:k69"' not in html
    assert 'data-agentq="more" data-hidden="70"' in html and "70 more calls" in html
    assert opened(html) == {"w", "s:0"}
    capped = tree_html(_wide(120), nodes=10)
    assert capped.count('data-agentq="tree-node"') == 10
    assert 'data-hidden="112"' in capped  # 50 listed, 8 drawn: 70 + 42 counted
    with pytest.raises(ValueError, match="limit"):
        tree_html(_wide(1), limit=0)
    with pytest.raises(ValueError, match="nodes"):
        tree_html(_wide(1), nodes=0)


async def test_every_user_string_in_the_tree_is_escaped(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    workflow_id = f"wf{PROBE}"
    assert (await engine.run(probe_workflow(workflow_id))).status == "waiting"
    snap = await load_detail(engine.store, workflow_id)
    assert snap is not None
    html = run_tree_html(snap.workflow, snap.calls, snap.steps, expanded=True)
    no_probe(html)  # the workflow id, the step name, the call key and its tool label
    assert f'data-node="c:k{PROBE}"' not in html
    assert 'data-select="c:k&lt;img src=x onerror=alert(1)&gt;"' in html
    root = build_tree(snap.workflow, snap.steps, snap.calls)
    assert len(opened(html)) == sum(1 for n in root.walk() if n.children)


async def test_open_nodes_survive_a_refresh_and_a_click_opens_the_detail(
    engine: WorkflowEngine, clock: FakeClock
) -> None:
    assert (await engine.run(agent_workflow(Tools()))).status == "waiting"
    dash = Dashboard(engine)
    await dash.refresh()
    tree = dash.detail.tree
    assert 'data-agentq="tree-empty"' in tree.widget.value  # nothing selected yet
    await dash.detail.show("trip")
    assert opened(tree.widget.value) == {"w", "s:0"}  # the root and the waiting step
    # What the browser sends when the person expands the model request.
    tree._message(tree.widget, {"event": "toggle", "node": "c:plan", "open": True}, [])
    assert opened(tree.widget.value) == {"w", "s:0", "c:plan"}
    before = tree.widget.value
    await engine.resume("trip", "agent", {"approved": True}, key="approve")
    await clock.advance(REREAD_EVERY)
    await dash.refresh()  # new events: the pane re-reads the workflow, the tree is redrawn
    assert tree.widget.value != before and 'data-node="c:approve"' in tree.widget.value
    assert 'data-node="s:0" data-kind="step" data-state="completed"' in tree.widget.value
    assert opened(tree.widget.value) == {"w", "s:0", "c:plan"}  # still open
    tree._message(tree.widget, {"event": "toggle", "node": "s:0", "open": False}, [])
    assert opened(tree.widget.value) == {"w", "c:plan"}  # hidden in s:0, still open inside
    # A click on a label opens that node's detail, from the snapshot (no read).
    tree._message(tree.widget, {"event": "select", "node": "c:tool:2"}, [])
    assert dash.detail.items.value == ("call", "tool:2")
    assert 'data-kind="call"' in dash.detail.html.value
    assert 'data-key="tool:2"' in dash.detail.html.value
    tree._message(tree.widget, {"event": "select", "node": "s:0"}, [])
    assert 'data-kind="step"' in dash.detail.html.value
    shown = dash.detail.html.value
    for junk in ({"event": "select", "node": "s:9"}, {"event": "select", "node": "zz"},
                 {"event": "toggle", "node": 3}, "not a dict"):
        tree._message(tree.widget, junk, [])  # a stale or forged message changes nothing
    assert dash.detail.html.value == shown
    await dash.stop()


async def test_a_long_agent_run_lists_its_latest_calls(engine: WorkflowEngine) -> None:
    async def many(ctx: StepContext) -> Any:
        for i in range(60):
            await ctx.call(Job(f"k{i}", lambda i=i: i))

    await engine.run(Workflow("many", [StepDef("many", many)]))
    snap = await load_detail(engine.store, "many")
    assert snap is not None
    html = run_tree_html(snap.workflow, snap.calls, snap.steps, expanded=True, limit=25)
    assert 'data-node="c:k59"' in html and 'data-node="c:k34"' not in html
    assert "35 more calls not shown" in html


def _hidden(html: str) -> int:
    return sum(int(n) for n in re.findall(r'data-agentq="more" data-hidden="(\d+)"', html))


def test_the_step_cap_keeps_the_waiting_step_and_the_ones_around_it() -> None:
    # review F1: 71 steps waiting at step 10; the cap drew the last 50 pending steps.
    root = TreeNode("w", "workflow", "long", "running")
    root.children = [
        TreeNode(f"s:{i}", "step", f"step {i}", "completed" if i < 10 else
                 "waiting" if i == 10 else "pending") for i in range(71)
    ]
    html = tree_html(root, open_nodes={"w", "s:10"}, limit=50)
    drawn = re.findall(r'data-node="(s:\d+)"', html)
    assert drawn == [f"s:{i}" for i in range(50)]  # done, waiting, then the next pending ones
    assert "21 more steps not shown" in html and _hidden(html) == 21


def test_the_node_budget_is_spent_on_the_wait_and_the_newest_requests_first() -> None:
    # review F2: 46 model requests x 12 tool calls, waiting for an approval in the last one.
    root = TreeNode("w", "workflow", "agent", "running")
    step = TreeNode("s:0", "step", "step 0 · agent", "waiting")
    root.children = [step]
    for m in range(46):
        model = TreeNode(f"c:model:{m}", "model", "model request", "completed")
        model.children = [TreeNode(f"c:t{m}-{t}", "call", "tool", "completed")
                          for t in range(12)]
        step.children.append(model)
    step.children[-1].children.append(TreeNode("c:approval:pay", "wait", "approval", "waiting"))
    total = sum(1 for _ in root.walk())
    html = tree_html(root, nodes=500)
    assert html.count('data-agentq="tree-node"') == 500
    assert 'data-node="c:approval:pay"' in html
    assert all(f'data-node="c:model:{m}"' in html for m in range(46))  # every request
    assert 'data-node="c:t45-11"' in html and 'data-node="c:t0-0"' not in html  # newest first
    assert _hidden(html) == total - 500  # every cut is counted
    # a node cut partly keeps its latest children
    partly = [m for m in range(46) if f'"c:t{m}-0"' not in html and f'"c:t{m}-11"' in html]
    assert len(partly) <= 1


def test_tree_caps_name_a_bad_argument() -> None:
    with pytest.raises(TypeError, match=r"nodes must be an int >= 1, got '5'"):
        tree_html(_wide(1), nodes="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"limit must be an int >= 1, got 1.5"):
        tree_html(_wide(1), limit=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^limit must be >= 1, got 0$"):
        run_tree_html("w", limit=0)


async def test_a_live_workflow_is_brought_up_to_date_without_reading_its_calls_again(
    engine: WorkflowEngine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # review F7: every re-read loaded all of the workflow's call rows (10,000 each second).
    assert (await engine.run(agent_workflow(Tools()))).status == "waiting"
    await engine.run(three_steps("other"))
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show("trip")
    store = engine.store
    reads: list[object] = []
    real = store.calls

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return await real(*args, **kwargs)

    async def refresh() -> None:  # the dashboard's reads of call rows, not the engine's
        monkeypatch.setattr(store, "calls", counted)
        await clock.advance(REREAD_EVERY)
        await dash.refresh()
        monkeypatch.setattr(store, "calls", real)

    shown = dash.detail.snapshot
    await engine.run(three_steps("again"))  # events of another workflow: nothing is read
    await refresh()
    assert dash.detail.snapshot is shown
    await engine.resume("trip", "agent", {"approved": True}, key="approve")
    await refresh()  # its own events: brought up to date, its calls not read again
    assert reads == []
    fresh = dash.detail.snapshot
    full = await load_detail(store, "trip")
    assert fresh is not None and full is not None and fresh is not shown
    assert fresh.calls == full.calls and fresh.steps == full.steps
    assert fresh.events == full.events and fresh.workflow == full.workflow
    assert 'data-node="c:approve" data-kind="wait" data-state="answered"' in (
        dash.detail.tree.widget.value)
    await dash.stop()


async def test_toggle_and_select_name_a_bad_node_and_keep_no_phantom_nodes(
    engine: WorkflowEngine,
) -> None:
    # review F6
    from agentq.widgets.tree import RunTree

    picked: list[object] = []
    tree = RunTree(picked.append)
    with pytest.raises(KeyError, match="no workflow is shown: no node 's:0'"):
        tree.select("s:0")
    with pytest.raises(KeyError, match="no workflow is shown"):
        tree.toggle("s:0", True)
    await engine.run(three_steps())
    snap = await load_detail(engine.store, "three")
    tree.show(snap)
    for bad in (None, 5):
        with pytest.raises(TypeError, match=f"node id must be a str, got .*{bad}"):
            tree.select(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="node id must be a str"):
            tree.toggle(bad, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is_open must be a bool, got 'yes'"):
        tree.toggle("s:0", "yes")  # type: ignore[arg-type]
    for junk in ("s:00", "s:\u0663", "zz", "s:"):
        with pytest.raises(ValueError, match=re.escape(repr(junk))):
            tree.toggle(junk, True)
    for missing in ("s:99", "c:nope"):
        with pytest.raises(KeyError, match=re.escape(f"workflow 'three' has no node {missing!r}")):
            tree.toggle(missing, True)
        with pytest.raises(KeyError, match=re.escape(repr(missing))):
            tree.select(missing)
    assert tree.open_nodes() == {"w"} and picked == []
    tree.select("s:1")
    assert picked == [("step", 1)]
    # a forged toggle without "open" is ignored like other junk (it closed the node before)
    before = tree.widget.value
    tree._message(tree.widget, {"event": "toggle", "node": "w"}, [])
    assert tree.widget.value == before and tree.open_nodes() == {"w"}


async def test_the_kernel_acknowledges_the_pages_toggles_so_code_toggles_win_after(
    engine: WorkflowEngine,
) -> None:
    # review F11: the page re-applied a node the person toggled over every later redraw.
    from agentq.widgets.tree import ESM, RunTree

    await engine.run(three_steps())
    tree = RunTree()
    tree.show(await load_detail(engine.store, "three"))
    assert 'data-ack="0"' in tree.widget.value
    tree._message(tree.widget, {"event": "toggle", "node": "w", "open": False, "seq": 3}, [])
    assert 'data-ack="3"' in tree.widget.value and opened(tree.widget.value) == set()
    tree.toggle("w", True)  # from code: drawn open, with the page's toggle acknowledged
    assert 'data-ack="3"' in tree.widget.value and opened(tree.widget.value) == {"w"}
    tree._message(tree.widget, {"event": "toggle", "node": "s:9", "open": True, "seq": 4}, [])
    assert 'data-ack="4"' in tree.widget.value  # a stale node: heard, nothing else changes
    assert "mine[1] <= ack" in ESM and "seq" in ESM


async def test_without_anywidget_the_dashboard_works_and_the_tree_is_plain_html(
    engine: WorkflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # review F9: Dashboard(engine) raised MissingExtraError when only anywidget was missing.
    from agentq.errors import MissingExtraError
    from agentq.widgets import tree as tree_module

    def missing() -> None:
        raise MissingExtraError("'anywidget' is not installed")

    monkeypatch.setattr(tree_module, "_widget_class", missing)
    assert (await engine.run(agent_workflow(Tools()))).status == "waiting"
    dash = Dashboard(engine)
    await dash.refresh()
    await dash.detail.show("trip")
    tree = dash.detail.tree
    assert not tree.interactive and type(tree.widget).__name__ == "HTML"
    value = tree.widget.value
    assert 'data-agentq="tree-static"' in value and "cannot open its detail" in value
    assert 'data-node="c:approve"' in value and opened(value) == {"w", "s:0"}
    tree.toggle("c:plan", True)
    assert "c:plan" in opened(tree.widget.value)
    await dash.detail.show("trip", call="plan")  # the show list still opens the detail
    assert 'data-key="plan"' in dash.detail.html.value
    await dash.stop()
