"""The Dashboard fits a notebook 1000 to 1600 px wide: nothing is wider than the dashboard
(cut off), no button label is clipped, and the run tree's labels stay on one line.

Screenshots: ``out/screenshots/dashboard-layout/dashboard-<width>.png`` (ignored by git).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from playwright.async_api import expect

from .conftest import OpenNotebook, RunAll
from .test_runview import SETUP

SHOTS = Path(__file__).resolve().parents[2] / "out" / "screenshots" / "dashboard-layout"

DASHBOARD = '''
from agentq.widgets import Dashboard

dash = Dashboard(engine, agent=durable).start()
dash
'''

MEASURE = """(root) => {
    const box = root.getBoundingClientRect();
    const out = [];
    for (const el of root.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (r.width && el.offsetParent && r.right > box.right + 1
                && !el.closest('[style*="overflow"], .widget-html-content pre'))
            out.push('wide: ' + el.outerHTML.slice(0, 100));
    }
    for (const b of root.querySelectorAll('button')) {
        if (b.offsetParent && b.scrollWidth > b.clientWidth + 1)
            out.push('clipped: ' + b.textContent);
    }
    for (const l of root.querySelectorAll('[data-agentq=tree-label]')) {
        if (l.offsetParent && l.getClientRects().length > 1)
            out.push('wrapped: ' + l.textContent);
    }
    return out;
}"""


async def test_the_dashboard_fits_1000_to_1600_px(
    open_notebook: OpenNotebook, run_all: RunAll, tmp_path: Path
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(DASHBOARD)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = tmp_path / "layout.ipynb"
    nbformat.write(nb, path)
    page = await open_notebook("layout.ipynb", source=path)
    await page.set_viewport_size({"width": 1600, "height": 2400})
    await run_all(page)
    dash = page.locator(".agentq-dashboard")
    await dash.locator(".agentq-detail select").nth(0).select_option(label="ticket-42")
    await expect(dash.locator("[data-agentq=tree-label]").first).to_be_visible()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1600, 1400, 1000):
        await page.set_viewport_size({"width": width, "height": 2400})
        await dash.scroll_into_view_if_needed()
        found = await dash.evaluate(MEASURE)
        await dash.screenshot(path=SHOTS / f"dashboard-{width}.png")
        assert found == [], f"at {width} px: {found[:6]}"
