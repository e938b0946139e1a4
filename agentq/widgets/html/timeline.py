"""The event timeline drawn as a Gantt chart: one row per workflow step, a bar per span.

Renders the tracks of `agentq.widgets._timeline.Timeline` (the event log folded into spans),
with the primitives of `agentq.markup`; `EventTimeline` shows it live. Durable calls are thin
bars along the bottom of their step's row, coloured by outcome (in doubt: hatched).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentq.markup import COLORS, FONT, MUTED, badge, clock_text, esc, fmt_seconds, more_html, short
from agentq.widgets._timeline import CallSpan, Span, SpanKind, StepTrack, WorkflowTrack

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


_CALL_OUTCOMES = {"in_doubt": "in doubt (started, no outcome recorded)"}


def _call_div(step: str, call: CallSpan, t0: float, width: float, now: float) -> str:
    end = call.end if call.end is not None else now
    left = 100.0 * (call.start - t0) / width
    size = max(0.3, 100.0 * (end - call.start) / width)
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
            call_bars, hidden_calls = _calls(step, t0, width, now, max_calls)
            bars += call_bars
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
    parts.append(more_html(hidden, "workflows"))
    return f'<div data-agentq="timeline" style="{FONT}">{"".join(parts)}</div>'
