"""`CellOwner`: a widget's refresher belongs to the notebook cell that started it.

A notebook cell runs again and again. Each run of ``dash = Dashboard(engine).start()`` (or of a
setup cell that builds a new queue and a `LaneMonitor` for it) used to leave the previous
widget's refresher running on the kernel's loop, unseen: its output had been cleared from the
page, its task lived on. The rule now: **running a cell again stops the refreshers that the
cell's previous run started.**

How: `Live.start` asks IPython for the id of the cell being run (the ``cellId`` that JupyterLab,
Notebook 7 and VS Code send with each execution) and registers a ``pre_run_cell`` callback on the
kernel's shell. When the same cell id runs again, the callback cancels the old refresher (its
view shows "replaced") and unregisters itself. The state lives in that one callback, owned by
the widget and registered on the shell, never in a module global; ``stop()`` unregisters it.

A cell that ends with the widget (``dash``) also leaves it in IPython's output history
(``Out[N]``, ``_N``, ``_``), which would keep the closed widget, its engine and its store alive
for the kernel's lifetime. `forget_outputs` drops those entries; the widget calls it when it is
closed (replaced by its cell's re-run, or stopped), so the old store is freed.

Where no cell id is known (a plain Python process, nbclient / ``pytest --nbmake``, the terminal
IPython) nothing is registered and a replaced widget must be stopped with ``await old.stop()``.
IPython is never imported here: it is looked up only if the process already loaded it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

__all__ = ["CellOwner", "current_cell_id", "forget_outputs"]


def _shell() -> Any:
    """Return the running IPython shell, or None (without importing IPython)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    get = getattr(ipython, "get_ipython", None)
    return get() if callable(get) else None


def current_cell_id(shell: Any) -> str | None:
    """Return the id of the cell the kernel is running (its execute request's ``cellId``)."""
    header = getattr(shell, "parent_header", None)
    if not isinstance(header, dict):
        return None
    meta = header.get("metadata")
    cell = meta.get("cellId") if isinstance(meta, dict) else None
    return cell if isinstance(cell, str) and cell else None


_LAST = ("_", "__", "___")  # IPython's last three results ('' when empty)


def forget_outputs(*objects: object) -> int:
    """Drop `objects` from the running IPython shell's output history; return how many entries.

    IPython's display hook keeps each cell's result in ``Out`` (the history manager's
    ``output_hist``, also ``_oh``), as ``_N``, and in ``_``, ``__``, ``___`` (of the user's
    namespace, of its hidden part and of the display hook). Entries that are one of
    `objects` (by identity) are removed (``_``, ``__``, ``___`` are set to ``''``, IPython's
    own empty value); the user's own names are never touched. Outside IPython (or with a
    shell that keeps no history) nothing happens and 0 is returned. Call on the kernel's
    thread.
    """
    shell = _shell()
    ns = getattr(shell, "user_ns", None)
    if not isinstance(ns, dict):
        return 0
    ids = {id(obj) for obj in objects if obj is not None}
    histories = [ns.get("Out"), ns.get("_oh"),
                 getattr(getattr(shell, "history_manager", None), "output_hist", None)]
    dropped = 0
    seen: set[int] = set()
    for hist in histories:
        if not isinstance(hist, dict) or id(hist) in seen:
            continue
        seen.add(id(hist))
        for n in [n for n, value in hist.items() if id(value) in ids]:
            del hist[n]
            dropped += 1
    hook = getattr(shell, "displayhook", None)
    for name in _LAST:  # the display hook keeps its own copies: all change, or IPython
        if id(getattr(hook, name, None)) in ids:  # stops updating `_` (they would differ)
            setattr(hook, name, "")
    hidden = getattr(shell, "user_ns_hidden", None)  # what IPython itself put there
    for space in (ns, hidden) if isinstance(hidden, dict) else (ns,):
        for name in [n for n, value in space.items() if id(value) in ids]:
            if name in _LAST:
                space[name] = ""
            elif name[:1] == "_" and name[1:].isdigit():
                del space[name]
            else:
                continue
            dropped += space is ns
    return dropped


class CellOwner:
    """Calls `on_rerun` once when the cell that called `attach` runs again.

    Args:
        on_rerun: What to do then (the widget cancels its refresher); called on the kernel's
            thread, before the new run of the cell starts; must not raise.
    """

    def __init__(self, on_rerun: Callable[[], None]) -> None:
        self._on_rerun = on_rerun
        self._shell: Any = None
        self.cell_id: str | None = None
        """The cell that started the widget, while attached; else None."""

    def attach(self) -> bool:
        """Register for the cell being run now; return False when no cell id is known."""
        self.detach()
        shell = _shell()
        cell = current_cell_id(shell) if shell is not None else None
        events = getattr(shell, "events", None)
        if cell is None or events is None:
            return False
        events.register("pre_run_cell", self._pre_run_cell)
        self._shell, self.cell_id = shell, cell
        return True

    def detach(self) -> None:
        """Unregister (idempotent)."""
        shell, self._shell, self.cell_id = self._shell, None, None
        if shell is not None:
            with suppress(ValueError):  # already gone
                shell.events.unregister("pre_run_cell", self._pre_run_cell)

    def _pre_run_cell(self, info: Any) -> None:
        if self.cell_id is not None and getattr(info, "cell_id", None) == self.cell_id:
            self.detach()
            self._on_rerun()
