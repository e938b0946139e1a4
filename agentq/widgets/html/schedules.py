"""`schedules_html`: the store's schedules as a small table (name, definition, spec, next tick,
last instance).

A pure function of `ScheduleRow`s and "now" (the next tick is shown as a UTC time and how far
ahead it is); the `agentq.widgets.dashboard.Dashboard` shows it. Every stored string is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.markup import FONT, MUTED, esc, fmt_seconds, more_html, utc_text
from agentq.store import ScheduleRow

__all__ = ["schedules_html"]


def _at(seconds: float) -> str:
    return utc_text(seconds, "%Y-%m-%d %H:%M:%S UTC")


def schedules_html(rows: Sequence[ScheduleRow], now: float, limit: int = 20) -> str:
    """The table of `rows` (at most `limit`, then an "n more" line); the next tick of each,
    with how long until it (``due`` when it has passed and no engine fired it yet).

    Elements: ``data-agentq="schedules"`` (the table), ``data-agentq="schedule"`` per row
    with ``data-name`` and ``data-next-tick`` (Unix seconds).
    """
    if not rows:
        return f'<div data-agentq="schedules" style="{FONT};{MUTED}">no schedules</div>'
    cell = "padding:2px 8px;text-align:left;white-space:nowrap"
    head = "".join(
        f'<th style="{cell}">{name}</th>'
        for name in ("schedule", "definition", "spec", "next tick", "last instance")
    )
    body = []
    for row in rows[:limit]:
        ahead = row.next_tick - now
        when = f"in {fmt_seconds(ahead)}" if ahead > 0 else "due"
        body.append(
            f'<tr data-agentq="schedule" data-name="{esc(row.name)}" '
            f'data-next-tick="{row.next_tick!r}">'
            f'<td style="{cell}">{esc(row.name)}</td>'
            f'<td style="{cell}">{esc(row.definition)}</td>'
            f'<td style="{cell}"><code>{esc(row.spec)}</code></td>'
            f'<td style="{cell}">{esc(_at(row.next_tick))} '
            f'<span style="{MUTED}">({esc(when)})</span></td>'
            f'<td style="{cell}">{esc(row.last_instance or "")}</td></tr>'
        )
    more = more_html(len(rows) - limit, "schedules") if len(rows) > limit else ""
    return (
        f'<table data-agentq="schedules" style="{FONT};border-collapse:collapse">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"
    )
