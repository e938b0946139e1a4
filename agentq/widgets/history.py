"""`EventHistory`: a workflow's event log as a paged table (what ``agentq events`` prints).

Hidden behind its toggle until asked for; a page is `limit` events by sequence number
(`agentq.widgets.models.runs.event_page`), Older / Newer move a page, and the last page
follows new events as they arrive (`follow`).
"""

from __future__ import annotations

from agentq.markup import MUTED, esc_text
from agentq.store import DurableStore
from agentq.widgets.html.conversation import events_html
from agentq.widgets.live.refresher import Spawner, set_value, widgets
from agentq.widgets.models.runs import EventPage, event_page

__all__ = ["EventHistory"]


class EventHistory:
    """A paged table of one workflow's events.

    Args:
        store: The store to read.
        limit: Events per page.

    Attributes:
        toggle: ToggleButton "event history" (shows and hides the table).
        table: HTML: the page.
        older, newer: Buttons moving a page.
        page: The page shown, or None before one was read.
        workflow_id: The workflow shown.
    """

    def __init__(self, store: DurableStore, *, limit: int = 20) -> None:
        w = widgets()
        self.store, self.limit = store, limit
        self.workflow_id: str | None = None
        self.page: EventPage | None = None
        self._starts: list[int] = [0]  # `after` of each page seen, oldest first
        self.toggle = w.ToggleButton(description="event history", icon="list",
                                     layout=w.Layout(width="auto"))
        self.table = w.HTML("")
        self.older = w.Button(description="Older", icon="chevron-left",
                              layout=w.Layout(width="auto"))
        self.newer = w.Button(description="Newer", icon="chevron-right",
                              layout=w.Layout(width="auto"))
        self.where = w.HTML("")
        self.box = w.VBox([w.HBox([self.older, self.newer, self.where]), self.table],
                          layout=w.Layout(display="none"))
        self.spawner = Spawner()
        self.toggle.observe(lambda _c: self._shown(), "value")
        self.older.on_click(lambda _b: self.spawner.spawn(self.previous, "agentq.events"))
        self.newer.on_click(lambda _b: self.spawner.spawn(self.next, "agentq.events"))

    def _shown(self) -> None:
        self.box.layout.display = None if self.toggle.value else "none"
        if self.toggle.value and self.workflow_id is not None:
            self.spawner.spawn(self.reload, "agentq.events")

    def show(self, workflow_id: str | None) -> None:
        """Show `workflow_id`'s events from its first page (read when the table is open)."""
        if workflow_id == self.workflow_id:
            return
        self.workflow_id, self.page, self._starts = workflow_id, None, [0]
        self.table.value = ""
        if self.toggle.value and workflow_id is not None:
            self.spawner.spawn(self.reload, "agentq.events")

    async def reload(self) -> bool:
        """Read the current page again; return whether it changed."""
        if self.workflow_id is None:
            return False
        page = await event_page(self.store, self.workflow_id, after=self._starts[-1],
                                limit=self.limit)
        self.page = page
        first = len(self._starts)
        shown = (f'<span style="{MUTED};white-space:nowrap">page {first} of '
                 f'{esc_text(self.workflow_id)}{" · more after it" if page.more else ""}</span>')
        self.where.value = shown
        self.older.disabled = len(self._starts) == 1
        self.newer.disabled = not page.more
        return set_value(self.table, events_html(page))

    async def next(self) -> None:
        """Show the next page (when there is one)."""
        if self.page is not None and self.page.more and self.page.events:
            self._starts.append(self.page.events[-1].seq)
            await self.reload()

    async def previous(self) -> None:
        """Show the previous page (when there is one)."""
        if len(self._starts) > 1:
            self._starts.pop()
            await self.reload()

    async def follow(self) -> bool:
        """Re-read the page shown when it is the last one (new events land there)."""
        if not self.toggle.value or self.page is None or self.page.more:
            return False
        return await self.reload()
