"""`export_html`: the dashboard's views of a store as one static HTML file.

The page is made of the same pure renderers the live widgets show (`agentq.widgets.html`):
the waiting steps (`approval_html`, without buttons: a static page cannot resume), the step
table with its durable call counts (`steps_html`), the call totals (`call_totals_html`) and the
timeline (`timeline_html`). There are no lanes: a store has no queue. Needs no ipywidgets
and no pandas, so the command line's ``agentq export --html`` works with the ``cli`` extra only.
"""

from __future__ import annotations

import asyncio
import html
from collections import Counter
from pathlib import Path

from agentq.markup import FONT, MUTED, clock_text
from agentq.store import DurableStore, StepState
from agentq.widgets._calls import CallTally
from agentq.widgets._timeline import Timeline
from agentq.widgets.html.calls import call_totals_html
from agentq.widgets.html.results import approval_html
from agentq.widgets.html.tables import steps_html
from agentq.widgets.html.timeline import timeline_html

__all__ = ["dashboard_html", "export_html"]


def _section(title: str, body: str) -> str:
    return (
        f'<section style="margin:14px 0"><h2 style="{FONT};font-size:15px;margin:0 0 6px">'
        f"{title}</h2>{body}</section>"
    )


async def dashboard_html(
    store: DurableStore, *, now: float, limit: int = 500, workflows: int = 50, title: str = ""
) -> str:
    """Render a store's dashboard views as one self-contained HTML page.

    Reads the whole event log and the ``steps`` projection once.

    Args:
        store: Any `DurableStore`.
        now: Unix seconds: the right end of the timeline and of unfinished durations.
        limit: Maximum step rows in the table (the most recently active workflows first).
        workflows: Maximum workflows drawn in the timeline.
        title: Shown at the top of the page (escaped), e.g. the store's path.

    Returns:
        The page (``<!DOCTYPE html>`` …), every stored string escaped.

    Raises:
        StoreError: The store failed.
        ValueError: `limit` or `workflows` is less than 1.
    """
    if limit < 1 or workflows < 1:
        raise ValueError(f"limit and workflows must be >= 1, got {limit!r} and {workflows!r}")
    events = await store.event_rows()
    steps = await store.step_rows()
    tally = CallTally()
    tally.apply(events)
    timeline = Timeline()
    timeline.apply(events)
    # the most recently active workflows first, as in the live step table
    recency = {row[2]: row[0] for row in events}
    ordered = sorted(steps, key=lambda r: (-recency.get(r.workflow_id, 0), r.step_index))
    counts = Counter(row.state.value for row in steps)
    waiting = [row for row in steps if row.state is StepState.WAITING]
    approvals = "".join(approval_html(row) for row in waiting) or (
        f'<div style="{FONT};{MUTED}">no step waits for input</div>'
    )
    body = "".join(
        [
            _section(f"Waiting for input ({len(waiting)})", approvals),
            _section("Durable calls", call_totals_html(tally.totals)),
            _section(
                "Steps",
                steps_html(ordered[:limit], now=now, limit=limit, total=len(ordered),
                           counts=counts, calls=tally.steps),
            ),
            _section(
                "Timeline",
                timeline_html(timeline.recent(workflows), now=now, limit=workflows,
                              total=len(timeline)),
            ),
        ]
    )
    heading = html.escape(title or "agentq")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{heading} · agentq</title></head>"
        f'<body style="{FONT};margin:16px">'
        f'<h1 style="font-size:18px;margin:0">{heading}</h1>'
        f'<div style="{MUTED}">{len(recency)} workflow(s), {len(events)} event(s); '
        f"exported {clock_text(now)}</div>{body}</body></html>\n"
    )


async def export_html(
    store: DurableStore,
    path: str | Path,
    *,
    now: float,
    limit: int = 500,
    workflows: int = 50,
    title: str = "",
) -> Path:
    """Write `dashboard_html` of `store` to `path` (UTF-8), replacing the file.

    Args:
        store: Any `DurableStore`.
        path: The HTML file to write; its directory must exist.
        now: Unix seconds (see `dashboard_html`).
        limit: Maximum step rows.
        workflows: Maximum workflows in the timeline.
        title: The page's heading.

    Returns:
        The path written.

    Raises:
        StoreError: The store failed.
        OSError: The file cannot be written.
        ValueError: A bad `limit` or `workflows`.

    Example:
        >>> await export_html(store, "dashboard.html", now=time.time(), title="orders.db")
    """
    page = await dashboard_html(store, now=now, limit=limit, workflows=workflows, title=title)
    out = Path(path)
    await asyncio.to_thread(out.write_text, page, encoding="utf-8")
    return out
