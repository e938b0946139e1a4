"""A run group's progress: `GroupMonitor` (a live notebook widget) and `follow_group` (a
progress line for scripts).

Both read the group with `agentq.widgets.models.group.read_progress` (counts by state,
failures with reasons, tokens and cost so far, rate and time left) and draw it:
`GroupMonitor` with `agentq.widgets.html.group.group_progress_html` on the `Live`
refresher; `follow_group` with rich's progress bar (the ``cli`` extra) on a console.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from agentq.clock import Clock, SystemClock
from agentq.errors import UnknownWorkflowError
from agentq.extras import require
from agentq.literal import visible
from agentq.store import DurableStore
from agentq.widgets.html.group import group_progress_html, progress_text
from agentq.widgets.live.refresher import (
    DEFAULT_INTERVAL,
    Live,
    check_interval,
    set_value,
    widgets,
)
from agentq.widgets.models.group import GroupProgress, UsageCache, read_progress

__all__ = ["GroupMonitor", "follow_group"]


class GroupMonitor(Live):
    """A run group as a live progress bar: counts by state, failures with their reasons,
    tokens and cost so far, the rate and an estimate of the time left.

    Args:
        store: The store holding the group (any process may be running its members).
        group_id: The group (`WorkflowEngine.group`).
        prices: Cost per unit of a usage figure (``{"input_tokens": 3e-6,
            "output_tokens": 1.5e-5}``); None: no cost shown.
        interval: Seconds between refreshes; default 0.25.
        clock: Time source of the interval and of the estimate; default the system clock.

    Raises:
        MissingExtraError: ipywidgets is not installed (``pip install 'agentq[notebook]'``).

    Each refresh reads the group's member rows, and the calls of its open members (an
    ended member's usage is read once). The refresher stops by itself once every member has
    ended. ``progress`` is the last snapshot drawn.

    Example:
        >>> await engine.group("eval").submit(task, items)
        >>> GroupMonitor(store, "eval", prices={"input_tokens": 3e-6}).start()
    """

    def __init__(
        self,
        store: DurableStore,
        group_id: str,
        *,
        prices: Mapping[str, float] | None = None,
        interval: float = DEFAULT_INTERVAL,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(interval=interval, clock=clock)
        self.store = store
        self.group_id = group_id
        self.prices = prices
        self.progress: GroupProgress | None = None
        """The last snapshot drawn, None before the first refresh."""
        self.html = widgets().HTML("")
        """The HTML widget showing the progress."""
        self.widget = widgets().VBox([self._banner, self.html])
        self._cache = UsageCache()

    async def refresh(self) -> bool:
        """Read the group and redraw it (see `Live.refresh`); return whether it changed."""
        self.progress = await read_progress(
            self.store, self.group_id, self.clock.time(), prices=self.prices, cache=self._cache
        )
        return set_value(self.html, group_progress_html(self.progress))


async def follow_group(
    store: DurableStore,
    group_id: str,
    *,
    prices: Mapping[str, float] | None = None,
    file: TextIO | None = None,
    interval: float = 0.5,
    clock: Clock | None = None,
) -> GroupProgress:
    """Show a run group's progress as one line on a console until every member has ended.

    rich's progress bar (members ended of all), followed by `progress_text` (counts,
    tokens, cost, rate, time left); on a terminal it is redrawn in place, elsewhere (a log
    file) rich prints it when it ends. Await it beside the work (``asyncio.gather`` with the
    group's run, or as a task), or alone while other processes run the members. Started
    before the group is stored (a watcher started first, or before the submitting process),
    it prints "waiting for group '<id>'" once and reads again every `interval` until the group
    appears (a misspelt id waits too: cancel it, or Ctrl-C).

    Args:
        store: The store holding the group.
        group_id: The group.
        prices: As `GroupMonitor`'s.
        file: Where to draw; default ``sys.stderr``.
        interval: Seconds between reads of the group (a positive finite number).
        clock: Time source; default the system clock.

    Returns:
        The last `GroupProgress` read (every member ended).

    Raises:
        MissingExtraError: rich is not installed (``pip install 'agentq[cli]'``).
        TypeError: The store keeps no run groups.
        UnknownWorkflowError: The group was forgotten (`RunGroup.forget`, retention) after
            it was first read, before every member ended.
        ValueError: `interval` is not a positive finite number of seconds.
    """
    interval = check_interval(interval)
    progress_mod: Any = require("rich.progress", "cli")
    console_mod: Any = require("rich.console", "cli")
    markup_mod: Any = require("rich.markup", "cli")
    clock = clock or SystemClock()
    cache = UsageCache()
    console = console_mod.Console(file=file or sys.stderr)
    bar = progress_mod.Progress(
        progress_mod.TextColumn("{task.description}"),
        progress_mod.BarColumn(),
        progress_mod.TextColumn("{task.fields[line]}"),
        console=console,
        transient=False,
    )
    waiting = ""
    seen = False
    with bar:
        task = bar.add_task(markup_mod.escape(visible(group_id)), total=None, line="")
        while True:
            try:
                found = await read_progress(
                    store, group_id, clock.time(), prices=prices, cache=cache
                )
            except UnknownWorkflowError as exc:  # not submitted yet: a watcher waits for it
                if seen:  # forgotten while followed (RunGroup.forget, retention): it is gone
                    raise UnknownWorkflowError(
                        f"run group {visible(repr(group_id))} was forgotten while followed"
                    ) from exc
                if not waiting:  # said once, on a terminal and in a log file alike
                    waiting = f"waiting for group {visible(repr(group_id))}"
                    console.print(waiting, markup=False, highlight=False)
                    bar.update(task, line=markup_mod.escape(waiting))
                await clock.sleep(interval)
                continue
            seen = True
            bar.update(task, total=found.status.total, completed=found.status.ended,
                       line=progress_text(found))
            if found.done:
                return found
            await clock.sleep(interval)
