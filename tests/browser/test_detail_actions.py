"""The second round of the dashboard in a real JupyterLab page (issue 14): search, a detail with
its folded traceback, Retry and Cancel after a confirmation, an XSS probe shown as text,
re-running the dashboard's cell leaving one refresher, and `sync.run` refusing up front.

Builds its own notebook (in the test's ``tmp_path``) and saves screenshots beside it:
``0-dashboard.png``, ``1-search.png``, ``2-detail.png``, ``3-retried.png``,
``4-cancelled.png``, ``5-sync-refused.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

from playwright.async_api import Page, expect

from .conftest import OpenNotebook

SETUP = '''\
import asyncio, tempfile
from pathlib import Path
from agentq import Queue, SqliteStore, StepDef, WaitForInput, Workflow, WorkflowEngine
from agentq.retry import RetryPolicy
from agentq.widgets import Dashboard

store = await SqliteStore.open(Path(tempfile.mkdtemp()) / "agentq.db")
engine = WorkflowEngine(Queue(), store, worker_id="browser")
PROBE = "<img src=x onerror=alert(1)>"
fails = [1]  # the first run of the flaky step fails, its retry succeeds

async def fetch(ctx):
    return {"arg": ctx.input["arg"], "long": "x" * 800}

async def flaky(ctx):
    if fails:
        fails.pop()
        raise RuntimeError(f"boom {PROBE}")
    return "ok"

async def ask(ctx):
    if not ctx.resumed:
        raise WaitForInput("ship it?")
    return ctx.resume_input

defs = {f"order-{i:02d}": Workflow(f"order-{i:02d}", [StepDef("fetch", fetch)], input={"arg": i})
        for i in range(30)}
defs["fail-1"] = Workflow("fail-1", [StepDef("fetch", fetch), StepDef(PROBE, flaky,
                          retry=RetryPolicy(1))], input={"arg": PROBE})
defs["wait-1"] = Workflow("wait-1", [StepDef("ask", ask)], input={"arg": 0})
for wf in defs.values():
    await engine.run(wf)
'''
DASHBOARD = "dash = Dashboard(engine, workflow_for=defs.get).start()\ndash"
TASKS = (
    "print(sorted(t.get_name() for t in asyncio.all_tasks() "
    "if t.get_name().startswith('agentq')))"
)
SYNC = "from agentq import sync\nsync.run(asyncio.sleep(0))"
STOP = "await dash.stop()\nawait store.close()"
CELLS = [SETUP, DASHBOARD, TASKS, SYNC, STOP]

RUN = """([index, command]) => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    window.__run = 'running';
    window.jupyterapp.commands.execute(command).then(
        (ok) => { window.__run = ok ? 'ok' : 'failed'; },
        (error) => { window.__run = 'error: ' + error; });
}"""
ERRORS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


def write_notebook(path: Path, sources: list[str] = CELLS) -> None:
    cells = [
        {"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None,
         "outputs": [], "source": source}
        for i, source in enumerate(sources)
    ]
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": kernelspec},
                                "nbformat": 4, "nbformat_minor": 5}))


async def run(page: Page, index: int, command: str = "notebook:run-cell") -> str:
    await page.evaluate(RUN, [index, command])
    handle = await page.wait_for_function(
        "() => window.__run !== 'running' && window.__run")
    result = await handle.json_value()
    assert isinstance(result, str)
    return result


async def open_dashboard(
    open_notebook: OpenNotebook, source: Path, cells: list[str], width: int, height: int
) -> Page:
    """Write `cells` as the notebook `source`, open it, run its first cell (the setup) and
    then its second (the dashboard); return the page."""
    write_notebook(source, cells)
    page = await open_notebook(source.name, source=source)
    await page.set_viewport_size({"width": width, "height": height})
    assert await run(page, 1, "notebook:run-all-above") == "ok", "\n".join(
        await page.locator(ERRORS).all_inner_texts())
    assert await run(page, 1) == "ok"
    return page


async def test_search_detail_retry_cancel_and_a_blocking_helper_refused(
    open_notebook: OpenNotebook, tmp_path: Path
) -> None:
    source = tmp_path / "detail_actions.ipynb"
    write_notebook(source)
    page = await open_notebook("detail_actions.ipynb", source=source)
    await page.set_viewport_size({"width": 1400, "height": 2200})
    assert await run(page, 2, "notebook:run-all-above") == "ok", "\n".join(
        await page.locator(ERRORS).all_inner_texts())
    dashboard = page.locator(".agentq-dashboard")
    await expect(dashboard).to_be_visible()
    await expect(page.locator("[data-agentq='page']")).to_have_attribute("data-matches", "32")
    await dashboard.screenshot(path=tmp_path / "0-dashboard.png")

    # Search: part of a workflow id narrows the table to that workflow.
    steps = page.locator(".agentq-steps")
    await steps.get_by_placeholder("workflow id contains").fill("fail")
    await steps.get_by_placeholder("workflow id contains").press("Enter")
    await expect(page.locator("[data-agentq='page']")).to_have_attribute("data-matches", "1")
    await expect(page.locator("[data-agentq='step-row']")).to_have_count(2)
    await expect(page.locator("[data-agentq='step-row'][data-workflow='fail-1']")).to_have_count(2)
    await steps.screenshot(path=tmp_path / "1-search.png")

    # Detail: pick the workflow, then its failed step; the traceback unfolds on a click.
    detail = page.locator(".agentq-detail")
    lists = detail.locator("select")
    await lists.nth(0).select_option(label="fail-1")
    await expect(page.locator(
        "[data-agentq='detail'][data-kind='workflow'][data-workflow='fail-1']")).to_be_visible()
    await lists.nth(1).select_option(label="step 1 · <img src=x onerror=alert(1)> (failed)")
    step = page.locator("[data-agentq='detail'][data-kind='step']")
    await expect(step).to_have_attribute("data-index", "1")
    await expect(step.locator("[data-agentq='attempt'][data-outcome='failed']")).to_have_count(1)
    traceback = step.locator("[data-agentq='traceback']").first  # the step's error section
    await traceback.locator("summary").click()
    await expect(traceback.locator("pre")).to_contain_text("RuntimeError")
    await expect(step).to_contain_text("<img src=x onerror=alert(1)>")  # shown as text
    assert await page.locator("img[src='x']").count() == 0  # no element was made of it
    await detail.screenshot(path=tmp_path / "2-detail.png")

    # Retry, after a confirmation; the workflow completes and the bar follows.
    actions = page.locator(".agentq-actions")
    await actions.get_by_role("button", name="Retry…").click()
    await expect(page.locator("[data-agentq='confirm'][data-action='retry']")).to_be_visible()
    await actions.get_by_role("button", name="Yes, retry it").click()
    await expect(page.locator(
        "[data-agentq='action-outcome'][data-action='retry'][data-workflow='fail-1']"
    )).to_have_attribute("data-outcome", "completed")
    await expect(page.locator(
        "[data-agentq='step-row'][data-workflow='fail-1'][data-status='completed']"
    )).to_have_count(2)
    await expect(actions.get_by_role("button", name="Retry…")).to_be_disabled()
    await dashboard.screenshot(path=tmp_path / "3-retried.png")

    # Cancel the waiting workflow, after a confirmation.
    await steps.get_by_placeholder("workflow id contains").fill("wait")
    await steps.get_by_placeholder("workflow id contains").press("Enter")
    await expect(page.locator("[data-agentq='page']")).to_have_attribute("data-matches", "1")
    await lists.nth(0).select_option(label="wait-1")
    await expect(page.locator(
        "[data-agentq='detail'][data-kind='workflow'][data-workflow='wait-1']")).to_be_visible()
    cancel = actions.get_by_role("button", name="Cancel workflow…")
    await expect(cancel).to_be_enabled()
    await cancel.click()
    await actions.get_by_role("button", name="Yes, cancel it").click()
    await expect(page.locator(
        "[data-agentq='action-outcome'][data-action='cancel'][data-workflow='wait-1']"
    )).to_have_attribute("data-outcome", "cancelled")
    await expect(page.locator(
        "[data-agentq='timeline-workflow'][data-workflow='wait-1']"
    )).to_have_attribute("data-state", "cancelled")
    await expect(actions.get_by_role("button", name="Retry…")).to_be_enabled()
    await dashboard.screenshot(path=tmp_path / "4-cancelled.png")

    # Re-running the dashboard's cell twice leaves one refresher.
    assert await run(page, 1) == "ok"
    assert await run(page, 1) == "ok"
    assert await run(page, 2) == "ok"
    tasks = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea-output")
    await expect(tasks).to_have_text("['agentq.clicks:Dashboard']")

    # A blocking helper in a cell while the dashboard waits for clicks: refused at once.
    assert await run(page, 3) == "failed"
    refused = page.locator(".jp-Cell").nth(3).locator(ERRORS)
    await expect(refused).to_contain_text("DeadlockError")
    await expect(refused).to_contain_text("would block this cell while Dashboard waits for clicks")
    await refused.scroll_into_view_if_needed()
    await page.locator(".jp-Cell").nth(3).screenshot(path=tmp_path / "5-sync-refused.png")

    # The last cell stops the dashboard and re-raises nothing.
    assert await run(page, 4) == "ok"
    assert not await page.locator(".jp-Cell").nth(4).locator(ERRORS).count()
