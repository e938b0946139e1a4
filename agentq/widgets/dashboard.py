"""`Dashboard`: lanes, approvals, schedules, steps, call totals and the timeline of one
engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentq.clock import Clock
from agentq.widgets.actions import Actions
from agentq.widgets.approvals import ApprovalPanel
from agentq.widgets.detail import DetailPane
from agentq.widgets.history import EventHistory
from agentq.widgets.html.calls import call_totals_html
from agentq.widgets.html.schedules import schedules_html
from agentq.widgets.live.refresher import DEFAULT_INTERVAL, Live, check_count, set_value, widgets
from agentq.widgets.models.conversation import is_agent_run
from agentq.widgets.models.detail import DetailSnapshot
from agentq.widgets.models.prices import Price
from agentq.widgets.models.schedules import ScheduleList
from agentq.widgets.models.source import Source
from agentq.widgets.monitor import EventTimeline, LaneMonitor, StepTable
from agentq.widgets.runview import RunView

__all__ = ["Dashboard"]


def _section(w: Any, title: str, body: Any, width: str | None = None) -> Any:
    head = w.HTML(
        '<div style="font-family:var(--jp-ui-font-family,system-ui,sans-serif);font-size:13px;'
        f'font-weight:600;margin:6px 0 2px">{title}</div>'
    )
    return w.VBox([head, body], layout=w.Layout(width=width or "auto"))


class Dashboard(Live):
    """Lane bars, approvals, the step table, the detail pane and the timeline of an engine.

    One refresher task on the running loop updates them all: each tick reads
    ``queue.stats()`` and ``store.last_seq()``; only when the sequence number moved does it
    read the new events (once, for all views) and the workflows they touched. The step table
    searches and pages over every workflow (`steps`); the Detail section (`detail`) shows the
    selected workflow, step or call, with Cancel / Retry after a confirmation (`actions`); the
    timeline has a time axis, a "now" line and a zoom slider (`timeline`). Re-running the cell
    that started it stops it (see `Live.start`).

    Below the lanes, the store's schedules (`schedules`: ``engine.schedule``), each with its
    spec, next tick and last instance; read when the log moved or every 10 s.

    Above the steps, the durable call totals (`calls`): call runs, failed runs and calls in
    doubt, counted from the call events read, beside ``engine.answered_from_log`` (the calls
    and waits this engine answered from the log instead of running them again).

    Args:
        engine: The `WorkflowEngine` (its ``queue``, ``store`` and ``clock`` are used).
        interval: Seconds between refreshes; default 0.25 (4 Hz).
        limit: Maximum step rows on a page of the table.
        workflows: Maximum workflows in the timeline.
        slots: Maximum waiting steps shown at once in the approval panel.
        clock: Time source; default the engine's clock.
        workflow_for: Optional ``workflow_id -> Workflow | None`` for the Retry button: where
            to find the step bodies of a workflow the engine no longer has registered (see
            `agentq.widgets.actions`).
        agent: The `DurableAgent` whose runs the **Conversation** section forks and streams
            (see `RunView`); without it the section still shows runs and their approvals.
        prices: The price table of the conversation view (see `RunView`).

    The **Conversation** section (`conversation`, a `RunView`) shows the workflow selected in
    the Detail lists when it is an agent run (its input names an agent and a prompt): the
    conversation, approvals inline, Fork from here, Compare. Under the Detail, **event
    history** (`events`) shows the selected workflow's events as a paged table.

    Raises:
        MissingExtraError: ipywidgets is not installed (``pip install 'agentq[notebook]'``).
        TypeError: `limit`, `workflows` or `slots` is not an int (the message names it).
        ValueError: One of them is < 1, or `interval` is not a positive number.

    Example:
        >>> dash = Dashboard(engine).start()   # last line of a cell: shows it, live
        >>> ...                                  # run workflows; click Approve
        >>> await dash.stop()                  # last cell: re-raises background errors
    """

    takes_clicks = True

    def __init__(
        self,
        engine: Any,
        *,
        interval: float = DEFAULT_INTERVAL,
        limit: int = 50,
        workflows: int = 12,
        slots: int = 5,
        clock: Clock | None = None,
        workflow_for: Callable[[str], Any] | None = None,
        agent: Any = None,
        prices: Mapping[str, Price | tuple[float, float]] | None = None,
    ) -> None:
        for value, name in ((limit, "limit"), (workflows, "workflows"), (slots, "slots")):
            check_count(value, name)  # named as the caller passed them
        clock = clock or engine.clock
        super().__init__(interval=interval, clock=clock)
        w = widgets()
        self.engine = engine
        self.source = Source(engine.store)
        kw: dict[str, Any] = {"interval": interval, "clock": clock}
        self.lanes = LaneMonitor(engine.queue, **kw)
        self.approvals = ApprovalPanel(engine, slots=slots, source=self.source, **kw)
        self.steps = StepTable(engine.store, limit=limit, source=self.source, **kw)
        self.timeline = EventTimeline(engine.store, limit=workflows, source=self.source, **kw)
        self.detail = DetailPane(engine.store, clock)
        """The selection of a workflow, step or call, and its detail (`DetailPane`)."""
        self.actions = Actions(engine, workflow_for=workflow_for)
        """Cancel / Retry of the workflow the detail shows, with a confirmation."""
        self.detail.listeners.append(
            lambda snap: self.actions.target(snap.workflow if snap else None)
        )
        self.conversation = RunView(engine, None, agent=agent, prices=prices,
                                    source=self.source, **kw)
        """The selected agent run as a conversation (`RunView`; hidden for other workflows)."""
        self.conversation.history.toggle.layout.display = "none"  # the Detail's serves
        self.events = EventHistory(engine.store)
        """The selected workflow's events, a paged table (`EventHistory`; any workflow)."""
        self.detail.listeners.append(self._select_run)
        self.calls = w.HTML(self._calls_html())
        """HTML: the durable call totals and the calls answered from the log."""
        self.schedule_list = ScheduleList(engine.store)
        """The schedules as last read (`ScheduleList`)."""
        self.schedules = w.HTML(schedules_html((), clock.time()))
        """HTML: the store's schedules and their next ticks."""
        self._conversation_box = _section(w, "Conversation", self.conversation.widget)
        self._conversation_box.layout.display = "none"
        top = w.HBox(
            [
                _section(w, "Lanes", self.lanes.widget, "52%"),
                _section(w, "Waiting for approval", self.approvals.widget, "46%"),
            ],
            layout=w.Layout(justify_content="space-between", flex_flow="row wrap"),
        )
        self.widget = w.VBox(
            [
                self._banner,
                top,
                _section(w, "Schedules", self.schedules),
                _section(w, "Steps", w.VBox([self.calls, self.steps.widget])),
                self._conversation_box,
                _section(w, "Detail", w.VBox([self.actions.widget, self.detail.widget,
                                              self.events.toggle, self.events.box])),
                _section(w, "Timeline", self.timeline.widget),
            ]
        )
        self.widget.add_class("agentq-dashboard")

    def _select_run(self, snap: DetailSnapshot | None) -> None:
        self.events.show(snap.workflow.workflow_id if snap is not None else None)
        run = snap.workflow if snap is not None and is_agent_run(snap.workflow) else None
        self.conversation.show(run.workflow_id if run is not None else None)
        self._conversation_box.layout.display = None if run is not None else "none"

    def _calls_html(self) -> str:
        return call_totals_html(self.source.calls.totals, self.engine.answered_from_log,
                                floor=self.source.floor)

    async def refresh(self) -> bool:
        """Update every view from what changed (see `Live.refresh`)."""
        changed = self.lanes.update()
        rows = await self.source.poll()
        if rows is not None:
            changed = await self.steps.show_page() | changed
            changed = await self.timeline.apply(rows) | changed
            changed = self.approvals.sync() | changed
            changed = await self.detail.update(rows) | changed
            self._times_due(drawn=True)
        else:
            changed = self.approvals.tick() | changed  # deadlines count down
            changed = await self.detail.update([]) | changed  # a stale detail, when due
            if self._times_due():  # ~1 Hz: live times from the last rows and the clock, no I/O
                changed = self.steps.redraw() | changed
                changed = self.timeline.render() | changed
                changed = self.detail.render() | changed
        changed = self.detail.choices(self.steps.shown) | changed
        now = self.clock.time()
        await self.schedule_list.poll(now, rows is not None)
        shown = schedules_html(self.schedule_list.rows, now)  # "in 3 m 05 s": redrawn
        changed = set_value(self.schedules, shown) | changed
        changed = await self.conversation.update(rows) | changed
        if rows and any(r[2] == self.events.workflow_id for r in rows):
            changed = await self.events.follow() | changed
        # After the poll (the totals count the rows it read). answered_from_log is the
        # engine's own counter, not in the log: read every tick (an attribute, no I/O); the
        # page hears of it only when the text changes.
        return set_value(self.calls, self._calls_html()) | changed

    async def _drain(self) -> None:
        await self.steps.join()
        if self._error is None and self.steps.error is not None:
            self._error = self.steps.error
        await self.detail.join()
        await self.actions.join()
        if self._error is None and self.actions.error is not None:
            self._error = self.actions.error
        await self.approvals.join()
        if self._error is None and self.approvals.error is not None:
            self._error = self.approvals.error
        await self.conversation._drain()
        await self.events.spawner.join()
        if self._error is None and self.conversation.error is not None:
            self._error = self.conversation.error

    def close(self) -> None:
        """Close the widgets (see `LiveView.close`) and shut the approvals' bulk bar."""
        self.approvals.bulk.shut()
        self.conversation.close()
        super().close()
