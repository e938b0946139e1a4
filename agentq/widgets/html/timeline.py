"""The event timeline drawn as a Gantt chart: one row per workflow step, a bar per span.

Renders the tracks of `agentq.widgets.models.timeline.Timeline` (the event log folded into spans),
with the primitives of `agentq.markup`; `EventTimeline` shows it live. Durable calls are thin
bars along the bottom of their step's row, coloured by outcome (in doubt: hatched).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.markup import COLORS, FONT, MUTED, badge, clock_text, esc, fmt_seconds, more_html, short
from agentq.widgets.models.timeline import CallSpan, Span, SpanKind, StepTrack, WorkflowTrack

__all__ = ["timeline_html"]


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


def _clip(start: float, end: float, t0: float, width: float, least: float) -> tuple[float, float]:
    """Left and width in % of the window [t0, t0 + width]; width < 0 when outside it."""
    lo, hi = max(start, t0), min(end, t0 + width)
    if hi < lo:
        return 0.0, -1.0
    return 100.0 * (lo - t0) / width, max(least, 100.0 * (hi - lo) / width)


def _span_div(step: str, span: Span, t0: float, width: float, now: float) -> str:
    end = span.end if span.end is not None else max(now, span.start)
    left, size = _clip(span.start, end, t0, width, 0.4)
    if size < 0:
        return ""
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


_CALL_OUTCOMES = {"in_doubt": "in doubt (started, no outcome recorded)"}


def _call_div(step: str, call: CallSpan, t0: float, width: float, now: float) -> str:
    end = call.end if call.end is not None else max(now, call.start)
    left, size = _clip(call.start, end, t0, width, 0.3)
    if size < 0:
        return ""
    color = COLORS.get(call.outcome, COLORS["pending"])[0]
    fill = color
    if call.outcome == "in_doubt":
        fill = f"repeating-linear-gradient(90deg,{color} 0 3px,transparent 3px 5px)"
    outcome = _CALL_OUTCOMES.get(call.outcome, call.outcome)
    still = " so far" if call.end is None else ""
    title = (
        f"{step} · call {call.key} ({call.name}) · attempt {call.attempt}: {outcome} · "
        f"{fmt_seconds(end - call.start)}{still} (from {clock_text(call.start)})"
    )
    return (
        f'<div data-agentq="call" data-key="{esc(call.key)}" data-tool="{esc(call.name)}" '
        f'data-outcome="{esc(call.outcome)}" title="{esc(title)}" style="position:absolute;'
        f"left:{left:.2f}%;width:{size:.2f}%;bottom:1px;height:4px;background:{fill};"
        f'border-radius:1px;outline:1px solid #ffffffaa"></div>'
    )


def _calls(step: StepTrack, t0: float, width: float, now: float, limit: int) -> tuple[str, int]:
    """The bars of the step's latest `limit` call runs, and how many older ones are left out."""
    shown = step.calls[-limit:] if limit > 0 else []
    bars = "".join(_call_div(step.step_name, c, t0, width, now) for c in shown)
    return bars, len(step.calls) - len(shown)


_STEPS = (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600,
          7200, 21600, 43200, 86400)


def _tick_step(width: float, ticks: int = 6) -> float:
    """A round step in seconds giving at most about `ticks` ticks over `width` seconds."""
    return next((s for s in _STEPS if width / s <= ticks), width / ticks)


