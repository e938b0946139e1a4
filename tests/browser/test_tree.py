"""The run tree in a real JupyterLab page and in the static export opened offline (issue 14).

In the dashboard: pick a workflow, expand its model request in the tree, click a tool call to
open its detail, let a resume redraw the tree live (the expanded node stays open), and check
that the XSS probes render as text. Then the static export, opened with ``file://`` in an
offline browser context that records every request: expand a failed call and its traceback.

Saves ``tree-0-dashboard.png``, ``tree-1-expanded.png``, ``tree-2-detail.png``,
``tree-3-refreshed.png`` and ``tree-4-export.png`` in the test's ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, Page, Route, expect

from .conftest import OpenNotebook, new_context
from .test_detail_actions import ERRORS, open_dashboard, run

SETUP = '''\
import functools, tempfile
from pathlib import Path
from agentq import Job, Queue, SqliteStore, StepDef, Workflow, WorkflowEngine
from agentq.retry import Backoff, RetryPolicy
from agentq.widgets import Dashboard, export_html

store = await SqliteStore.open(Path(tempfile.mkdtemp()) / "agentq.db")
engine = WorkflowEngine(Queue(), store, worker_id="browser")
PROBE = "<img src=x onerror=alert(1)>"
fails = [1]

async def model():
    return {"text": "plan", "usage": {"input_tokens": 120, "output_tokens": 30}}

def tool(name, i):
    if name == "book" and fails:
        fails.pop()
        raise ConnectionError("booking service down")
    return {"tool": name, "i": i}

async def agent(ctx):
    await ctx.call(Job("plan", model), label={"kind": "model"}, usage=lambda out: out["usage"])
    for i, name in enumerate(["search", PROBE, "book"]):
        await ctx.call(Job(f"tool:{i}", functools.partial(tool, name, i)),
                       label={"kind": "tool", "tool": name, "args": {"q": PROBE}})
    return await ctx.wait_for_input("approve", "book it?", details={"tool": "book"})

def charge():
    raise ValueError(f"card declined {PROBE}")

async def pay(ctx):
    return await ctx.call(Job("charge", charge), label={"tool": "charge"})

retry = RetryPolicy(2, backoff=Backoff.fixed(0.0))
print((await engine.run(Workflow("trip", [StepDef("agent", agent, retry=retry)],
                                 input={"to": PROBE}))).status,
      (await engine.run(Workflow("broken", [StepDef("pay", pay)]))).status)
'''
DASHBOARD = "dash = Dashboard(engine).start()\ndash"
RESUME = 'await engine.resume("trip", "agent", {"approved": True}, key="approve")'
EXPORT = 'import time\nawait export_html(store, {path!r}, now=time.time(), title="browser")'
STOP = "await dash.stop()\nawait store.close()"


def cells(export: Path) -> list[str]:
    return [SETUP, DASHBOARD, RESUME, EXPORT.format(path=str(export)), STOP]


async def is_open(page: Page, selector: str) -> bool:
    value = await page.locator(selector).evaluate("(d) => d.open")
    return bool(value)


async def test_the_tree_expands_opens_details_stays_open_live_and_works_offline_exported(
    open_notebook: OpenNotebook, browser: Browser, tmp_path: Path
) -> None:
    exported = tmp_path / "export.html"
    page = await open_dashboard(open_notebook, tmp_path / "tree.ipynb", cells(exported),
                                1500, 1800)
    dashboard = page.locator(".agentq-dashboard")
    await expect(dashboard).to_be_visible()

    # Pick the agent's workflow: its tree shows the root and the waiting step open.
    detail = page.locator(".agentq-detail")
    await expect(detail.locator("select").nth(0).locator("option")).to_have_count(2)
    await detail.locator("select").nth(0).select_option(label="trip")
    tree = page.locator(".agentq-tree [data-agentq='tree'][data-workflow='trip']")
    await expect(tree).to_be_visible()
    step = tree.locator("details[data-node='s:0']")
    await expect(step).to_have_attribute("data-state", "waiting")
    assert await is_open(page, ".agentq-tree details[data-node='s:0']")
    model = tree.locator("details[data-node='c:plan']")
    await expect(model).to_have_attribute("data-kind", "model")
    assert not await is_open(page, ".agentq-tree details[data-node='c:plan']")
    await dashboard.screenshot(path=tmp_path / "tree-0-dashboard.png")

    # Expand the model request with its marker: its tool calls and the wait show.
    await model.locator(":scope > summary").click(position={"x": 5, "y": 9})
    call = tree.locator("[data-node='c:tool:2']")
    await expect(call).to_be_visible()
    await expect(call).to_contain_text("ran 2 times")
    await expect(tree.locator("[data-node='c:tool:1']")).to_contain_text(
        "<img src=x onerror=alert(1)>")  # the probe in a tool's name, as text
    await detail.screenshot(path=tmp_path / "tree-1-expanded.png")

    # A click on a call's label opens its detail.
    await call.locator("[data-select='c:tool:2']").click()
    shown = detail.locator("[data-agentq='detail'][data-kind='call']")
    await expect(shown).to_have_attribute("data-key", "tool:2")
    await expect(shown).to_contain_text("book")
    picked = await detail.locator("select").nth(1).evaluate(
        "(s) => s.selectedIndex >= 0 ? s.options[s.selectedIndex].text : ''")
    assert picked.replace("\xa0", " ").startswith("call tool:2"), picked  # the list follows
    await detail.screenshot(path=tmp_path / "tree-2-detail.png")

    # A resume: the refresher re-reads the workflow and redraws the tree; what was open stays.
    assert await run(page, 2) == "ok"
    await expect(step).to_have_attribute("data-state", "completed")
    await expect(tree.locator("[data-node='c:approve']")).to_have_attribute(
        "data-state", "answered")
    assert await is_open(page, ".agentq-tree details[data-node='c:plan']")
    assert await is_open(page, ".agentq-tree details[data-node='s:0']")
    assert await page.locator("img[src='x']").count() == 0  # no element made of a probe
    await detail.screenshot(path=tmp_path / "tree-3-refreshed.png")

    # The static export, opened from the disk in an offline context: nothing is fetched.
    assert await run(page, 3) == "ok", "\n".join(await page.locator(ERRORS).all_inner_texts())
    assert exported.is_file()
    context = await new_context(browser, 1300, 1400, offline=True)
    requests: list[str] = []

    async def record(route: Route) -> None:
        requests.append(route.request.url)
        if route.request.url.startswith("file://"):
            await route.continue_()
        else:
            await route.abort()

    try:
        offline = await context.new_page()
        await offline.route("**/*", record)
        await offline.goto(exported.as_uri())
        broken = offline.locator("[data-agentq='tree'][data-workflow='broken']")
        await expect(broken).to_be_visible()
        await broken.locator("details[data-node='s:0'] > summary").click()
        charge = broken.locator("details[data-node='c:charge']")
        await charge.locator(":scope > summary").click()
        await expect(charge.locator("[data-agentq='detail-error']")).to_contain_text(
            "card declined <img src=x onerror=alert(1)>")
        trace = charge.locator("[data-agentq='traceback']")
        await trace.locator("summary").click()
        await expect(trace.locator("pre")).to_contain_text("ValueError")
        assert await offline.locator("img").count() == 0
        await offline.screenshot(path=tmp_path / "tree-4-export.png", full_page=False)
    finally:
        await context.close()
    assert requests == [exported.as_uri()], requests

    assert await run(page, 4) == "ok"


_FAKE_MODEL = """
async ([src, value]) => {
  const handlers = {};
  window.sent = [];
  const model = {
    value,
    get() { return this.value; },
    send(message) { window.sent.push(message); },
    on(event, f) { handlers[event] = f; },
    off(event) { delete handlers[event]; },
  };
  window.redraw = (v) => { model.value = v; handlers["change:value"](); };
  const code = btoa(unescape(encodeURIComponent(src)));
  const mod = await import("data:text/javascript;base64," + code);
  mod.default.render({ model, el: document.getElementById("root") });
}
"""


async def test_the_page_follows_a_toggle_from_code_after_the_person_toggled(
    browser: Browser,
) -> None:
    # review F11: once the person had toggled a node, redraws from the kernel could not
    # change it in the page, and tree.open_nodes() and the page disagreed.
    from agentq.store import MemoryStore
    from agentq.widgets.models.detail import load_detail
    from agentq.widgets.tree import ESM, RunTree

    store = MemoryStore()
    await store.start_workflow("wf", ["a", "b"], None, 0.0)
    tree = RunTree()
    tree.show(await load_detail(store, "wf"))
    context = await new_context(browser, 1280, 720, offline=True)
    try:
        page = await context.new_page()
        await page.set_content('<div id="root"></div>')
        await page.evaluate(_FAKE_MODEL, [ESM, tree.widget.value])
        root = "details[data-node='w']"
        assert await is_open(page, root)
        await page.locator(f"{root} > summary").click(position={"x": 2, "y": 6})  # the marker
        assert not await is_open(page, root)
        sent = await page.evaluate("window.sent")
        assert sent == [{"event": "toggle", "node": "w", "open": False, "seq": 1}]
        await page.evaluate("(v) => window.redraw(v)", tree.widget.value)  # not heard yet
        assert not await is_open(page, root)  # the person's toggle survives the redraw
        tree._message(tree.widget, sent[0], [])  # the kernel hears it and redraws
        await page.evaluate("(v) => window.redraw(v)", tree.widget.value)
        assert not await is_open(page, root) and tree.open_nodes() == set()
        tree.toggle("w", True)  # from code: the page follows
        await page.evaluate("(v) => window.redraw(v)", tree.widget.value)
        assert await is_open(page, root) and tree.open_nodes() == {"w"}
    finally:
        await context.close()
