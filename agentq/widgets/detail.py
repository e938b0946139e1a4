"""`DetailPane`: pick a workflow, then the workflow itself, one of its steps or one of its calls,
and see its detail (`agentq.widgets.html.detail`), beside the workflow's tree
(`agentq.widgets.tree.RunTree`: workflow → steps → calls; a click on a node shows its detail).

Two ipywidgets ``Select`` lists drive it, no script in the page: `workflows` (filled by the
`Dashboard` with the workflows of the step table's current page and search, or by `choices`)
and `items` (the selected workflow, ``step 0 · fetch``, ``call search-1 · search``…). Selecting
a workflow reads it once (`load_detail`: four reads, as a task on the running loop, so the
click's callback returns at once); selecting an item re-renders from that snapshot without I/O.
While a workflow is shown, `update` brings it up to date only when new events touch it (the
`Source`'s new rows name their workflow), at most once per `REREAD_EVERY` seconds (a busy agent's
events are folded into one read), and incrementally (`refresh_detail`: the workflow and step rows,
and only the new events, folded into the call rows; a 10,000-call run is not read again each
second), and the *show* list offers the latest `CALLS_LISTED` calls (review 14 #3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentq.clock import Clock
from agentq.errors import AgentqError
from agentq.markup import MUTED, error_html, isolate
from agentq.store import DurableStore, shown_call
from agentq.widgets.html.detail import (
    CALLS_LISTED,
    call_detail_html,
    step_detail_html,
    workflow_detail_html,
)
from agentq.widgets.live.refresher import Spawner, set_value, widgets
from agentq.widgets.models.detail import DetailSnapshot, load_detail, refresh_detail
from agentq.widgets.models.tree import Item
from agentq.widgets.tree import RunTree

__all__ = ["REREAD_EVERY", "DetailPane"]

REREAD_EVERY = 1.0
"""Seconds (of the pane's clock) between two re-reads of the workflow shown while its events
arrive; events in between mark it stale and the next due `update` reads it."""

_EMPTY = (
    f'<div data-agentq="detail-empty" style="{MUTED};font-size:12px;padding:4px">'
    "Select a workflow (and a step or call) to see its detail.</div>"
)


class DetailPane:
    """A selection of a workflow and of one of its parts, and the detail of what is selected.

    Args:
        store: Where the workflows are read from.
        clock: "now" of the views (open durations, lease and deadline countdowns).

    Attributes:
        workflows: ``Select`` of workflow ids.
        items: ``Select`` of the selected workflow's parts: the workflow, each step, each call.
        html: ``HTML``: the detail of the selection.
        snapshot: The `DetailSnapshot` shown, or None.

    Example:
        >>> pane = DetailPane(store, clock)
        >>> await pane.show("order-3", step=2)      # what selecting does, from code
    """

    def __init__(self, store: DurableStore, clock: Clock) -> None:
        w = widgets()
        self.store = store
        self.clock = clock
        pick = {"description_width": "68px"}  # the lists get the width, not their labels
        self.workflows = w.Select(options=[], rows=7, description="workflow", style=pick,
                                  layout=w.Layout(width="380px"))
        self.items = w.Select(options=[], rows=7, description="show", style=pick,
                              layout=w.Layout(width="380px"))
        self.html = w.HTML(_EMPTY)
        self.tree = RunTree(self.pick)
        """The selected workflow's tree (`RunTree`): a click on a node shows its detail."""
        layout = self.tree.widget.layout  # set, not replaced: a replaced Layout would leak
        layout.width, layout.max_height, layout.overflow = "360px", "420px", "auto"
        self.widget = w.HBox([w.VBox([self.workflows, self.items]), self.tree.widget, self.html],
                             layout=w.Layout(flex_flow="row wrap"))
        self.widget.add_class("agentq-detail")
        self.snapshot: DetailSnapshot | None = None
        self.listeners: list[Callable[[DetailSnapshot | None], None]] = []
        """Called with the new snapshot each time one is read (the actions bar follows)."""
        self._spawner = Spawner()
        self._generation = 0
        self._quiet = False
        self._stale = False  # events touched the workflow shown since it was read
        self._read_at = -float("inf")
        self.workflows.observe(self._workflow_picked, names="value")
        self.items.observe(self._item_picked, names="value")

    def choices(self, workflow_ids: Iterable[str]) -> bool:
        """Offer these workflows (keeping the selection if it is still among them, or shown)."""
        ids = list(dict.fromkeys(workflow_ids))
        current = self.workflows.value
        if current is not None and current not in ids:
            ids.insert(0, current)  # the one shown stays selectable
        options = [(isolate(wf), wf) for wf in ids]  # labels isolated: an <option> has no <bdi>
        if tuple(options) == tuple(self.workflows.options):
            return False
        self._quiet = True
        try:
            self.workflows.options = options
            self.workflows.value = current if current in ids else None
        finally:
            self._quiet = False
        return True

    def _item_picked(self, _change: dict[str, Any]) -> None:
        if not self._quiet:
            self.render()

    def _workflow_picked(self, change: dict[str, Any]) -> None:
        if self._quiet or change["new"] is None:
            return
        workflow_id = change["new"]
        self._spawner.spawn(lambda: self._guarded(workflow_id, None), "agentq.detail")

    async def _guarded(self, workflow_id: str, item: Item | None) -> None:
        try:
            await self.show(workflow_id, item=item)
        except (AgentqError, KeyError) as exc:  # the store failed, or it vanished: say so
            self.html.value = error_html(exc, "detail unavailable")

    async def show(
        self, workflow_id: str, *, step: int | None = None, call: str | None = None,
        item: Item | None = None,
    ) -> None:
        """Read `workflow_id` and show it (or its step `step`, or its call `call`).

        Raises:
            KeyError: No such workflow, step or call.
            StoreError: The store failed.
        """
        self._generation += 1
        generation = self._generation
        snap = await load_detail(self.store, workflow_id)
        if generation != self._generation:
            return  # another selection came meanwhile: it shows itself
        self._stale, self._read_at = False, -float("inf")  # the next event re-reads at once
        if snap is None:
            raise KeyError(f"workflow {workflow_id!r} is not in the store")
        if item is None:
            item = ("step", step) if step is not None else ("call", call) if call else None
        self._set(snap)
        self._quiet = True
        try:
            if workflow_id not in [v for _, v in self.workflows.options]:
                self.workflows.options = [(isolate(workflow_id), workflow_id),
                                          *self.workflows.options]
            self.workflows.value = workflow_id
            wanted = item or ("workflow", None)
            options = _item_options(snap, wanted)
            self.items.options = options
            if wanted not in [v for _, v in options]:
                raise KeyError(f"workflow {workflow_id!r} has no {wanted[0]} {wanted[1]!r}")
            self.items.value = wanted
        finally:
            self._quiet = False
        self.render()

    def pick(self, item: Item) -> None:
        """Show `item` of the workflow shown, from its snapshot (no I/O): a tree node's click.

        Raises:
            KeyError: No workflow is shown, or it has no such step or call.
        """
        snap = self.snapshot
        if snap is None:
            raise KeyError("no workflow is shown")
        options = _item_options(snap, item)
        if item not in [v for _, v in options]:
            raise KeyError(f"workflow {snap.workflow.workflow_id!r} has no {item[0]} {item[1]!r}")
        self._quiet = True
        try:
            self.items.options = options
            self.items.value = item
        finally:
            self._quiet = False
        self.render()

    def _set(self, snap: DetailSnapshot | None) -> None:
        self.snapshot = snap
        self.tree.show(snap)
        for listener in self.listeners:
            listener(snap)

    def render(self) -> bool:
        """Render the selected item from the snapshot (no I/O); return whether it changed."""
        snap, item = self.snapshot, self.items.value
        if snap is None or item is None:
            return set_value(self.html, _EMPTY)
        now = self.clock.time()
        kind, value = item
        if kind == "step":
            html = step_detail_html(snap, value, now=now)
        elif kind == "call":
            html = call_detail_html(snap, value, now=now)
        else:
            html = workflow_detail_html(snap, now=now)
        return set_value(self.html, html)

    async def update(self, rows: list[tuple[Any, ...]]) -> bool:
        """Bring the workflow shown up to date if new event `rows` (or earlier ones) are about it.

        The update is incremental (`refresh_detail`: its row, its step rows and the events
        after the last one shown, folded into its call rows); rows about other workflows
        cause no read.

        The first batch after a selection (or a quiet second) is read at once; then at most one
        read per `REREAD_EVERY` seconds: events that arrive sooner mark the snapshot stale,
        and a later call (the Dashboard calls it on idle ticks with ``[]``) reads it.
        Returns whether the HTML changed.

        Raises:
            StoreError: The store failed.
        """
        self._spawner.bind()
        snap = self.snapshot
        if snap is None:
            return False
        if any(r[2] == snap.workflow.workflow_id for r in rows):
            self._stale = True
        now = self.clock.time()
        if not self._stale or now - self._read_at < REREAD_EVERY:
            return False
        self._stale, self._read_at = False, now
        generation = self._generation
        fresh = await refresh_detail(self.store, snap)
        if fresh is None or fresh is snap or generation != self._generation:
            return False  # gone, unchanged, or another workflow was selected meanwhile
        self._set(fresh)
        options = _item_options(fresh, self.items.value)
        if options != list(self.items.options):
            self._quiet = True
            try:
                value = self.items.value
                self.items.options = options
                self.items.value = value if value in [v for _, v in options] else None
            finally:
                self._quiet = False
        return self.render()

    async def join(self) -> None:
        """Wait for the reads that selections started."""
        await self._spawner.join()


def _item_options(snap: DetailSnapshot, keep: Item | None = None) -> list[tuple[str, Item]]:
    """The *show* list: the workflow, each step, the latest `CALLS_LISTED` calls (and the
    call `keep`, when it is older: the one selected stays selectable)."""
    head = f"workflow {isolate(snap.workflow.workflow_id)}"
    options: list[tuple[str, Item]] = [(head, ("workflow", None))]
    options += [
        (f"step {s.step_index} · {isolate(s.step_name)} ({s.state.value})", ("step", s.step_index))
        for s in snap.steps
    ]
    calls = list(snap.calls)
    listed = calls[-CALLS_LISTED:]
    if keep is not None and keep[0] == "call" and all(c.key != keep[1] for c in listed):
        listed = [c for c in calls if c.key == keep[1]] + listed
    for c in listed:
        name = (c.label or {}).get("tool") or (c.label or {}).get("kind") or c.kind.value
        state = shown_call(snap.workflow, c).state
        options.append((f"{c.kind.value} {isolate(c.key)} · {isolate(name)} ({state})",
                        ("call", c.key)))
    return options
