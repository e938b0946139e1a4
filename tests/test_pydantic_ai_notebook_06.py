"""notebooks/06_agent_features.ipynb: its sections run again, alone and out of order, and after a
restart on the kept store (issue 21, "checked as users would").

`pytest --nbmake notebooks` runs it once, top to bottom, on autopilot. Here: the whole notebook,
then sections 4, 2, 1, 5 and 3 once more in that order (each a cell a person runs again in
the same session: it answers from the log, no tool runs), then a second kernel on the same
folder without autopilot (a person's restart: the store is kept, the new session's runs are
new and run their tools).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "notebooks" / "06_agent_features.ipynb"
MARKS = {  # a line only the section's cell holds
    1: "async for event in durable.run_stream_events",
    2: "forecasts = ev[",
    3: 'child_id = f"{trip_id}/tool:1.0:guide"',
    4: "fork_id = f\"{trip_id}-storm\"",
    5: "async with durable.run_stream(",
}


def _run(book: Any, folder: Path, autopilot: bool) -> None:
    client = nbclient.NotebookClient(book, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    env = {**os.environ, "AGENTQ_NOTEBOOK_AUTOPILOT": "1" if autopilot else "0",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    client.execute(env=env)  # raises CellExecutionError with the traceback when a cell fails


def _stdout(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def test_sections_run_again_out_of_order_and_after_a_restart(tmp_path: Path) -> None:
    book = nbformat.read(BOOK, as_version=4)
    index = {n: next(i for i, c in enumerate(book.cells) if mark in c.source)
             for n, mark in MARKS.items()}
    again = [copy.deepcopy(book.cells[index[n]]) for n in (4, 2, 1, 5, 3)]
    book.cells = book.cells[:-1] + again + [book.cells[-1]]
    _run(book, tmp_path, autopilot=True)

    first = _stdout(book.cells[index[1]])
    ran = "['weather Paris', 'weather Lyon', 'weather Nice', 'ask_guide Nice']"
    assert f"tool runs this time: {ran}" in first, first
    fork_again, stream_again = _stdout(book.cells[-6]), _stdout(book.cells[-4])  # sections 4, 1
    assert "tool runs this time: []" in fork_again, fork_again  # the stored fork, read back
    assert "tool runs this time: []" in stream_again, stream_again  # the trip, from the log
    assert "recorded, answered from the log: Go to Nice" in stream_again, stream_again

    # A restart: a new kernel on the kept store, as a person runs it (no autopilot, no fresh start).
    person = nbformat.read(BOOK, as_version=4)
    _run(person, tmp_path, autopilot=False)
    setup = _stdout(next(c for c in person.cells if "SESSION =" in c.source))
    assert "(kept from earlier sessions)" in setup, setup
    streamed = _stdout(person.cells[index[1]])
    assert f"tool runs this time: {ran}" in streamed, streamed  # a new session's run: live
    assert "durable.partial at the third piece: {'model:2': 'Go to Nice: the '}" in streamed
