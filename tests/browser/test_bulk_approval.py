"""Approve all that match a filter, in a real JupyterLab page (issue 14).

Builds its own notebook: five workflows wait for an approval of a tool call (three ``refund``,
one ``email``, one ``refund`` whose argument is an XSS probe), under a `Dashboard`. In the
page: types "refund" in the approval panel's *step or tool contains* box and sees 4 waits
listed; narrows with *arguments contain* "onerror" and sees the probe as text (no ``<img>``);
clears it, clicks **Approve all matching…**, sees the question state the count, clicks
**Yes, approve 4**, sees the summary "4 approved" and the step table show those workflows
completed while the email one still waits, with no other cell run. Screenshots beside the
notebook in the test's ``tmp_path``: ``bulk-1-filtered.png``, ``bulk-2-confirm.png``,
``bulk-3-approved.png``.
"""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import expect

from .conftest import OpenNotebook
from .test_detail_actions import ERRORS, open_dashboard, run

SETUP = '''\
import tempfile
from pathlib import Path
from agentq import Queue, SqliteStore, StepDef, Workflow, WorkflowEngine
from agentq.widgets import Dashboard

store = await SqliteStore.open(Path(tempfile.mkdtemp()) / "agentq.db")
engine = WorkflowEngine(Queue(), store, worker_id="browser")
PROBE = "<img src=x onerror=alert(1)>"

def tool_call(workflow_id, tool, args):
    async def ask(ctx):
        answer = await ctx.wait_for_input(f"approval:{tool}", f"run {tool}?",
                                          details={"tool": tool, "args": args})
        return answer["approved"]

    async def done(ctx):
        return f"{tool} {'ran' if ctx.previous else 'skipped'}"

    return Workflow(workflow_id, [StepDef("ask", ask), StepDef("done", done)])

specs = [("refund-1", "refund", {"amount": 10}), ("refund-2", "refund", {"amount": 20}),
         ("refund-3", "refund", {"amount": 30}), ("mail-1", "email", {"to": "bob"}),
         ("probe-1", "refund", {"note": PROBE})]
for workflow_id, tool, args in specs:
    await engine.run(tool_call(workflow_id, tool, args))
'''
DASHBOARD = "dash = Dashboard(engine).start()\ndash"
STOP = "await dash.stop()\nawait store.close()"
CELLS = [SETUP, DASHBOARD, STOP]


async def test_approve_all_matching_in_the_page(
    open_notebook: OpenNotebook, tmp_path: Path
) -> None:
    page = await open_dashboard(open_notebook, tmp_path / "bulk_approval.ipynb", CELLS,
                                1400, 2200)
    bar = page.locator(".agentq-bulk")
    await expect(bar).to_be_visible()

    # Filter by tool: the four refunds are listed and counted.
    await bar.get_by_placeholder("step or tool contains").fill("refund")
    await bar.get_by_placeholder("step or tool contains").press("Enter")
    matches = bar.locator("[data-agentq='bulk-matches']")
    await expect(matches).to_have_attribute("data-count", "4")
    await expect(bar.locator("[data-agentq='bulk-match']")).to_have_count(4)

    # The probe in a tool argument shows as text, and no element is made of it.
    await bar.get_by_placeholder("arguments contain").fill("onerror")
    await bar.get_by_placeholder("arguments contain").press("Enter")
    await expect(matches).to_have_attribute("data-count", "1")
    await expect(matches).to_contain_text("<img src=x onerror=alert(1)>")
    assert await page.locator(".agentq-bulk img").count() == 0
    await bar.get_by_placeholder("arguments contain").fill("")
    await bar.get_by_placeholder("arguments contain").press("Enter")
    await expect(matches).to_have_attribute("data-count", "4")
    await bar.scroll_into_view_if_needed()
    await page.screenshot(path=tmp_path / "bulk-1-filtered.png")

    # Approve all matching, after a question that states the count.
    await bar.get_by_placeholder("note / denial message").fill("batch ok")
    await bar.get_by_role("button", name="Approve all matching…").click()
    question = bar.locator("[data-agentq='bulk-confirm']")
    await expect(question).to_have_attribute("data-count", "4")
    await expect(question).to_contain_text("Approve the 4 waits listed?")
    await page.screenshot(path=tmp_path / "bulk-2-confirm.png")
    await bar.get_by_role("button", name="Yes, approve 4").click()
    summary = bar.locator("[data-agentq='bulk-summary']")
    await expect(summary).to_have_attribute("data-answered", "4")
    await expect(summary).to_contain_text("4 approved")

    # The workflows went on (no other cell ran): the table shows them completed.
    for workflow_id in ("refund-1", "refund-2", "refund-3", "probe-1"):
        row = page.locator(f"[data-agentq='step-row'][data-workflow='{workflow_id}']"
                           "[data-step='done']")
        await expect(row).to_have_attribute("data-status", "completed")
    waiting = page.locator("[data-agentq='step-row'][data-workflow='mail-1'][data-step='ask']")
    await expect(waiting).to_have_attribute("data-status", "waiting")
    await expect(matches).to_have_attribute("data-count", "0")
    await page.screenshot(path=tmp_path / "bulk-3-approved.png")
    assert await run(page, 2) == "ok", "\n".join(await page.locator(ERRORS).all_inner_texts())
    assert await page.locator(ERRORS).count() == 0
