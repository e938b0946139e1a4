"""Durable call counts: a step's ("3 calls · 1 failed · 1 in doubt") and the dashboard's totals.

Pure functions of `agentq.widgets.models.calls.CallCounts` snapshots; `steps_html` puts
`call_counts_html` in each step row, and `Dashboard` shows `call_totals_html` above the steps.
"""

from __future__ import annotations

from agentq.markup import COLORS, FONT, MUTED, esc, esc_text
from agentq.widgets.models.calls import CallCounts

__all__ = ["call_counts_html", "call_totals_html"]


def _part(count: int, text: str, status: str | None = None) -> str:
    style = "" if status is None else f' style="color:{COLORS[status][0]};font-weight:600"'
    return f"<span{style}>{count} {esc_text(text)}</span>"


def call_counts_html(counts: CallCounts | None, *, floor: int = 0) -> str:
    """Render one step's calls compactly, e.g. ``3 calls · 1 failed · 1 in doubt``.

    Failed calls (whose latest run failed), running calls and calls in doubt are named only
    when there are any; the tooltip gives every count. Returns '' for a step without calls.

    Args:
        counts: The step's counts (``CallTally.steps.get((workflow_id, step_index))``).
        floor: The event ``seq`` after which the counts were taken (``Source.floor``); when
            non-zero the counts may be partial and read "≥ 3 calls" (the Detail pane reads
            the calls table and gives the exact figures).
    """
    if counts is None or counts.calls <= 0:
        return ""
    noun = "call" if counts.calls == 1 else "calls"
    parts = [f"{'≥ ' if floor else ''}{counts.calls} {noun}"]
    if counts.failed:
        parts.append(_part(counts.failed, "failed", "failed"))
    if counts.running:
        parts.append(_part(counts.running, "running", "running"))
    if counts.in_doubt:
        parts.append(_part(counts.in_doubt, "in doubt", "in_doubt"))
    title = (
        f"{counts.calls} {noun}, {counts.runs} runs: {counts.completed} completed, "
        f"{counts.failed} failed, {counts.running} running, {counts.in_doubt} in doubt "
        "(started, no outcome recorded, attempt over)"
    ) + (f"; counted from event #{floor + 1:,} on (earlier events not read)" if floor else "")
    return (
        f'<span data-agentq="call-counts" data-calls="{counts.calls}" data-runs="{counts.runs}" '
        f'data-failed="{counts.failed}" data-running="{counts.running}" '
        f'data-in-doubt="{counts.in_doubt}" title="{esc(title)}" style="white-space:nowrap">'
        f"{' · '.join(parts)}</span>"
    )


def call_totals_html(
    totals: CallCounts, answered_from_log: int | None = None, *, floor: int = 0
) -> str:
    """Render the call totals: runs, failed runs, calls in doubt, and the calls and waits
    replayed from the log (``engine.answered_from_log`` counts both: an approval answered by
    a person counts once each time its step runs again; issue 22 fault 6).

    Args:
        totals: Counts over every step (``CallTally.totals``).
        answered_from_log: ``engine.answered_from_log`` (calls and waits answered from the
            log instead of running, counted by this engine since it started), or None to
            leave it out.
        floor: The event ``seq`` after which the counts were taken (``Source.floor``): when
            non-zero the line says so ("in the events after #95,000"), since the totals
            then leave out the log's older events (review 14 #8).
    """
    parts = [
        _part(totals.runs, "run" if totals.runs == 1 else "runs"),
        _part(totals.failed_runs, "failed", "failed" if totals.failed_runs else None),
        _part(totals.in_doubt, "in doubt", "in_doubt" if totals.in_doubt else None),
    ]
    answered = ""
    if answered_from_log is not None:
        parts.append(_part(answered_from_log, "calls and waits replayed from the log",
                           "completed"))
        answered = f' data-answered="{answered_from_log}"'
    title = (
        f"{totals.calls} durable calls; runs: CallStarted events; failed: CallFailed events; "
        "in doubt: started, no outcome recorded, attempt over; replayed from the log: calls this "
        "engine did not run again and waits (approvals) it did not ask again, their recorded "
        "results and answers read back when a step ran again"
    )
    scope = ""
    if floor:
        scope = (f' <span data-agentq="calls-scope" data-floor="{floor}">in the events after '
                 f"#{floor:,} (older ones not read)</span>")
    return (
        f'<div data-agentq="call-totals" data-calls="{totals.calls}" data-runs="{totals.runs}" '
        f'data-failed="{totals.failed_runs}" data-in-doubt="{totals.in_doubt}"{answered} '
        f'title="{esc(title)}" style="{FONT};padding:2px 0 4px"><span style="{MUTED}">'
        f"durable calls{scope}:</span> {' · '.join(parts)}</div>"
    )
