"""notebooks/05_agent.ipynb runs in a kernel, and its cells can be run again (review 11, #9).

On autopilot (as nbmake runs it): the whole notebook, then its restart section (the waiting
ticket, the restart done by new objects on the same file) and its last cell once more: a cell
run twice finds the ticket answered and says so. As a person runs it: tests/widgets/
test_notebook_05.py.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "notebooks" / "05_agent.ipynb"


def test_the_restart_cells_can_be_run_twice(tmp_path: Path) -> None:
    book = nbformat.read(BOOK, as_version=4)
    ticket = next(i for i, c in enumerate(book.cells) if 'run_id="ticket-7"' in c.source)
    restart = next(i for i, c in enumerate(book.cells) if "store2 = await" in c.source)
    # Everything but the last cell, then the restart section again, then the last cell.
    again = [copy.deepcopy(book.cells[i]) for i in (ticket, restart)]
    book.cells = book.cells[:-1] + again + [book.cells[-1]]
    client = nbclient.NotebookClient(book, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    env = {**os.environ, "AGENTQ_NOTEBOOK_AUTOPILOT": "1",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    client.execute(env=env)  # raises CellExecutionError with the traceback when a cell fails
    second = book.cells[-2]
    text = "".join(o.get("text", "") for o in second.outputs if o.get("name") == "stdout")
    assert "ticket-7 was answered already" in text, text
