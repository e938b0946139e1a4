"""Pure HTML renderers of snapshots: lanes, step rows, the event timeline, approvals, reprs.

Every function here takes plain values (no widgets, no I/O, no clock: "now" is an argument) and
returns an HTML string, so they are tested without a kernel and need no ipywidgets. In reading
order:

- `agentq.markup` (below every layer): escaping, colours, badges, durations, "n more" lines;
- ``calls``: `call_counts_html` (a step's durable calls) and `call_totals_html` (all of them,
  with the calls answered from the log), from `agentq.widgets.models.calls` counts;
- ``results``: `approval_html`, `wait_html` (a keyed wait's key, details and deadline),
  `outcome_html`, and `run_result_html` / `step_status_html`, which are the values' own
  ``_repr_html_`` (built by the workflow model from `agentq.markup`);
- ``tables``: `lanes_html` and `steps_html` (and `queue_stats_html`);
- ``schedules``: `schedules_html`, the store's schedules with their next ticks;
- ``timeline``: `timeline_html`, the Gantt chart of `agentq.widgets.models.timeline` tracks;
- ``detail``: `workflow_detail_html`, `step_detail_html`, `call_detail_html` of a
  `agentq.widgets.models.detail.DetailSnapshot`, and `json_html` (pretty JSON, long values folded in
  ``<details>``, which opens without JavaScript);
- ``group``: `group_progress_html` (a run group's progress bar, counts, failures) and
  `progress_text` (its one-line summary);
- ``conversation``: `conversation_html` and its parts (`head_html`, `turn_html`, `tool_html`)
  of an agent run's `agentq.widgets.models.conversation.Conversation`, `compare_html` (two
  runs side by side) and `events_html` (a page of a workflow's events);
- ``tree``: `tree_html` (a run's tree of `agentq.widgets.models.tree` nodes, nested ``<details>``)
  and `run_tree_html` (rows in, tree out).

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
call-counts       data-calls, data-runs, data-failed, data-running, data-in-doubt (a step's)
call-totals       data-calls, data-runs, data-failed (runs), data-in-doubt, data-answered
wait              data-key, data-deadline (Unix seconds; absent without a deadline)
more              data-hidden (how many items are not shown)
group-progress    data-group, data-total, data-ended, data-cost (only given prices)
group-segment     data-state, data-count (a state's part of the bar)
group-failure     data-key, data-state
schedules         (the table of schedules)
schedule          data-name, data-next-tick (Unix seconds)
timeline          (the container)
timeline-workflow data-workflow, data-state
timeline-step     data-workflow, data-step
span              data-kind (run, wait, backoff), data-outcome
call              data-key, data-tool, data-outcome (running, completed, failed, in_doubt)
more-calls        data-workflow, data-step, data-hidden (call bars not drawn)
approval          data-workflow, data-step, data-key (a keyed wait's)
approval-outcome  data-workflow, data-step, data-outcome (pending, completed, waiting,
                  failed, cancelled, error)
approval-log      (the latest outcomes, newest first)
bulk-matches      data-count (the waits matching the bulk filter); bulk-match: data-workflow,
                  data-step, data-key (one listed wait)
bulk-confirm      data-action (approve, deny), data-count (the question before a bulk answer)
bulk-summary      data-answered, data-skipped, data-failed; bulk-outcome: data-workflow,
                  data-outcome (skipped, failed); bulk-error (a failed read of the waits)
run-result        data-workflow, data-status
error             (a refresher or resume error)
detail            data-kind (workflow, step, call), data-workflow, data-step, data-index,
                  data-key
detail-step       data-index (a step's line in a workflow's detail)
detail-call       data-key (a call's line in a workflow's or step's detail)
attempt           data-attempt, data-outcome (a step's attempt in its detail)
detail-error      (an error's type and message); traceback: its folded traceback
folded            data-chars (a long value folded in ``<details>``)
usage             (a call's usage figures)
tree              data-workflow (a run's tree)
tree-node         data-node (``w``, ``s:<index>``, ``c:<key>``), data-kind (workflow, step,
                  model, call, wait), data-state; a ``<details>`` when it has children
tree-label        data-select (the node id a click selects)
tree-detail       (the export's folded detail view of a node with children)
conversation      data-run (an agent run's conversation view)
final-answer      (the run's answer; data-pending="1" while it has none); run-error
run-totals        data-input-tokens, data-output-tokens, data-cost ('' when unknown)
lineage           data-parent, data-at (a fork's)
prompt            (the prompt and the stored run options)
turn              data-key, data-state, data-model, data-input-tokens, data-output-tokens,
                  data-cost; turn-text, partial (data-chars: text streamed so far), turn-error
tool-card         data-tool, data-call-id, data-state (asked, started, completed, failed,
                  waiting, denied), data-key; tool-args, tool-result, tool-error
approval-ask      data-key, data-state, data-approved (true, false, '')
child-run         data-workflow (nested under its tool card)
keys              (keys, fingerprints, leases: only with "details")
fork-form         data-run, data-at; fork-outcome: data-outcome (running, completed, error)
compare           data-diverged (request index, '' for none); compare-side: data-run,
                  data-input-tokens, data-output-tokens; divergence (the words);
                  compare-summary, its compare-row: data-figure (answer, requests, tokens,
                  cost, time, lineage)
events            data-after; event-row: data-seq, data-kind
================  =========================================================================
"""

from agentq.markup import COLORS, badge, error_html, fmt_seconds, more_html
from agentq.widgets.html.calls import call_counts_html, call_totals_html
from agentq.widgets.html.detail import (
    call_detail_html,
    json_html,
    step_detail_html,
    workflow_detail_html,
)
from agentq.widgets.html.results import (
    approval_html,
    outcome_html,
    run_result_html,
    step_status_html,
    wait_html,
)
from agentq.widgets.html.tables import LaneSnapshot, lanes_html, queue_stats_html, steps_html
from agentq.widgets.html.timeline import timeline_html
from agentq.widgets.html.tree import run_tree_html, tree_html

__all__ = [
    "COLORS",
    "LaneSnapshot",
    "approval_html",
    "badge",
    "call_counts_html",
    "call_detail_html",
    "call_totals_html",
    "error_html",
    "fmt_seconds",
    "json_html",
    "lanes_html",
    "more_html",
    "outcome_html",
    "queue_stats_html",
    "run_result_html",
    "run_tree_html",
    "step_detail_html",
    "step_status_html",
    "steps_html",
    "timeline_html",
    "tree_html",
    "wait_html",
    "workflow_detail_html",
]
