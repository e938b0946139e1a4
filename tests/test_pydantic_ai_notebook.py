"""notebooks/05_agent.ipynb runs in a kernel, and its cells can be run again (review 11, #9)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

BOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_agent.ipynb"


def test_the_restart_cells_can_be_run_twice(tmp_path: Path) -> None:
    book = nbformat.read(BOOK, as_version=4)
    restart = next(i for i, c in enumerate(book.cells) if "await store.close()" in c.source
                   and "SqliteStore.open" in c.source)
    # Run everything up to the approval after the restart, then those two cells again.
    book.cells = book.cells[: restart + 2] + copy.deepcopy(book.cells[restart : restart + 2])
    client = nbclient.NotebookClient(book, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError with the traceback when a cell fails
