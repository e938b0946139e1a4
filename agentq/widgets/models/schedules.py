"""`ScheduleList`: the store's schedules as the dashboard shows them, read now and then.

Schedules are rows apart from the event log (``engine.schedule``), so the log's sequence
number does not say when they change. `ScheduleList.poll` reads `DurableStore.schedules` when
the log moved (a fired tick starts a workflow) or when `every` seconds (10 by default) have
passed on the widget's clock since its last read, and says whether the rows changed: the idle
ticks of a dashboard (several a second) read nothing else. No ipywidgets, no HTML.
"""

from __future__ import annotations

from typing import Any

from agentq.store import ScheduleRow

__all__ = ["ScheduleList"]


class ScheduleList:
    """The stored schedules, by name, refreshed by `poll`.

    Args:
        store: The `DurableStore` read.
        every: Seconds (on the clock given to `poll`) after which the schedules are read
            again even when the event log did not move (a schedule made, replaced or deleted
            writes no event).
    """

    def __init__(self, store: Any, every: float = 10.0) -> None:
        self._store = store
        self._every = every
        self._read_at: float | None = None
        self.rows: tuple[ScheduleRow, ...] = ()
        """The schedules as last read, by name."""

    async def poll(self, now: float, moved: bool) -> bool:
        """Read the schedules if the log `moved` or they are due; True if they changed.

        Args:
            now: The widget clock's time (Unix seconds).
            moved: Whether the event log moved since the last refresh.

        Raises:
            StoreError: The store failed.
        """
        if not moved and self._read_at is not None and now - self._read_at < self._every:
            return False
        self._read_at = now
        rows = tuple(await self._store.schedules())
        if rows == self.rows:
            return False
        self.rows = rows
        return True
