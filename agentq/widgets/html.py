"""Pure HTML renderers of snapshots: lanes, step rows, the event timeline, approvals, reprs.

Every function here takes plain values (no widgets, no I/O, no clock: "now" is an argument) and
returns an HTML string, so they are tested without a kernel and reused by ``_repr_html_``.
Every user-supplied string (ids, step names, reasons, errors, payloads) goes through
`html.escape`; a step named ``<img src=x onerror=alert(1)>`` shows as text. Long lists are
capped, with a visible "n more" line. Elements carry stable ``data-agentq`` attributes for
browser tests and scripts:

================  =========================================================================
data-agentq       other attributes
================  =========================================================================
lane              data-priority, data-running, data-permits, data-queued, data-capacity,
                  data-completed, data-failed
steps             (the table)
step-row          data-workflow, data-step, data-index, data-status (a `StepState` value)
more              data-hidden (how many items are not shown)
timeline          (the container)
timeline-workflow data-workflow, data-state
timeline-step     data-workflow, data-step
span              data-kind (run, wait, backoff), data-outcome
approval          data-workflow, data-step
approval-outcome  data-workflow, data-step, data-outcome (pending, completed, waiting,
                  failed, cancelled, error)
approval-log      (the latest outcomes, newest first)
run-result        data-workflow, data-status
error             (a refresher or resume error)
================  =========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentq.store import StepRow, StepState
from agentq.widgets._markup import (
    COLORS,
    FONT,
    LABELS,
    MUTED,
    badge,
    clock_text,
    error_html,
    esc,
    fmt_seconds,
    json_text,
    more_html,
    short,
)
from agentq.widgets._timeline import Span, SpanKind, WorkflowTrack
from agentq.workflows.model import (
    RunResult,
    StepCompleted,
    StepFailed,
    StepLeased,
    StepPending,
    StepStatus,
    StepWaiting,
)

__all__ = [
    "COLORS",
    "LaneSnapshot",
    "approval_html",
    "badge",
    "error_html",
    "fmt_seconds",
    "lanes_html",
    "more_html",
    "outcome_html",
    "queue_stats_html",
    "run_result_html",
    "step_status_html",
    "steps_html",
    "timeline_html",
]


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
        f'width:{pct:.1f}%;height:100%;background:{color}"></span></span> {esc(label)}</td>'
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
            f'<tr {attrs}><td style="padding:3px 6px"><b>{esc(name)}</b></td>{running}{queued}'
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
    """Render a `QueueStats` snapshot (for its ``_repr_html_``)."""
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


def steps_html(
    rows: Sequence[StepRow],
    *,
    now: float,
    limit: int = 50,
    total: int | None = None,
    counts: Mapping[str, int] | None = None,
) -> str:
    """Render step rows as a table: status badges, attempt, worker, duration, reason, error.

    Args:
        rows: Rows to show, in display order (only the first `limit` are rendered).
        now: Unix seconds, for the duration of unfinished steps.
        limit: Maximum rows rendered.
        total: How many rows match in all (for the "n more" line); default ``len(rows)``.
        counts: Steps per status, shown as a summary line above the table.
    """
    shown = rows[:limit]
    hidden = (len(rows) if total is None else total) - len(shown)
    summary = ""
    if counts:
        parts = [f"{badge(s.value, f'{LABELS.get(s.value, s.value)} {counts[s.value]}')}"
                 for s in StepState if counts.get(s.value)]
        summary = f'<div style="display:flex;gap:6px;padding:2px 0 6px">{"".join(parts)}</div>'
    head = "".join(
        f'<th style="text-align:left;padding:3px 8px;border-bottom:1px solid #d1d5db">{h}</th>'
        for h in ("workflow", "step", "status", "attempt", "worker", "duration", "reason / error")
    )
    body = []
    previous: str | None = None
    for row in shown:
        status = row.state.value
        text, tip = _duration(row, now)
        note = ""
        if row.reason:
            note = short(row.reason, 80)
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
        body.append(
            f'<tr data-agentq="step-row" data-workflow="{esc(row.workflow_id)}" '
            f'data-step="{esc(row.step_name)}" data-index="{row.step_index}" '
            f'data-status="{status}" style="{border}">'
            f'<td style="padding:2px 8px;font-weight:600">{wf_cell}</td>'
            f'<td style="padding:2px 8px">{short(row.step_name, 40)}</td>'
            f'<td style="padding:2px 8px">{badge(status)}</td>'
            f'<td style="padding:2px 8px;text-align:right">{row.attempt}</td>'
            f'<td style="padding:2px 8px;{MUTED}">{short(row.worker_id or "", 24)}</td>'
            f'<td style="padding:2px 8px;white-space:nowrap" title="{esc(tip)}">{esc(text)}</td>'
            f'<td style="padding:2px 8px">{note}</td></tr>'
        )
    if not body:
        body.append(f'<tr><td colspan="7" style="{MUTED};padding:6px 8px">no steps</td></tr>')
    return (
        f'<div style="{FONT}">{summary}<table data-agentq="steps" style="border-collapse:'
        f'collapse;width:100%"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        f"</table>{more_html(hidden, 'steps')}</div>"
    )


def _span_title(step: str, span: Span, now: float) -> str:
    end = span.end if span.end is not None else now
    took = fmt_seconds(end - span.start)
    if span.kind == SpanKind.RUN:
        what = f"attempt {span.attempt}: {span.outcome}"
    elif span.kind == SpanKind.WAIT:
        what = f"waited for input ({span.outcome})"
    else:
        what = "backoff before the next attempt"
    detail = f" — {span.detail}" if span.detail else ""
    still = " so far" if span.end is None else ""
    return f"{step} · {what}{detail} · {took}{still} (from {clock_text(span.start)})"


def _span_div(step: str, span: Span, t0: float, width: float, now: float) -> str:
    end = span.end if span.end is not None else now
    left = 100.0 * (span.start - t0) / width
    size = max(0.4, 100.0 * (end - span.start) / width)
    color = COLORS.get(span.outcome, COLORS["pending"])[0]
    if span.kind == SpanKind.RUN:
        fill, top = color, "2px"
    else:  # waits and backoffs: hatched, thinner
        fill = f"repeating-linear-gradient(45deg,{color} 0 4px,{color}55 4px 8px)"
        top = "4px"
    edge = "border-right:2px dashed #1f2937;" if span.end is None else ""
    return (
        f'<div data-agentq="span" data-kind="{span.kind}" data-outcome="{esc(span.outcome)}" '
        f'title="{esc(_span_title(step, span, now))}" style="position:absolute;left:{left:.2f}%;'
        f"width:{size:.2f}%;top:{top};bottom:{top};background:{fill};border-radius:3px;"
        f'{edge}"></div>'
    )


def _legend() -> str:
    items = [("running", "running"), ("completed", "completed"), ("failed", "failed"),
             ("timeout", "timed out"), ("waiting", "waiting for input"),
             ("backoff", "retry backoff"), ("lost", "worker lost")]
    return "".join(
        f'<span style="display:inline-flex;align-items:center;gap:3px;margin-right:10px">'
        f'<span style="width:10px;height:10px;border-radius:2px;background:{COLORS[k][0]}">'
        f"</span>{label}</span>"
        for k, label in items
    )


def timeline_html(
    workflows: Sequence[WorkflowTrack],
    *,
    now: float,
    limit: int = 12,
    total: int | None = None,
    max_spans: int = 60,
) -> str:
    """Render a Gantt-like timeline: one row per workflow step, bars coloured by outcome.

    Attempts are solid bars; waits for input and retry backoffs are hatched; open spans run
    to `now` with a dashed edge. Every bar has a tooltip (``title``) with its duration.

    Args:
        workflows: Tracks to show, in display order (only the first `limit` are rendered).
        now: Unix seconds; the right end of open spans and of the time axis.
        limit: Maximum workflows rendered.
        total: How many workflows exist (for the "n more" line); default ``len(workflows)``.
        max_spans: Maximum bars per step row (the most recent); older ones are counted.
    """
    shown = list(workflows[:limit])
    hidden = (len(workflows) if total is None else total) - len(shown)
    if not shown:
        return (f'<div data-agentq="timeline" style="{FONT};{MUTED};padding:6px">'
                f"no events yet</div>")
    t0 = min(wf.start for wf in shown)
    t1 = max([now, *(wf.last for wf in shown)])
    width = max(t1 - t0, 1e-3)
    parts = [f'<div style="padding:0 0 6px;{MUTED}">{_legend()}</div>']
    for wf in shown:
        end = wf.end if wf.end is not None else now
        parts.append(
            f'<div data-agentq="timeline-workflow" data-workflow="{esc(wf.workflow_id)}" '
            f'data-state="{esc(wf.state)}" style="display:flex;gap:8px;align-items:center;'
            f'padding:4px 0 2px;border-top:1px solid #e5e7eb"><b>{short(wf.workflow_id, 60)}'
            f"</b>{badge(wf.state)}<span style=\"{MUTED}\">{fmt_seconds(end - wf.start)}"
            f"</span></div>"
        )
        for index in sorted(wf.steps):
            step = wf.steps[index]
            spans = step.spans[-max_spans:]
            older = len(step.spans) - len(spans)
            label = short(step.step_name, 24)
            if older:
                label += f' <span style="{MUTED}">(+{older} earlier)</span>'
            bars = "".join(_span_div(step.step_name, s, t0, width, now) for s in spans)
            parts.append(
                f'<div data-agentq="timeline-step" data-workflow="{esc(wf.workflow_id)}" '
                f'data-step="{esc(step.step_name)}" style="display:flex;align-items:center;'
                f'gap:8px;height:18px"><div style="width:170px;text-align:right;overflow:hidden;'
                f'white-space:nowrap">{label}</div><div style="position:relative;flex:1;'
                f'height:16px;background:var(--jp-layout-color2,#f3f4f6);border-radius:3px">'
                f"{bars}</div></div>"
            )
    parts.append(
        f'<div style="display:flex;justify-content:space-between;margin-left:178px;{MUTED};'
        f'font-size:11px"><span>{clock_text(t0)}</span><span>+{fmt_seconds(width)}</span></div>'
    )
    parts.append(more_html(hidden, "workflows"))
    return f'<div data-agentq="timeline" style="{FONT}">{"".join(parts)}</div>'


def approval_html(row: StepRow) -> str:
    """Render the label of one waiting step: workflow, step and the reason it waits."""
    reason = short(row.reason or "(no reason given)", 200)
    return (
        f'<div data-agentq="approval" data-workflow="{esc(row.workflow_id)}" '
        f'data-step="{esc(row.step_name)}" style="{FONT}">{badge("waiting")} '
        f"<b>{short(row.workflow_id, 50)}</b> · {short(row.step_name, 40)}"
        f'<div style="padding:2px 0 0 4px">{reason}</div></div>'
    )


def outcome_html(
    verb: str,
    workflow_id: str,
    step: str,
    result: RunResult | None,
    error: BaseException | None = None,
) -> str:
    """Render what a click did to a waiting step: the run's new status, or the error raised.

    Args:
        verb: "approve" or "reject".
        workflow_id: The workflow resumed.
        step: The step resumed.
        result: What `WorkflowEngine.resume` returned, or None while it runs (or on error).
        error: What it raised, if anything.
    """
    head = (
        f'data-agentq="approval-outcome" data-workflow="{esc(workflow_id)}" data-step="{esc(step)}"'
    )
    who = f"<b>{short(workflow_id, 50)}</b> step {short(step, 40)}"
    done = {"approve": "approved", "reject": "rejected"}.get(verb, verb)
    if error is not None:
        return (
            f'<div {head} data-outcome="error" style="{FONT};color:{COLORS["error"][0]}">'
            f"could not {esc(verb)} {who}: {esc(type(error).__name__)}: {short(error, 200)}</div>"
        )
    if result is None:
        return (
            f'<div {head} data-outcome="pending" style="{FONT};{MUTED}">resuming {who}…</div>'
        )
    status = result.status.value
    where = f" at {short(result.step, 40)}" if result.step and status != "completed" else ""
    why = f" ({short(result.reason, 100)})" if result.reason else ""
    return (
        f'<div {head} data-outcome="{status}" style="{FONT}">{esc(done)} {who} → workflow '
        f"{badge(status)}{where}{why}</div>"
    )


def run_result_html(result: RunResult) -> str:
    """Render a `RunResult` (for its ``_repr_html_``): status, step, reason and outputs."""
    status = result.status.value
    lines = [
        f"<b>{short(result.workflow_id, 80)}</b> {badge(status)}",
    ]
    if result.step:
        lines.append(f"step <b>{short(result.step, 60)}</b>")
    if result.reason:
        lines.append(f'<span style="{MUTED}">reason:</span> {short(result.reason, 200)}')
    for i, output in enumerate(result.outputs[:20]):
        lines.append(f'<span style="{MUTED}">output {i}:</span> <code>{json_text(output)}</code>')
    if len(result.outputs) > 20:
        lines.append(more_html(len(result.outputs) - 20, "outputs"))
    return (
        f'<div data-agentq="run-result" data-workflow="{esc(result.workflow_id)}" '
        f'data-status="{status}" style="{FONT};border-left:3px solid '
        f'{COLORS.get(status, COLORS["pending"])[0]};padding:2px 10px">'
        + "<br>".join(lines)
        + "</div>"
    )


def step_status_html(status: StepStatus) -> str:
    """Render a `StepStatus` variant (for its ``_repr_html_``) as a badge with its details."""
    match status:
        case StepCompleted(output=output):
            return f"{badge('completed')} <code>{json_text(output)}</code>"
        case StepFailed(reason=reason, attempt=attempt):
            return f"{badge('failed')} after {attempt} attempt(s): {short(reason, 200)}"
        case StepWaiting(reason=reason):
            return f"{badge('waiting')} {short(reason, 200)}"
        case StepLeased(worker_id=worker, expires_at=expires):
            return f"{badge('leased')} by {short(worker, 60)} until {clock_text(expires)}"
        case StepPending():
            return badge("pending")
    return esc(repr(status))
