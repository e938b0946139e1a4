"""Notebook 05 (a durable pydantic-ai agent) as a person uses it, in a real JupyterLab page and
in Voila (issue 22 faults 1 and 2).

- Cell by cell: the cells up to the approval, then the person edits the tool's arguments in
  the panel's JSON editor and clicks *Approve*; the rest of the notebook finds the refund made
  once, with the person's amount (no assertion of another amount trips).
- Run All: the notebook never clicks for the person; every cell runs, the dashboard at the
  top stays live, a click in it approves. Then a real kernel restart (the kernel process
  restarts) and Run All again: the store is a file beside the notebook, so the waiting run
  is still there, and a click approves it.
- Voila: the page shows the dashboard (no "Error displaying widget"), a click approves.

Screenshots in the test's ``tmp_path``: ``1-waiting.png``, ``2-approved.png`` (cell by cell);
``run-all.png``, ``restarted.png`` (Run All); ``voila-05.png``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from .conftest import NOTEBOOKS, OpenNotebook, RunAll, _free_port, new_context
from .test_other_frontends import _serve

NOTEBOOK = "05_agent.ipynb"
CELLS = json.loads((NOTEBOOKS / NOTEBOOK).read_text())["cells"]
CLICK_CELL = next(i for i, c in enumerate(CELLS)
                  if c["cell_type"] == "code" and "approve.click()" in "".join(c["source"]))
"""The cell that checks the approval (and clicks only on autopilot)."""
RUN = """([command, index, flag]) => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    window[flag] = 'running';
    window.jupyterapp.commands.execute(command).then(
        (ok) => { window[flag] = ok ? 'ok' : 'failed'; },
        (error) => { window[flag] = 'error: ' + error; });
}"""
ERRORS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
BROKEN = "text=Error displaying widget"


def dashboard_slot(page: Page, workflow: str) -> Locator:
    """The dashboard's approval slot of `workflow`."""
    return page.locator(".agentq-dashboard .agentq-approval").filter(
        has=page.locator(f"[data-agentq='approval'][data-workflow='{workflow}']"))


async def approve_in_dashboard(page: Page, workflow: str) -> None:
    slot = dashboard_slot(page, workflow)
    await expect(slot).to_be_visible()
    await slot.scroll_into_view_if_needed()
    await slot.get_by_role("button", name="Approve").click()
    await expect(page.locator(
        ".agentq-dashboard [data-agentq='approval-outcome']"
        f"[data-workflow='{workflow}']").first).to_have_attribute("data-outcome", "completed")


async def test_a_click_approves_an_agent_tool_call_with_edited_arguments(
    open_notebook: OpenNotebook, tmp_path: Path
) -> None:
    page = await open_notebook(NOTEBOOK)
    await page.set_viewport_size({"width": 1400, "height": 2400})

    async def run(command: str, flag: str) -> None:
        await page.evaluate(RUN, [command, CLICK_CELL, flag])
        handle = await page.wait_for_function(
            f"() => window.{flag} !== 'running' && window.{flag}")
        outcome = await handle.json_value()
        errors = await page.locator(ERRORS).all_inner_texts()
        assert outcome == "ok", f"cells failed: {outcome}\n" + "\n".join(errors)[-4000:]

    await run("notebook:run-all-above", "__above")
    slot = page.locator(".agentq-approval").filter(
        has=page.locator("[data-agentq='approval'][data-workflow='ticket-42']")
    ).last
    await expect(slot).to_be_visible()
    await expect(slot).to_contain_text("refund")
    editor = slot.locator(".agentq-approval-args textarea")
    await expect(editor).to_have_value('{\n "order_id": 42,\n "amount": 120\n}')
    await slot.scroll_into_view_if_needed()
    await page.screenshot(path=tmp_path / "1-waiting.png")

    # A person edits the amount and clicks Approve, in the page.
    await editor.fill('{"order_id": 42, "amount": 90}')
    approve = slot.get_by_role("button", name="Approve")
    await approve.click()
    await expect(approve).to_be_disabled()
    await expect(page.locator(
        "[data-agentq='approval-outcome'][data-workflow='ticket-42']"
    ).last).to_have_attribute("data-outcome", "completed")
    await page.screenshot(path=tmp_path / "2-approved.png")

    # The rest of the notebook, unchanged: the run completed once, with the person's amount.
    await run("notebook:run-all-below", "__below")
    output = page.locator(".jp-Cell").nth(CLICK_CELL).locator(".jp-OutputArea")
    await expect(output).to_contain_text("completed - Done: refunded 90 EUR on order 42")
    await expect(output).to_contain_text("'refund 42 90'")


