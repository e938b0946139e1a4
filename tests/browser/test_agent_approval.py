"""An agent's tool call approved by a person's click in a real JupyterLab page.

Opens ``notebooks/05_agent.ipynb``, runs the cells up to the approval panel (the durable
pydantic-ai agent stops at its ``refund`` tool call), edits the tool's arguments in the
panel's JSON editor, clicks *Approve* in the page, and checks that the same run continues:
the outcome says completed, and the rest of the notebook (which clicks only when nobody did)
finds the refund made once, with the edited amount.
"""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import expect

from .conftest import KERNEL_TIMEOUT, OpenNotebook

NOTEBOOK = "05_agent.ipynb"
CLICK_CELL = 9  # the cell that clicks Approve itself when nobody did
RUN = """([command, index, flag]) => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    window[flag] = 'running';
    window.jupyterapp.commands.execute(command).then(
        (ok) => { window[flag] = ok ? 'ok' : 'failed'; },
        (error) => { window[flag] = 'error: ' + error; });
}"""
ERRORS = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


async def test_a_click_approves_an_agent_tool_call_with_edited_arguments(
    open_notebook: OpenNotebook, tmp_path: Path
) -> None:
    page = await open_notebook(NOTEBOOK)
    await page.set_viewport_size({"width": 1400, "height": 2400})

    async def run(command: str, flag: str) -> None:
        await page.evaluate(RUN, [command, CLICK_CELL, flag])
        handle = await page.wait_for_function(
            f"() => window.{flag} !== 'running' && window.{flag}", timeout=KERNEL_TIMEOUT
        )
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
    ).last).to_have_attribute("data-outcome", "completed", timeout=20_000)
    await page.screenshot(path=tmp_path / "2-approved.png")

    # The rest of the notebook: the run completed once, with the edited amount.
    await page.evaluate("""(index) => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        const cell = nb.widgets[index].model.sharedModel;
        cell.setSource(cell.getSource().replace('"refund 42 100"', '"refund 42 90"'));
    }""", CLICK_CELL)
    await run("notebook:run-all-below", "__below")
    output = page.locator(".jp-Cell").nth(CLICK_CELL).locator(".jp-OutputArea")
    await expect(output).to_contain_text("Done: refunded 90 EUR on order 42")
