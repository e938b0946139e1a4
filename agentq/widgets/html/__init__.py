"""Pure HTML renderers of snapshots: lanes, step rows, the event timeline, approvals, reprs.

Every function here takes plain values (no widgets, no I/O, no clock: "now" is an argument) and
returns an HTML string, so they are tested without a kernel and need no ipywidgets. In reading
order:

- `agentq.markup` (below every layer): escaping, colours, badges, durations, "n more" lines;
- ``tables``: `lanes_html` and `steps_html` (and `queue_stats_html`);
- ``timeline``: `timeline_html`, the Gantt chart of `agentq.widgets._timeline` tracks;
- ``results``: `approval_html`, `outcome_html`, and `run_result_html` / `step_status_html`,
  which are the values' own ``_repr_html_`` (built by the workflow model from `agentq.markup`).

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

from agentq.markup import COLORS, badge, error_html, fmt_seconds, more_html
from agentq.widgets.html.results import (
    approval_html,
    outcome_html,
    run_result_html,
    step_status_html,
)
from agentq.widgets.html.tables import LaneSnapshot, lanes_html, queue_stats_html, steps_html
from agentq.widgets.html.timeline import timeline_html

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
