"""The browser suite's own check: a widget renders in JupyterLab and a click reaches the kernel."""

import json
from pathlib import Path

from playwright.async_api import expect

from .conftest import OpenNotebook, RunAll, Screenshot

CELL = """\
import ipywidgets as widgets

state = widgets.HTML('<span data-smoke="state">not clicked</span>')
button = widgets.Button(description="Smoke click")
clicks = 0

def on_click(_):
    global clicks
    clicks += 1
    state.value = f'<span data-smoke="state">clicked {clicks}</span>'

button.on_click(on_click)
widgets.VBox([button, state])
"""


async def test_click_round_trips_to_the_kernel(
    open_notebook: OpenNotebook, run_all: RunAll, screenshot: Screenshot, tmp_path: Path
) -> None:
    source = tmp_path / "smoke.ipynb"
    cell: dict[str, object] = {"cell_type": "code", "id": "smoke", "metadata": {},
                               "execution_count": None, "outputs": [], "source": CELL}  # fmt: skip
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook = {"cells": [cell], "metadata": {"kernelspec": kernelspec},
                "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    source.write_text(json.dumps(notebook))

    page = await open_notebook("smoke.ipynb", source=source)
    await run_all(page)
    state = page.locator("[data-smoke='state']")
    await expect(state).to_have_text("not clicked")

    await page.get_by_role("button", name="Smoke click").click()
    await expect(state).to_have_text("clicked 1")
    await screenshot(page, "smoke-clicked")
