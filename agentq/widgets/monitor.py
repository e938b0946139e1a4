"""Live views of the queue and the store: `LaneMonitor`, `StepTable`, `EventTimeline`.

Each is a `Live` widget: build it, display it, ``start()`` its refresher (``start`` returns
the widget, so ``StepTable(store).start()`` as a cell's last line shows it live) and end the
notebook with ``await widget.stop()``. `Dashboard` combines them under one refresher.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentq.clock import Clock
from agentq.store import DurableStore
from agentq.widgets.html.tables import lanes_html, steps_html
from agentq.widgets.html.timeline import timeline_html
from agentq.widgets.live.refresher import (
    DEFAULT_INTERVAL,
    Live,
    Spawner,
    check_count,
    set_value,
    widgets,
)
from agentq.widgets.models.search import Page, Query, page_of
from agentq.widgets.models.source import Source
from agentq.widgets.models.timeline import Timeline

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

WINDOW_OPTIONS = (
    ("any time", 0.0),
    ("last 5 min", 300.0),
    ("last hour", 3600.0),
    ("last day", 86400.0),
)
"""Choices of the step table's time window: (label, seconds or 0 for any)."""


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


class StepTable(Live):
    """Workflows and their steps: status badges, attempt, worker, duration, reason, error.

    Each step also shows its durable calls ("3 calls · 1 failed · 1 in doubt", counted from
    the call events already read: no query of its own) and, while it waits on a keyed wait,
    the wait's key, details and deadline. Most recently active workflows first.

    Search and paging instead of a fixed cap: a text box for part of the workflow id
    (`query`), one for part of a step name (`step_query`), the status (`filter`) and a time
    window (`window`) select what is listed; a page holds at most `limit` rows (whole
    workflows), and **◀ newer** / **older ▶** (`prev`, `next`) move through the matches, over
    the whole history (see `agentq.widgets.models.search`). Each refresh reads the events after the
    last one seen and re-reads only the workflows they touched; a page reads the step rows of
    only the workflows it shows.

    Args:
        store: The `DurableStore` to watch.
        limit: Maximum rows on a page.
        interval: Seconds between refreshes; default 0.25.
        clock: Time source for the interval and for open durations; default the system clock.
        source: The `Source` (what changed in the store since the last refresh) to share
            with other views of the same store, which then read it once per tick (the
            `Dashboard` passes its own); default a new one.

    Raises:
        MissingExtraError: ipywidgets is not installed.
        TypeError: `limit` is not an int.
        ValueError: `limit` < 1 or a bad `interval`.
    """

    def __init__(
        self,
        store: DurableStore,
        *,
        limit: int = 50,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        source: Source | None = None,
    ) -> None:
        super().__init__(interval=interval, clock=clock)
        check_count(limit, "limit")
        w = widgets()
        self.limit = limit
        self.store = store
        self.source = source or Source(store)
        self.steps = self.source.want_steps()
        self.filter = w.Dropdown(
            options=list(STATUS_OPTIONS), value="", description="status",
            layout=w.Layout(width="200px"),
        )
        """The status filter (a `Dropdown` whose value is a `StepState` value or '')."""
        self.query = w.Text(placeholder="workflow id contains", layout=w.Layout(width="190px"))
        """Search: part of a workflow id."""
        self.step_query = w.Text(placeholder="step contains", layout=w.Layout(width="140px"))
        """Search: part of a step name."""
        self.window = w.Dropdown(options=list(WINDOW_OPTIONS), value=0.0,
                                 layout=w.Layout(width="120px"))
        """Time window: the workflow's latest event within this many seconds (0: any)."""
        self.prev = w.Button(description="◀ newer", layout=w.Layout(width="90px"), disabled=True)
        self.next = w.Button(description="older ▶", layout=w.Layout(width="90px"), disabled=True)
        self.page_label = w.HTML("")
        """HTML: which workflows of how many matching the page shows."""
        self.html = w.HTML(steps_html((), now=self.clock.time()))
        """The HTML widget showing the table."""
        self.shown: tuple[str, ...] = ()
        """The workflows of the rows drawn, in order (what the detail pane offers)."""
        self.page: Page = Page()
        """The page drawn (`agentq.widgets.models.search.Page`)."""
        self._starts: list[tuple[int, int]] = []  # (start, offset) of earlier pages, for "newer"
        bar = w.HBox([self.query, self.step_query, self.filter, self.window, self.prev,
                      self.next, self.page_label], layout=w.Layout(flex_flow="row wrap"))
        self.widget = w.VBox([self._banner, bar, self.html])
        self.widget.add_class("agentq-steps")
        self._spawner = Spawner()
        self._generation = 0
        for box in (self.query, self.step_query, self.filter, self.window):
            box.observe(lambda _change: self._soon(0), names="value")
        self.prev.on_click(lambda _b: self._soon(*(self._starts.pop() if self._starts else (0, 0)),
                                                 back=True))
        self.next.on_click(lambda _b: self._soon(self.page.next_start, self.page.next_offset,
                                                 forward=True))

    @property
    def search(self) -> Query:
        """The query the search boxes describe."""
        return Query(self.query.value.strip(), self.step_query.value.strip(),
                     self.filter.value, float(self.window.value or 0))

    def _soon(self, start: int, offset: int = 0, *, forward: bool = False,
              back: bool = False) -> None:
        if forward:
            self._starts.append((self.page.start, self.page.offset))
        elif not back:
            self._starts.clear()
        self._spawner.spawn(lambda: self._show_guarded(start, offset), "agentq.search")

    async def _show_guarded(self, start: int, offset: int) -> None:
        try:
            await self.show_page(start, offset)
        except Exception as exc:  # a store failure: the banner shows it, stop() raises it
            self._fail(exc, "search failed")

    async def show_page(self, start: int | None = None, offset: int | None = None) -> bool:
        """Draw the page from the `start`-th matching workflow (default: the current page).

        Reads the step rows of the workflows it shows that were not read yet. A workflow with
        more matching steps than `limit` is paged by rows: its page ends with "… n more
        steps", and **older ▶** (or ``show_page(page.next_start, page.next_offset)``) shows
        the next ones.

        Args:
            start: Position (0-based) of the page's first workflow among the matching ones.
            offset: Steps of that workflow to skip (when it is paged by rows); default 0,
                or the current page's when `start` is None.

        A `start` past the last match draws the last workflow's page.

        Returns:
            Whether the HTML changed.

        Raises:
            TypeError: `start` or `offset` is not an int (or None).
            ValueError: `start` or `offset` is negative.
            StoreError: The store failed.
        """
        if start is not None:
            check_count(start, "start", least=0)
        if offset is not None:
            check_count(offset, "offset", least=0)
        self._spawner.bind()
        now = self.clock.time()
        first = self.page.start if start is None else start
        skip = (self.page.offset if start is None else 0) if offset is None else offset
        self._generation += 1
        generation = self._generation
        page = await page_of(self.steps, self.store, self.search, start=first,
                             limit=self.limit, now=now, offset=skip)
        if not page.rows and 0 < page.matches <= first:  # past the end: the last page
            first, skip = page.matches - 1, 0
            page = await page_of(self.steps, self.store, self.search, start=first,
                                 limit=self.limit, now=now)
        if generation != self._generation:
            return False  # a later search (the next keystroke) draws its own page
        self.page = page
        self.shown = tuple(page.workflows)
        self.prev.disabled = page.start == 0 and page.offset == 0
        self.next.disabled = page.next_start >= page.matches
        label = (
            f'<span data-agentq="page" data-start="{page.start}" data-matches="{page.matches}" '
            f'style="font-size:12px;color:#6b7280;padding:0 6px">'
            f"workflows {min(page.start + 1, page.matches)}-{page.next_start} of "
            f"{page.matches:,}{_steps_range(page)}</span>"
        )
        set_value(self.page_label, label)
        return self.redraw(now)

    def redraw(self, now: float | None = None) -> bool:
        """Redraw the page drawn with the clock's time (no I/O): running durations count up
        and lease expiries count down between events. Returns whether the HTML changed."""
        page = self.page
        html = steps_html(
            page.rows, now=self.clock.time() if now is None else now, limit=self.limit,
            total=len(page.rows) + page.cut, counts=self.steps.counts,
            calls=self.source.calls.steps, calls_floor=self.source.floor,
            workflows=self.steps.index,
        )
        return set_value(self.html, html)

    async def join(self) -> None:
        """Wait for the pages that the search boxes and buttons asked for."""
        await self._spawner.join()

    async def _drain(self) -> None:
        await self.join()

    async def refresh(self) -> bool:
        """Read what changed in the store and redraw if anything did (see `Live.refresh`);
        on idle ticks, redraw the live times about once a second (`redraw`, no I/O)."""
        if await self.source.poll() is None:
            return self._times_due() and self.redraw()
        self._times_due(drawn=True)
        return await self.show_page()


