"""Runs and the steps waiting for a person: approval labels, click outcomes, run results.

`approval_html` and `outcome_html` are what `ApprovalPanel` shows. `run_result_html` and
`step_status_html` give the same HTML as the values' own ``_repr_html_`` (which the workflow
model builds from `agentq.markup`, so it needs nothing from this package).
"""

from __future__ import annotations

from agentq.markup import COLORS, FONT, MUTED, badge, esc, short
from agentq.store import StepRow
from agentq.workflows import RunResult, StepStatus

__all__ = ["approval_html", "outcome_html", "run_result_html", "step_status_html"]


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
    """Render a `RunResult`: status, step, reason and outputs (its ``_repr_html_``)."""
    return result._repr_html_()


def step_status_html(status: StepStatus) -> str:
    """Render a `StepStatus` variant as a badge with its details (its ``_repr_html_``)."""
    return status._repr_html_()
