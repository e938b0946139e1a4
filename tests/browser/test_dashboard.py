"""The dashboard in a real JupyterLab page: a person's click approves a waiting step (BH-23).

Opens ``notebooks/02_workflows_and_approvals.ipynb``, runs every cell but the last (which stops
the dashboard), watches the lane view while the jobs run, clicks *Approve* on the workflow the
notebook leaves waiting, and checks that the step table and the timeline show it completed
without running another cell. Screenshots go to the test's ``tmp_path``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import Page, expect

from .conftest import OpenNotebook

NOTEBOOK = "02_workflows_and_approvals.ipynb"
RUN_UP_TO_LAST = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const notebook = panel.content;
    notebook.activeCellIndex = notebook.widgets.length - 1;
    window.__runAbove = 'running';
    window.jupyterapp.commands.execute('notebook:run-all-above').then(
        (ok) => { window.__runAbove = ok ? 'ok' : 'failed'; },
        (error) => { window.__runAbove = 'error: ' + error; });
}"""
RUN_LAST = """() => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = notebook.widgets.length - 1;
    window.__runLast = 'running';
    window.jupyterapp.commands.execute('notebook:run-cell').then(
        (ok) => { window.__runLast = ok ? 'ok' : 'failed'; },
        (error) => { window.__runLast = 'error: ' + error; });
}"""
ERRORS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


async def lane_samples(page: Page, done: str, shot: Path) -> list[tuple[int, int]]:
    """Sample the MEDIUM lane's (running, completed) every 50 ms until `done` is set; save a
    screenshot of the dashboard the first time both permits are in use."""
    lane = page.locator("[data-agentq='lane'][data-priority='medium']")
    samples: list[tuple[int, int]] = []
    shot_taken = False
    while await page.evaluate(f"() => window.{done}") == "running":
        if await lane.count():
            running = await lane.first.get_attribute("data-running")
            completed = await lane.first.get_attribute("data-completed")
            samples.append((int(running or 0), int(completed or 0)))
            if samples[-1][0] == 2 and not shot_taken:
                await page.locator(".agentq-dashboard").screenshot(path=shot)
                shot_taken = True
        await asyncio.sleep(0.05)
    return samples


async def outcome(page: Page, flag: str) -> str:
    handle = await page.wait_for_function(
        f"() => window.{flag} !== 'running' && window.{flag}")
    result = await handle.json_value()
    assert isinstance(result, str)
    return result


async def test_a_click_in_the_page_approves_and_the_dashboard_follows(
    open_notebook: OpenNotebook, tmp_path: Path
) -> None:
    page = await open_notebook(NOTEBOOK)
    await page.set_viewport_size({"width": 1400, "height": 2000})  # the whole dashboard
    await page.evaluate(RUN_UP_TO_LAST)
    samples = await lane_samples(page, "__runAbove", tmp_path / "0-running.png")
    result = await outcome(page, "__runAbove")
    errors = await page.locator(ERRORS).all_inner_texts()
    assert result == "ok", f"cells failed: {result}\n" + "\n".join(errors)[-4000:]

    # The lane view moved while the jobs ran: permits in use, then completed jobs.
    assert max(r for r, _ in samples) > 0, f"the lane never showed a running job: {samples}"
    assert samples[-1][1] > samples[0][1], f"completed never grew: {samples}"

    dashboard = page.locator(".agentq-dashboard")
    slot = page.locator(".agentq-approval").filter(
        has=page.locator("[data-agentq='approval'][data-workflow='order-3']")
    )
    await expect(slot).to_be_visible()
    await expect(slot).to_contain_text("Send this to Linus?")
    await expect(page.locator(
        "[data-agentq='step-row'][data-workflow='order-3'][data-status='waiting']"
    )).to_have_count(1)
    await slot.scroll_into_view_if_needed()
    await dashboard.screenshot(path=tmp_path / "1-waiting-for-approval.png")

    # A person types a note and clicks Approve, in the page.
    await slot.get_by_role("textbox").fill("ship it")
    approve = slot.get_by_role("button", name="Approve")
    await approve.click()
    await expect(approve).to_be_disabled()
    await expect(page.locator(
        "[data-agentq='approval-log'] [data-agentq='approval-outcome'][data-workflow='order-3']"
    )).to_have_attribute("data-outcome", "completed")

    # No other cell runs: the refresher updates the table and the timeline on its own.
    completed = page.locator(
        "[data-agentq='step-row'][data-workflow='order-3'][data-status='completed']"
    )
    await expect(completed).to_have_count(4)
    await expect(page.locator(
        "[data-agentq='timeline-workflow'][data-workflow='order-3']"
    )).to_have_attribute("data-state", "completed")
    await expect(page.locator(
        "[data-agentq='step-row'][data-status='waiting']"
    )).to_have_count(0)
    await page.locator("[data-agentq='timeline']").scroll_into_view_if_needed()
    await dashboard.screenshot(path=tmp_path / "2-approved.png")

    # The last cell stops the dashboard and re-raises nothing.
    await page.evaluate(RUN_LAST)
    result = await outcome(page, "__runLast")
    errors = await page.locator(ERRORS).all_inner_texts()
    assert result == "ok" and not errors, "\n".join(errors)[-4000:]