async def test_run_all_leaves_the_clicks_to_the_person_and_a_real_restart_keeps_the_wait(
    open_notebook: OpenNotebook, run_all: RunAll, tmp_path: Path
) -> None:
    page = await open_notebook(NOTEBOOK)
    await page.set_viewport_size({"width": 1400, "height": 1800})
    await run_all(page)  # raises with the error outputs if a cell failed
    output = page.locator(".jp-Cell").nth(CLICK_CELL).locator(".jp-OutputArea")
    await expect(output).to_contain_text("ticket-42 waits for your click")
    await expect(dashboard_slot(page, "ticket-7")).to_be_visible()  # the dashboard is live
    assert await page.locator(BROKEN).count() == 0
    await approve_in_dashboard(page, "ticket-42")
    await page.locator(".agentq-dashboard").screenshot(path=tmp_path / "run-all.png")

    # A real restart: the kernel process restarts; every name of the notebook is gone.
    await page.evaluate("""() => window.jupyterapp.shell.currentWidget
        .sessionContext.session.kernel.restart()""")
    await page.wait_for_function("""() => window.jupyterapp.shell.currentWidget
        .sessionContext.session?.kernel?.status === 'idle'""")
    await run_all(page)
    store_cell = next(i for i, c in enumerate(CELLS)
                      if c["cell_type"] == "code" and "05_agent.db" in "".join(c["source"]))
    await expect(page.locator(".jp-Cell").nth(store_cell)).to_contain_text(
        "kept from earlier runs")
    await expect(output).to_contain_text("completed - Done: refunded 120 EUR on order 42")
    await approve_in_dashboard(page, "ticket-7")  # the wait filed before the restart
    await expect(page.locator(
        ".agentq-dashboard [data-agentq='step-row'][data-workflow='ticket-7']"
        "[data-status='completed']")).to_have_count(1)
    assert await page.locator(BROKEN).count() == 0
    await page.locator(".agentq-dashboard").screenshot(path=tmp_path / "restarted.png")


@pytest.mark.skipif(importlib.util.find_spec("voila") is None, reason="voila missing")
async def test_voila_shows_notebook_05_live_and_a_click_approves(
    browser: Browser, tmp_path: Path
) -> None:
    root = tmp_path / "voila"
    root.mkdir()
    shutil.copyfile(NOTEBOOKS / NOTEBOOK, root / NOTEBOOK)
    port = _free_port()
    command = [
        sys.executable, "-m", "voila", str(root / NOTEBOOK), "--no-browser",
        f"--port={port}", "--Voila.ip=127.0.0.1", "--Voila.port_retries=0",
    ]  # fmt: skip
    server = _serve(tmp_path / "voila-home", command, f"tcp://127.0.0.1:{port}")
    next(server)
    context = await new_context(browser, 1400, 1800)
    try:
        page = await context.new_page()
        await page.goto(f"http://127.0.0.1:{port}")
        await expect(dashboard_slot(page, "ticket-7")).to_be_visible()
        await approve_in_dashboard(page, "ticket-42")
        assert await page.locator(BROKEN).count() == 0
        await page.locator(".agentq-dashboard").screenshot(path=tmp_path / "voila-05.png")
    finally:
        await context.close()
        server.close()