def _axis(t0: float, width: float, now: float) -> str:
    """The time axis: round ticks labelled in UTC clock time, and "now" when in view.

    A label at p% of the axis is shifted left by p% of its own width (centred in the middle,
    flush with either end there), so no label reaches past the axis at any width."""
    step = _tick_step(width)
    first = (t0 // step + 1) * step
    marks: list[str] = []
    for i in range(12):
        t = first + i * step
        if t >= t0 + width:
            break
        pct = 100.0 * (t - t0) / width
        label = clock_text(t).removesuffix(" UTC")
        if step < 1:
            label += f".{int((t % 1) * 100 + 0.5) % 100:02d}"
        marks.append(
            f'<span data-agentq="tick" style="position:absolute;left:{pct:.2f}%;top:0;'
            f'transform:translateX(-{pct:.2f}%);white-space:nowrap">{label}</span>'
            f'<span style="position:absolute;left:{pct:.2f}%;bottom:0;height:4px;'
            f'border-left:1px solid #9ca3af"></span>'
        )
    if t0 <= now <= t0 + width:
        pct = 100.0 * (now - t0) / width
        marks.append(
            f'<span data-agentq="now-label" style="position:absolute;left:{pct:.2f}%;top:12px;'
            f'transform:translateX(-{pct:.2f}%);color:#dc2626;'
            f'font-weight:600;white-space:nowrap">now</span>'
        )
    return (
        f'<div data-agentq="axis" data-step="{step:g}" style="position:relative;height:26px;'
        f'margin-left:178px;{MUTED};font-size:10px;border-bottom:1px solid #d1d5db">'
        f'{"".join(marks)}</div>'
    )


def _now_line(t0: float, width: float, now: float) -> str:
    if not t0 <= now <= t0 + width:
        return ""
    pct = 100.0 * (now - t0) / width
    return (
        f'<div data-agentq="now" style="position:absolute;left:{pct:.2f}%;top:-2px;bottom:-2px;'
        f'border-left:1px solid #dc2626;z-index:1"></div>'
    )


def _legend() -> str:
    items = [("running", "running"), ("completed", "completed"), ("failed", "failed"),
             ("timeout", "timed out"), ("waiting", "waiting for input"),
             ("backoff", "retry backoff"), ("lost", "worker lost"),
             ("in_doubt", "call in doubt")]
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
    max_calls: int = 40,
    zoom: tuple[float, float] = (0.0, 1.0),
) -> str:
    """Render a Gantt-like timeline: one row per workflow step, bars coloured by outcome.

    Attempts are solid bars; waits for input and retry backoffs are hatched; open spans run
    to `now` with a dashed edge. Durable calls are thin bars inside their step's row (one per
    run; a call in doubt is hatched and ends where its attempt ended; a running one runs to
    `now`). Every bar has a tooltip (``title``) with its duration; call names come from the
    label (its ``tool``, else its ``kind``, else the key), escaped.

    Args:
        workflows: Tracks to show, in display order (only the first `limit` are rendered).
        now: Unix seconds; the right end of open spans and of the time axis.
        limit: Maximum workflows rendered.
        total: How many workflows exist (for the "n more" line); default ``len(workflows)``.
        max_spans: Maximum bars per step row (the most recent); older ones are counted.
        max_calls: Maximum call bars per step row (the most recent runs); the others are
            counted in an "n more calls" note.
        zoom: The part of the whole time range drawn, as fractions ``(from, to)`` with
            ``0 <= from < to <= 1`` (the whole range runs from the first shown workflow's
            start to the later of `now` and its last event); bars are clipped to it.

    Above the rows, a time axis with round ticks (UTC clock time) and "now"; a red line marks
    "now" in every row when it is in view.

    Raises:
        ValueError: A `zoom` that is not ``0 <= from < to <= 1``.
    """
    lo, hi = zoom
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"zoom must be (from, to) with 0 <= from < to <= 1, got {zoom!r}")
    shown = list(workflows[:limit])
    hidden = (len(workflows) if total is None else total) - len(shown)
    if not shown:
        return (f'<div data-agentq="timeline" style="{FONT};{MUTED};padding:6px">'
                f"no events yet</div>")
    start = min(wf.start for wf in shown)
    full = max(max([now, *(wf.last for wf in shown)]) - start, 1e-3)
    t0, width = start + lo * full, max((hi - lo) * full, 1e-3)
    now_line = _now_line(t0, width, now)
    parts = [f'<div style="padding:0 0 6px;{MUTED}">{_legend()}</div>', _axis(t0, width, now)]
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
            call_bars, hidden_calls = _calls(step, t0, width, now, max_calls)
            bars += call_bars + now_line
            parts.append(
                f'<div data-agentq="timeline-step" data-workflow="{esc(wf.workflow_id)}" '
                f'data-step="{esc(step.step_name)}" style="display:flex;align-items:center;'
                f'gap:8px;height:18px"><div style="width:170px;text-align:right;overflow:hidden;'
                f'white-space:nowrap">{label}</div><div style="position:relative;flex:1;'
                f'height:16px;background:var(--jp-layout-color2,#f3f4f6);border-radius:3px">'
                f"{bars}</div></div>"
            )
            if hidden_calls:
                parts.append(
                    f'<div data-agentq="more-calls" data-workflow="{esc(wf.workflow_id)}" '
                    f'data-step="{esc(step.step_name)}" data-hidden="{hidden_calls}" '
                    f'style="margin-left:178px;{MUTED};font-size:10px;font-style:italic">… '
                    f"{hidden_calls} more calls not drawn (the latest {max_calls} are)</div>"
                )
    parts.append(
        f'<div style="display:flex;justify-content:space-between;margin-left:178px;{MUTED};'
        f'font-size:11px"><span>{clock_text(t0)}</span><span>+{fmt_seconds(width)}</span></div>'
    )
    if (lo, hi) != (0.0, 1.0):
        parts.append(
            f'<div data-agentq="zoomed" style="margin-left:178px;{MUTED};font-size:10px">zoomed: '
            f"{100 * lo:.0f}-{100 * hi:.0f}% of {fmt_seconds(full)}</div>"
        )
    parts.append(more_html(hidden, "workflows"))
    return f'<div data-agentq="timeline" style="{FONT}">{"".join(parts)}</div>'
