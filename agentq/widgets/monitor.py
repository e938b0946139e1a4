"""Live views of the queue and the store: `LaneMonitor`, `StepTable`, `EventTimeline`.

Each is a `Live` widget: build it, display it, ``start()`` its refresher (``start`` returns
the widget, so ``StepTable(store).start()`` as a cell's last line shows it live) and end the
notebook with ``await widget.stop()``. `Dashboard` combines them under one refresher.
"""

from __future__ import annotations

from typing import Any

from agentq.clock import Clock
from agentq.store import DurableStore
from agentq.widgets._live import DEFAULT_INTERVAL, Live, set_value, widgets
from agentq.widgets._source import Source
from agentq.widgets._timeline import Timeline
from agentq.widgets.html.tables import lanes_html, steps_html
from agentq.widgets.html.timeline import timeline_html

__all__ = ["EventTimeline", "LaneMonitor", "StepTable"]

STATUS_OPTIONS = (
    ("all", ""),
    ("pending", "pending"),
    ("running", "leased"),
    ("waiting", "waiting"),
    ("completed", "completed"),
    ("failed", "failed"),
)
"""Choices of the step table's status filter: (label, `StepState` value or '' for all)."""


class LaneMonitor(Live):
    """Per lane: running/permits and queued/capacity bars, completed, failed, cache hits.

    Reads `Queue.stats()` (a frozen snapshot, no I/O) each tick and redraws only when it
    changed.

    Args:
        queue: The `Queue` to watch.
        interval: Seconds between refreshes; default 0.25.
        clock: Time source of the interval; default the queue's clock, else the system clock.

    Raises:
        MissingExtraError: ipywidgets is not installed (``pip install 'agentq[notebook]'``).

    Example:
        >>> LaneMonitor(queue).start()   # last line of a cell: shows the live bars
    """

    def __init__(
        self, queue: Any, *, interval: float = DEFAULT_INTERVAL, clock: Clock | None = None
    ) -> None:
        super().__init__(interval=interval, clock=clock or getattr(queue, "clock", None))
        w = widgets()
        self.queue = queue
        self.html = w.HTML(lanes_html(()))
        """The HTML widget showing the lanes."""
        self.widget = w.VBox([self._banner, self.html])
        self._last: Any = None

    def update(self) -> bool:
        """Redraw from a fresh `Queue.stats()` if it changed; return whether it did."""
        stats = self.queue.stats()
        if stats == self._last:
            return False
        self._last = stats
        return set_value(self.html, lanes_html(tuple(stats.lanes)))

    async def refresh(self) -> bool:
        """Redraw if the queue's stats changed (see `Live.refresh`)."""
        return self.update()


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit!r}")


class StepTable(Live):
    """Workflows and their steps: status badges, attempt, worker, duration, reason, error.

    Each step also shows its durable calls ("3 calls · 1 failed · 1 in doubt", counted from
    the call events already read: no query of its own) and, while it waits on a keyed wait,
    the wait's key, details and deadline. Most recently active workflows first; a dropdown
    filters by status; at most `limit` rows are drawn, with a visible "n more". Each refresh
    reads the events after the last one seen and re-reads only the steps of the workflows
    they touched.

    Args:
        store: The `DurableStore` to watch.
        limit: Maximum rows drawn.
        interval: Seconds between refreshes; default 0.25.
        clock: Time source for the interval and for open durations; default the system clock.

    Raises:
        MissingExtraError: ipywidgets is not installed.
        ValueError: `limit` < 1 or a bad `interval`.
    """

    def __init__(
        self,
        store: DurableStore,
        *,
        limit: int = 50,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        _source: Source | None = None,
    ) -> None:
        super().__init__(interval=interval, clock=clock)
        _check_limit(limit)
        w = widgets()
        self.limit = limit
        self.source = _source or Source(store)
        self.steps = self.source.want_steps()
        self.filter = w.Dropdown(
            options=list(STATUS_OPTIONS), value="", description="status",
            layout=w.Layout(width="220px"),
        )
        """The status filter (a `Dropdown` whose value is a `StepState` value or '')."""
        self.html = w.HTML(steps_html((), now=self.clock.time()))
        """The HTML widget showing the table."""
        self.shown: tuple[str, ...] = ()
        """The workflows of the rows drawn, in order (what the detail pane offers)."""
        self.widget = w.VBox([self._banner, self.filter, self.html])
        self.filter.observe(lambda _change: self.render(), names="value")

    def render(self) -> bool:
        """Redraw from the cached rows (no I/O); return whether the HTML changed."""
        cache = self.steps
        status: str = self.filter.value
        rows = []
        for row in cache.newest_first():
            if not status or row.state.value == status:
                rows.append(row)
                if len(rows) >= self.limit:
                    break
        self.shown = tuple(dict.fromkeys(row.workflow_id for row in rows))
        total = cache.counts[status] if status else sum(cache.counts.values())
        html = steps_html(
            rows, now=self.clock.time(), limit=self.limit, total=total, counts=cache.counts,
            calls=self.source.calls.steps,
        )
        return set_value(self.html, html)

    async def refresh(self) -> bool:
        """Read what changed in the store and redraw if anything did (see `Live.refresh`)."""
        if await self.source.poll() is None:
            return False
        return self.render()


class EventTimeline(Live):
    """A Gantt-like row per workflow step over time, coloured by outcome.

    Attempts are solid bars (running, completed, failed, timed out, worker lost), waits for
    input and retry backoffs hatched, durable calls thin bars inside their step's row (in
    doubt: hatched); each bar's tooltip gives its duration. The most recently
    active `limit` workflows are drawn, with a visible "n more". Events are read
    incrementally and folded into the `Timeline` model (`model`).

    Args:
        store: The `DurableStore` to watch.
        limit: Maximum workflows drawn.
        interval: Seconds between refreshes; default 0.25.
        clock: Time source for the interval and for "now"; default the system clock.

    Raises:
        MissingExtraError: ipywidgets is not installed.
        ValueError: `limit` < 1 or a bad `interval`.
    """

    def __init__(
        self,
        store: DurableStore,
        *,
        limit: int = 12,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        _source: Source | None = None,
    ) -> None:
        super().__init__(interval=interval, clock=clock)
        _check_limit(limit)
        w = widgets()
        self.limit = limit
        self.source = _source or Source(store, steps=False)
        self.model = Timeline()
        """The folded events: `Timeline` tracks per workflow."""
        self.html = w.HTML(timeline_html((), now=self.clock.time()))
        """The HTML widget showing the timeline."""
        self.widget = w.VBox([self._banner, self.html])

    def apply(self, rows: list[tuple[Any, ...]]) -> bool:
        """Fold new event rows into the model and redraw; return whether the HTML changed."""
        self.model.apply(rows)
        html = timeline_html(
            self.model.recent(self.limit), now=self.clock.time(), limit=self.limit,
            total=len(self.model),
        )
        return set_value(self.html, html)

    async def refresh(self) -> bool:
        """Read the events appended since the last refresh and redraw (see `Live.refresh`)."""
        rows = await self.source.poll()
        if rows is None:
            return False
        return self.apply(rows)
