"""The lane and step tables: `lanes_html` (one row per lane) and `steps_html` (one per step).

Pure functions of snapshots (``queue.stats().lanes``, `StepRow` lists, call counts), built from
the primitives of `agentq.markup`; `agentq.widgets.monitor` shows them live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentq.markup import (
    COLORS,
    FONT,
    LABELS,
    MUTED,
    badge,
    clock_text,
    esc,
    esc_text,
    fmt_seconds,
    more_html,
    short,
)
from agentq.store import StepRow, StepState, WorkflowRow, WorkflowState
from agentq.widgets.html.calls import call_counts_html
from agentq.widgets.html.results import wait_html
from agentq.widgets.models.calls import CallCounts
from agentq.widgets.models.detail import shown_step

__all__ = ["LaneSnapshot", "lanes_html", "queue_stats_html", "steps_html"]


class LaneSnapshot(Protocol):
    """What `lanes_html` reads of each lane (`LaneStats` has these attributes)."""

    @property
    def priority(self) -> Any: ...
    @property
    def capacity(self) -> int: ...
    @property
    def permits(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def completed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def cache_hits(self) -> int: ...
    @property
    def joins(self) -> int: ...


def _bar(value: int, total: int, color: str, label: str) -> str:
    pct = 0.0 if total <= 0 else min(100.0, 100.0 * value / total)
    return (
        f'<td style="padding:3px 6px;white-space:nowrap" title="{esc(label)}">'
        f'<span style="display:inline-block;vertical-align:middle;width:80px;height:12px;'
        f'background:#e5e7eb;border-radius:3px;overflow:hidden"><span style="display:block;'
        f'width:{pct:.1f}%;height:100%;background:{color}"></span></span> {esc_text(label)}</td>'
    )


def lanes_html(lanes: Sequence[LaneSnapshot]) -> str:
    """Render queue lanes, highest priority first: running/permits and queued/capacity bars.

    Args:
        lanes: Lane snapshots, e.g. ``queue.stats().lanes``.
    """
    rows = []
    cell = 'style="padding:3px 6px;white-space:nowrap;text-align:right"'
    for lane in lanes:
        name = str(getattr(lane.priority, "name", lane.priority)).upper()
        value = str(getattr(lane.priority, "value", lane.priority)).lower()
        attrs = (
            f'data-agentq="lane" data-priority="{esc(value)}" data-running="{lane.running}" '
            f'data-permits="{lane.permits}" data-queued="{lane.queued}" '
            f'data-capacity="{lane.capacity}" data-completed="{lane.completed}" '
            f'data-failed="{lane.failed}"'
        )
        running = _bar(lane.running, lane.permits, COLORS["running"][0],
                       f"{lane.running}/{lane.permits} running")
        queued = _bar(lane.queued, lane.capacity, COLORS["waiting"][0],
                      f"{lane.queued}/{lane.capacity} queued")
        rows.append(
            f'<tr {attrs}><td style="padding:3px 6px"><b>{esc_text(name)}</b></td>{running}{queued}'
            f'<td {cell} title="completed jobs"><span style="color:{COLORS["completed"][0]}">'
            f"✔ {lane.completed}</span></td>"
            f'<td {cell} title="failed jobs"><span style="color:{COLORS["failed"][0]}">'
            f"✖ {lane.failed}</span></td>"
            f'<td {cell} title="pushes answered from the cache · pushes that joined a running '
            f'job"><span style="{MUTED}">cached {lane.cache_hits} · joined {lane.joins}</span>'
            "</td>"
            "</tr>"
        )
    body = "".join(rows) or f'<tr><td style="{MUTED}">no lanes</td></tr>'
    return (
        f'<table data-agentq="lanes" style="{FONT};border-collapse:collapse">{body}</table>'
    )


def queue_stats_html(stats: Any) -> str:
    """Render a `QueueStats` snapshot as the lane monitor shows it (bars and counters)."""
    return lanes_html(tuple(stats.lanes))


def _duration(row: StepRow, now: float) -> tuple[str, str]:
    """Return (text, tooltip) of a step row's duration; open durations count up to `now`."""
    if row.started_at is None:
        return "", ""
    if row.finished_at is not None:
        seconds = row.finished_at - row.started_at
        return fmt_seconds(seconds), f"started {clock_text(row.started_at)}, took {seconds:.3f} s"
    seconds = max(0.0, now - row.started_at)
    return fmt_seconds(seconds) + " …", f"started {clock_text(row.started_at)}, still open"


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 60 else fmt_seconds(seconds)


def _lease_note(row: StepRow, now: float) -> str:
    """Who holds a leased row's lease and when it runs out (a run may be waiting for it)."""
    if row.state is not StepState.LEASED or row.lease_expires_at is None:
        return ""
    left = row.lease_expires_at - now
    when = f"expires in {_seconds(left)}" if left >= 0 else f"expired {_seconds(-left)} ago"
    until = clock_text(row.lease_expires_at) if row.lease_expires_at < 1e11 else "never"
    return (
        f'<span data-agentq="lease" style="{MUTED}" title="lease held until {esc(until)}">'
        f"leased by {short(row.worker_id or '?', 60)} · {esc_text(when)}</span>"
    )


