"""Runs and the steps waiting for a person: approval labels, click outcomes, run results.

`approval_html` and `outcome_html` are what `ApprovalPanel` shows; `wait_html` (a keyed wait's
key, details and deadline) is in both the panel and the step table. `run_result_html` and
`step_status_html` give the same HTML as the values' own ``_repr_html_`` (which the workflow
model builds from `agentq.markup`, so it needs nothing from this package).
"""

from __future__ import annotations

from typing import Any

from agentq.markup import COLORS, FONT, MUTED, badge, clock_text, esc, esc_text, json_text, short
from agentq.store import StepRow
from agentq.workflows import Recorded, RunResult, StepStatus

__all__ = [
    "approval_html",
    "countdown_text",
    "outcome_html",
    "run_result_html",
    "step_status_html",
    "wait_html",
]


def _when(seconds: float) -> str:
    try:
        return clock_text(seconds)
    except (OverflowError, OSError, ValueError):  # beyond what datetime holds
        return f"{seconds:.0f} (Unix seconds)"


def _details(details: dict[str, Any], limit: int) -> str:
    # The tool, when the details name one, then the rest as JSON (escaped, shortened).
    tool = details.get("tool")
    rest = {k: v for k, v in details.items() if k != "tool"} if tool is not None else details
    parts = [] if tool is None else [f"tool <b>{short(tool, 40)}</b>"]
    if rest:
        args = rest.get("args") if list(rest) == ["args"] else rest
        parts.append(f"<code>{json_text(args, limit)}</code>")
    return " ".join(parts)


def countdown_text(seconds: float) -> str:
    """Format the time left before a deadline in whole seconds: ``42 s``, ``3 m 05 s``."""
    left = int(seconds)
    if left < 1:
        return "<1 s"
    if left < 60:
        return f"{left} s"
    if left < 3600:
        return f"{left // 60} m {left % 60:02d} s"
    return f"{left // 3600} h {left % 3600 // 60:02d} m"


def wait_html(
    row: StepRow, *, now: float | None = None, limit: int = 120, countdown: bool = False
) -> str:
    """Render what a keyed wait (``ctx.wait_for_input``) asks: its key, details, deadline.

    Returns '' for a step that is not on a keyed wait (a step-level ``WaitForInput``).
    Every value is escaped; the details are shown as the tool they name (``details["tool"]``)
    and the rest as JSON, shortened to `limit` characters (the full text in a tooltip).

    Args:
        row: The step's projection row (``wait_key``, ``wait_details``, ``wait_deadline``).
        now: Unix seconds; when given, a deadline already passed is marked so.
        limit: Maximum characters of the details' JSON.
        countdown: With `now`, also say how long is left ("in 42 s", whole seconds): for a
            view redrawn every tick (the approval panel), not for one redrawn on events only.
    """
    if row.wait_key is None:
        return ""
    parts = [f"key <code>{short(row.wait_key, 60)}</code>"]
    if row.wait_details:
        parts.append(_details(row.wait_details, limit))
    if row.wait_deadline is not None:
        passed = now is not None and now >= row.wait_deadline
        note = " (passed)" if passed else ""
        if countdown and now is not None and not passed:
            left = row.wait_deadline - now
            note = (f' <span data-agentq="countdown" data-left="{int(left)}">(in '
                    f"{countdown_text(left)})</span>")
        parts.append(f"answer by {esc_text(_when(row.wait_deadline))}{note}")
    deadline = "" if row.wait_deadline is None else f' data-deadline="{row.wait_deadline}"'
    return (
        f'<div data-agentq="wait" data-key="{esc(row.wait_key)}"{deadline} '
        f'style="{MUTED};font-size:11px">{" · ".join(parts)}</div>'
    )


def approval_html(row: StepRow, *, now: float | None = None) -> str:
    """Render the label of one waiting step: workflow, step and the reason it waits.

    For a keyed wait (``ctx.wait_for_input``) also its key, details (the tool and its
    arguments, say) and deadline: see `wait_html`; with `now` (Unix seconds), the deadline's
    countdown ("answer by 12:00:05 UTC (in 42 s)").
    """
    reason = short(row.reason or "(no reason given)", 200)
    wait = wait_html(row, now=now, limit=200, countdown=True)
    key = "" if row.wait_key is None else f' data-key="{esc(row.wait_key)}"'
    return (
        f'<div data-agentq="approval" data-workflow="{esc(row.workflow_id)}" '
        f'data-step="{esc(row.step_name)}"{key} style="{FONT}">{badge("waiting")} '
        f"<b>{short(row.workflow_id, 50)}</b> · {short(row.step_name, 40)}"
        f'<div style="padding:2px 0 0 4px">{reason}{wait}</div></div>'
    )


def outcome_html(
    verb: str,
    workflow_id: str,
    step: str,
    result: RunResult | Recorded | None,
    error: BaseException | None = None,
    *,
    refused: bool = False,
) -> str:
    """Render what a click did to a waiting step: the run's new status, or the error raised.

    Args:
        verb: "approve" or "reject".
        workflow_id: The workflow resumed.
        step: The step resumed.
        result: What `WorkflowEngine.resume` returned (a `Recorded` when the engine does not
            hold the workflow's definition), or None while it runs (or on error).
        error: What it raised, if anything.
        refused: The run asks the same keyed wait again (the answer did not fit, say
            arguments of the wrong type): said as "not accepted" with the run's reason,
            never as "approved" (issue 22 fault 6).
    """
    head = (
        f'data-agentq="approval-outcome" data-workflow="{esc(workflow_id)}" data-step="{esc(step)}"'
    )
    who = f"<b>{short(workflow_id, 50)}</b> step {short(step, 40)}"
    done = {"approve": "approved", "reject": "rejected"}.get(verb, verb)
    if error is not None:
        return (
            f'<div {head} data-outcome="error" style="{FONT};color:{COLORS["error"][0]}">'
            f"could not {esc_text(verb)} {who}: {esc_text(type(error).__name__)}: "
            f"{short(error, 200)}</div>"
        )
    if result is None:
        return (
            f'<div {head} data-outcome="pending" style="{FONT};{MUTED}">resuming {who}…</div>'
        )
    if isinstance(result, Recorded):
        return (
            f'<div {head} data-outcome="recorded" style="{FONT}">{esc_text(done)} {who}: recorded; '
            f"an engine serving definition {short(result.definition, 40)} runs it on</div>"
        )
    status = result.status.value
    if refused:
        why = short(result.reason or "the run asks again", 200)
        return (
            f'<div {head} data-outcome="refused" style="{FONT};color:{COLORS["error"][0]}">'
            f"not accepted: {who} asks again: {why}</div>"
        )
    where = f" at {short(result.step, 40)}" if result.step and status != "completed" else ""
    why = f" ({short(result.reason, 100)})" if result.reason else ""
    return (
        f'<div {head} data-outcome="{status}" style="{FONT}">{esc_text(done)} {who} → workflow '
        f"{badge(status)}{where}{why}</div>"
    )


def run_result_html(result: RunResult) -> str:
    """Render a `RunResult`: status, step, reason and outputs (its ``_repr_html_``)."""
    return result._repr_html_()


def step_status_html(status: StepStatus) -> str:
    """Render a `StepStatus` variant as a badge with its details (its ``_repr_html_``)."""
    return status._repr_html_()
