"""Notebook 05 as a person runs it (issue 22 faults 1 and 2), on a real kernel (nbclient).

Without ``AGENTQ_NOTEBOOK_AUTOPILOT`` (what ``notebooks/conftest.py`` sets for nbmake) the
notebook never clicks for the person: Run All ends with the runs waiting and the dashboard and
the panel live (nothing closed that the text calls "above"); a person's own amount is refunded
without an assertion tripping; and after a real restart (a new kernel process) the waiting runs
are still there, because the store is a file beside the notebook.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "05_agent.ipynb"


class Kernel:
    """One kernel running the notebook's cells (and extra code) in a folder."""

    def __init__(self, client: NotebookClient, nb: NotebookNode) -> None:
        self.client, self.nb = client, nb

    async def cell(self, index: int) -> str:
        """Run the notebook's cell `index`; return its stdout (raises on an error)."""
        cell = self.nb.cells[index]
        await self.client.async_execute_cell(cell, index)
        return "".join(o.get("text", "") for o in cell.get("outputs", [])
                       if o.get("name") == "stdout")

    async def run(self, code: str) -> str:
        """Run `code` as an extra cell; return its stdout."""
        self.nb.cells.append(nbformat.v4.new_code_cell(code))
        return await self.cell(len(self.nb.cells) - 1)

    def index(self, text: str) -> int:
        """The index of the first code cell whose source holds `text`."""
        return next(i for i, c in enumerate(self.nb.cells)
                    if c.cell_type == "code" and text in c.source)


@asynccontextmanager
async def kernel(folder: Path) -> AsyncIterator[Kernel]:
    nb = nbformat.read(folder / NOTEBOOK.name, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=120,
                            resources={"metadata": {"path": str(folder)}})
    env = {k: v for k, v in os.environ.items() if k != "AGENTQ_NOTEBOOK_AUTOPILOT"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    async with client.async_setup_kernel(env=env):
        yield Kernel(client, nb)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copyfile(NOTEBOOK, tmp_path / NOTEBOOK.name)
    return tmp_path


async def run_all(k: Kernel) -> dict[int, str]:
    code = [i for i, c in enumerate(k.nb.cells) if c.cell_type == "code"]
    return {i: await k.cell(i) for i in code}


PENDING = "print(sorted(p.run_id for p in await durable.pending_approvals()))"
LIVE = "print([(v.running, v.widget.comm is not None) for v in (dash, panel)])"


async def test_run_all_by_a_person_waits_for_the_click_and_keeps_the_views_live(
    folder: Path,
) -> None:
    async with kernel(folder) as k:
        out = await run_all(k)
        assert "ticket-42 waits for your click" in out[k.index("approve.click()")]
        assert await k.run(LIVE) == "[(True, True), (True, True)]\n"  # "the dashboard above"
        assert await k.run(PENDING) == "['ticket-42', 'ticket-7']\n"
        await k.run("await dash.stop()\nawait panel.stop()\nawait queue.close()\n"
                    "await store.close()")
    # A real restart: a new kernel process runs the notebook again from the top.
    assert (folder / "05_agent.db").exists()
    async with kernel(folder) as k:
        out = await run_all(k)
        assert "kept from earlier runs" in out[k.index("05_agent.db")]
        assert "ticket-42 waits for your click" in out[k.index("approve.click()")]
        assert await k.run(PENDING) == "['ticket-42', 'ticket-7']\n"
        done = await k.run('r = await durable.approve("ticket-7")\nprint(r.status, r.output)\n'
                           "print(model_requests)")
        assert done == "completed Done: refunded 120 EUR on order 42\n[2]\n", done
        await k.run("await dash.stop()\nawait panel.stop()")


async def test_a_person_who_approves_another_amount_gets_no_assertion_error(
    folder: Path,
) -> None:
    async with kernel(folder) as k:
        click = k.index("approve.click()")
        for i in range(click):
            if k.nb.cells[i].cell_type == "code":
                await k.cell(i)
        await k.run(  # the person edits the amount in the panel and clicks Approve
            'panel.slots[0].args.value = \'{"order_id": 42, "amount": 55}\'\n'
            "panel.slots[0].approve.click()")
        out = await k.cell(click)
        assert "completed - Done: refunded 55 EUR on order 42" in out, out
        rest = [i for i in range(click + 1, len(k.nb.cells)) if k.nb.cells[i].cell_type == "code"]
        for i in rest:
            await k.cell(i)
        assert await k.run(LIVE) == "[(True, True), (True, True)]\n"
        await k.run("await dash.stop()\nawait panel.stop()")