def _attempt_cell(row: StepRow) -> str:
    if not row.recoveries:
        return str(row.attempt)
    lost = f"{row.recoveries} attempt(s) lost to crashes, not counted as attempts"
    return f'{row.attempt} <span style="{MUTED}" title="{lost}">+{row.recoveries} lost</span>'


def steps_html(
    rows: Sequence[StepRow],
    *,
    now: float,
    limit: int = 50,
    total: int | None = None,
    counts: Mapping[str, int] | None = None,
    calls: Mapping[tuple[str, int], CallCounts] | None = None,
    counted: str = "workflows",
    calls_floor: int = 0,
    workflows: Mapping[str, WorkflowRow] | None = None,
) -> str:
    """Render step rows as a table: status badges, attempt, worker, duration, reason, error.

    A step waiting on a keyed wait also shows the wait's key, details and deadline
    (`wait_html`).
    A leased row says who holds the lease and when it expires ("leased by W · expires in
    12 s"): a run of that workflow elsewhere waits for it. An attempt count shows the attempts
    lost to crashes beside it ("2 +1 lost").

    Args:
        rows: Rows to show, in display order (only the first `limit` are rendered).
        now: Unix seconds, for the duration of unfinished steps.
        limit: Maximum rows rendered.
        total: How many rows match in all (for the "n more" line); default ``len(rows)``.
        counts: How many per status (`WorkflowState` or `StepState` values), shown as a
            summary line above the table.
        calls: Durable call counts by ``(workflow_id, step_index)`` (``CallTally.steps``):
            when given, a "calls" column shows each step's (`call_counts_html`).
        counted: What `counts` counts, the summary line's first word.
        calls_floor: The event ``seq`` after which `calls` were counted (``Source.floor``):
            when non-zero each cell reads "≥ n calls" (`call_counts_html`).
        workflows: The workflows' rows by id: a failed step of a cancelled workflow is then
            shown "cancelled" (`shown_step`); without them, steps are shown as stored.
    """
    shown = rows[:limit]
    hidden = (len(rows) if total is None else total) - len(shown)
    summary = ""
    if counts:
        order = dict.fromkeys([*(s.value for s in WorkflowState), *(s.value for s in StepState)])
        parts = [f"{badge(s, f'{LABELS.get(s, s)} {counts[s]:,}')}" for s in order
                 if counts.get(s)]
        summary = (
            f'<div data-agentq="counts" style="display:flex;gap:6px;padding:2px 0 6px">'
            f'<span style="{MUTED}">{esc_text(counted)}</span>{"".join(parts)}</div>'
        )
    titles = ["workflow", "step", "status", "attempt", "worker", "duration", "reason / error"]
    if calls is not None:
        titles.insert(6, "calls")
    head = "".join(
        f'<th style="text-align:left;padding:3px 8px;border-bottom:1px solid #d1d5db">{h}</th>'
        for h in titles
    )
    body = []
    previous: str | None = None
    for row in shown:
        status = shown_step(row, workflows.get(row.workflow_id) if workflows else None)
        text, tip = _duration(row, now)
        note = _lease_note(row, now)
        if row.reason:
            note = short(row.reason, 80)
        if row.state is StepState.WAITING and row.wait_key is not None:
            note += wait_html(row, now=now)
        if row.error is not None:
            if row.state is StepState.FAILED:
                err = f'<span style="color:{COLORS["failed"][0]}">{short(row.error, 100)}</span>'
            else:  # an earlier attempt failed; this one may still succeed (or did)
                err = f'<span style="{MUTED}">retried after: {short(row.error, 90)}</span>'
            note = f"{note}<br>{err}" if note else err
        first = row.workflow_id != previous
        previous = row.workflow_id
        border = "border-top:1px solid #e5e7eb;" if first else ""
        wf_cell = short(row.workflow_id, 40) if first else ""
        calls_cell = ""
        if calls is not None:
            cell = call_counts_html(calls.get((row.workflow_id, row.step_index)),
                                    floor=calls_floor)
            calls_cell = f'<td style="padding:2px 8px">{cell}</td>'
        body.append(
            f'<tr data-agentq="step-row" data-workflow="{esc(row.workflow_id)}" '
            f'data-step="{esc(row.step_name)}" data-index="{row.step_index}" '
            f'data-status="{status}" style="{border}">'
            f'<td style="padding:2px 8px;font-weight:600">{wf_cell}</td>'
            f'<td style="padding:2px 8px">{short(row.step_name, 40)}</td>'
            f'<td style="padding:2px 8px">{badge(status)}</td>'
            f'<td style="padding:2px 8px;text-align:right">{_attempt_cell(row)}</td>'
            f'<td style="padding:2px 8px;{MUTED}">{short(row.worker_id or "", 24)}</td>'
            f'<td style="padding:2px 8px;white-space:nowrap" title="{esc(tip)}">'
            f'{esc_text(text)}</td>'
            f'{calls_cell}<td style="padding:2px 8px">{note}</td></tr>'
        )
    if not body:
        body.append(
            f'<tr><td colspan="{len(titles)}" style="{MUTED};padding:6px 8px">no steps</td></tr>'
        )
    return (
        f'<div style="{FONT}">{summary}<table data-agentq="steps" style="border-collapse:'
        f'collapse;width:100%"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        f"</table>{more_html(hidden, 'steps')}</div>"
    )
