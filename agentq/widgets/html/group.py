"""`group_progress_html`: a run group's `GroupProgress` as a progress bar and its figures.

A bar of one segment per state (completed, failed, cancelled, running, waiting, pending,
coloured as the badges), the counts, tokens and cost so far, the rate and the time left, and
the failures with their reasons (at most `limit`, then an "n more" line). Pure: a snapshot
in, HTML out; every key and reason escaped.
"""

from __future__ import annotations

from agentq.markup import COLORS, FONT, MUTED, badge, esc, fmt_seconds, more_html
from agentq.widgets.models.group import GroupProgress

__all__ = ["group_progress_html", "progress_text"]

_ORDER = ("completed", "failed", "cancelled", "running", "waiting", "pending")


def progress_text(progress: GroupProgress) -> str:
    """One line: ``120/200 ended · 3 failed · 40 running · 1 200 tokens · $0.04 · 1 m 10 s
    left`` (the parts that apply)."""
    s = progress.status
    parts = [f"{s.ended}/{s.total} ended"]
    parts += [f"{s[name]} {name}" for name in _ORDER[1:] if s[name]]
    total = sum(v for k, v in progress.tokens.items() if k in ("input_tokens", "output_tokens"))
    if total:
        parts.append(f"{total:,} tokens")
    if progress.cost is not None:
        parts.append(f"${progress.cost:,.4f}")
    if progress.rate is not None:
        parts.append(f"{progress.rate:.2f}/s")
    if progress.eta is not None and not progress.done:
        parts.append(f"{fmt_seconds(progress.eta)} left")
    return " · ".join(parts)


def group_progress_html(progress: GroupProgress, limit: int = 10) -> str:
    """Return the progress of a run group as HTML (see the module docstring).

    Args:
        progress: The snapshot.
        limit: At most this many failures listed.
    """
    s = progress.status
    total = max(s.total, 1)
    segments = "".join(
        f'<div data-agentq="group-segment" data-state="{name}" data-count="{s[name]}" '
        f'style="width:{100 * s[name] / total:.3f}%;background:{COLORS[name][0]}" '
        f'title="{s[name]} {name}"></div>'
        for name in _ORDER if s[name]
    )
    counts = " ".join(badge(name, f"{s[name]} {name}") for name in _ORDER if s[name])
    failures = "".join(
        f'<li data-agentq="group-failure" data-key="{esc(f.key)}" data-state="{f.state}">'
        f"<b>{esc(f.key)}</b> {badge(f.state)} {esc(f.reason)}</li>"
        for f in progress.failures[:limit]
    )
    listed = (
        f'<ul style="margin:4px 0 0 0;padding-left:18px">{failures}</ul>'
        + more_html(len(progress.failures) - limit, "failures")
        if failures else ""
    )
    cost = "" if progress.cost is None else f' data-cost="{progress.cost:.6f}"'
    return (
        f'<div data-agentq="group-progress" data-group="{esc(progress.group_id)}" '
        f'data-total="{s.total}" data-ended="{s.ended}"{cost} style="{FONT}">'
        f"<div><b>{esc(progress.group_id)}</b> "
        f'<span style="{MUTED}">{esc(progress_text(progress))}</span></div>'
        '<div style="display:flex;height:12px;border-radius:6px;overflow:hidden;'
        f'background:#f3f4f6;margin:4px 0">{segments}</div>'
        f"<div>{counts}</div>{listed}</div>"
    )