def _steps_range(page: Page) -> str:
    """' · steps 51-100 of 160' when the page shows part of one long workflow, else ''."""
    if not (page.offset or page.cut):
        return ""
    first = page.workflows[0] if page.workflows else ""
    shown = sum(1 for r in page.rows if r.workflow_id == first)
    return f" · steps {page.offset + 1:,}-{page.offset + shown:,} of " \
        f"{page.offset + shown + page.cut:,}"


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
        source: The `Source` (what changed in the store since the last refresh) to share
            with other views of the same store, which then read it once per tick (the
            `Dashboard` passes its own); default a new one.

    Raises:
        MissingExtraError: ipywidgets is not installed.
        TypeError: `limit` is not an int.
        ValueError: `limit` < 1 or a bad `interval`.
    """

    def __init__(
        self,
        store: DurableStore,
        *,
        limit: int = 12,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
        source: Source | None = None,
    ) -> None:
        super().__init__(interval=interval, clock=clock)
        check_count(limit, "limit")
        w = widgets()
        self.limit = limit
        self.source = source or Source(store, steps=False)
        self.model = Timeline()
        """The folded events: `Timeline` tracks per workflow (the source folds each batch it
        reads into it, see `Source.folds`)."""
        self.source.folds.append(self.model.apply)
        self.html = w.HTML(timeline_html((), now=self.clock.time()))
        """The HTML widget showing the timeline."""
        self.zoom = w.FloatRangeSlider(
            value=(0.0, 100.0), min=0.0, max=100.0, step=0.5, description="zoom %",
            readout_format=".0f", continuous_update=False, layout=w.Layout(width="420px"),
        )
        """The part of the time range drawn, in % (a range slider; redraws without I/O)."""
        self.widget = w.VBox([self._banner, self.zoom, self.html])
        self.zoom.observe(lambda _change: self.render(), names="value")

    async def apply(self, rows: list[tuple[Any, ...]]) -> bool:
        """Redraw after the source read new event `rows`; return whether the HTML changed.

        The source has folded `rows` into the model already (`Source.folds`: on the first
        poll while the store's thread reads the workflow index). A workflow drawn whose
        history began before the first event read (the first poll reads only the log's tail)
        is read whole once (`Timeline.rebuild`).

        Raises:
            StoreError: Reading a workflow's history failed.
        """
        if self.source.floor:  # the reads queued at once: see `StepCache.ensure`
            todo = [t.workflow_id for t in self.model.recent(self.limit) if not t.whole]
            read = self.source.store.event_rows
            histories = await asyncio.gather(*(read(wf) for wf in todo))
            for workflow_id, history in zip(todo, histories, strict=True):
                self.model.rebuild(workflow_id, history)
        return self.render()

    def render(self) -> bool:
        """Redraw from the model (no I/O); return whether the HTML changed."""
        lo, hi = self.zoom.value
        lo, hi = max(0.0, lo / 100.0), min(1.0, hi / 100.0)
        if hi <= lo:  # a slider squeezed to one point: show a sliver around it
            lo, hi = max(0.0, min(lo, 0.995)), max(0.0, min(lo, 0.995)) + 0.005
        html = timeline_html(
            self.model.recent(self.limit), now=self.clock.time(), limit=self.limit,
            total=len(self.model), zoom=(lo, hi),
        )
        return set_value(self.html, html)

    async def refresh(self) -> bool:
        """Read the events appended since the last refresh and redraw (see `Live.refresh`);
        on idle ticks, move the "now" line and open bars about once a second (no I/O)."""
        rows = await self.source.poll()
        if rows is None:
            return self._times_due() and self.render()
        self._times_due(drawn=True)
        return await self.apply(rows)
