"""Live notebook widgets: lanes, steps, the event timeline, approvals, and all four together.

Needs the ``notebook`` extra (``pip install 'agentq[notebook]'``); ipywidgets is imported when
a widget is first built, so ``import agentq`` (and `agentq.widgets.html`) never needs it.

Every widget runs one refresher task on the kernel's running loop (``start()``), refreshes a few
times a second only when something changed, and re-raises the refresher's errors from
``await stop()``. Displaying a widget shows it; ``start()`` returns it, so a cell can end with
``Dashboard(engine).start()``.

=================  ==========================================================================
`LaneMonitor`      running/permits and queued/capacity per lane (``queue.stats()``)
`StepTable`        steps with status badges, attempt, duration, error, durable call counts,
                   a keyed wait's key, details and deadline; status filter
`EventTimeline`    a Gantt-like row per step: attempts, retries, waits, coloured by outcome,
                   and the step's durable calls as thin bars
`ApprovalPanel`    waiting steps with Approve / Reject buttons that schedule ``engine.resume``,
                   and Approve / Deny all that match a filter (`BulkBar`)
`WaitFilter`       which waits to answer in bulk; `pending_waits` reads them,
                   `answer_waits` answers them (a `BulkReport`); no ipywidgets needed
`Dashboard`        the four above under one refresher, the call totals (with the calls
                   the engine answered from the log), the selected workflow's live tree
                   and the detail of a selected workflow, step or call, and Cancel / Retry
`RunView`          an agent run as a conversation: answer, prompt, model turns, tool cards,
                   approvals inline (Approve / Edit / Deny), child runs, tokens and cost,
                   Fork from here, compare, the event history
`compare`          two agent runs side by side (where they first differ)
`Price`            a model's price per million tokens (the price table of `RunView`)
`export_html`      the same views of a store (no lanes, no buttons) as one static HTML file,
                   with each workflow's tree and the detail of each node, working offline;
                   `dashboard_html` returns the page (needs no ipywidgets: ``agentq export``)
`check_export_path` refuses an export path that is the store's own file
`GroupMonitor`     a run group as a live progress bar: counts by state, failures with their
                   reasons, tokens and cost so far, the time left; `follow_group` draws the
                   same as one line on a console (scripts; rich)
`run_tree_html`    a workflow's tree (workflow → steps → calls) as pure HTML, from its rows
`load_conversation` an agent run read and folded into a `Conversation` (its `Turn` s, their
                   `ToolCard` s, `ChildRun` s); `is_agent_run` tells one from its row. No
                   ipywidgets and no pydantic-ai: ``agentq show`` prints it as a transcript
=================  ==========================================================================

Three rooms hold what the widgets are built from, so a module's folder says what it is:

- ``models/``: the models, plain values and the store reads behind them (no ipywidgets, no
  HTML): the event log folded into timeline spans and call counts, a workflow's detail and
  run tree, what changed in the store since the last refresh, search and paging, answering
  waits in bulk;
- ``html/``: the pure HTML renderers of those models, one module per view family; its
  docstring lists the stable ``data-agentq`` attributes;
- ``live/``: the refresher every widget runs on the kernel's loop, and the cell that owns it.

The widget classes (ipywidgets) are the modules beside them. Reading order (each module imports
only the ones above it, and the layers below: the foundation modules with `agentq.markup`, the
queue, the store, the workflows):

- ``models``: see its docstring (``timeline``, ``calls``, ``detail``, ``tree``, ``source``,
  ``search``, ``bulk``, ``group``);
- ``html``: see its docstring (``calls``, ``results``, ``tables``, ``timeline``, ``detail``,
  ``tree``, ``group``);
- ``live``: ``cells`` (`CellOwner`) and ``refresher`` (`Live`, `Spawner`, `Confirmation`);
- ``group``: `GroupMonitor` and `follow_group`: a run group's progress;
- ``monitor``: `LaneMonitor`, `StepTable` (search, paging), `EventTimeline` (axis, zoom);
- ``tree``: `RunTree`: the live tree (anywidget: open nodes survive redraws, clicks select);
- ``bulk``: `BulkBar`: approve or deny all waits that match a filter, after a confirmation;
- ``approval_slot``: `ApprovalSlot`: the widgets of one waiting step;
- ``comparing``: `compare` (two runs side by side, a value with ``_repr_html_``);
- ``approvals``: `ApprovalPanel`, its slots and its `BulkBar`;
- ``detail``: `DetailPane`: a workflow, step or call selected, and its detail;
- ``actions``: `Actions`: cancel / retry the selected workflow, after a confirmation;
- ``forking``: `ForkEditor` and `ForkBlock`: "Fork from here" (edit a value or the run
  options, fork);
- ``history``: `EventHistory`: a workflow's events as a paged table;
- ``runview``: `RunView`: the conversation view (approvals, forks, comparison, history);
- ``dashboard``: `Dashboard`;
- ``export``: `export_html` and `dashboard_html` (beside ``dashboard``, importing neither it
  nor ipywidgets: models and HTML only).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentq.widgets.approvals import ApprovalPanel
    from agentq.widgets.comparing import compare
    from agentq.widgets.dashboard import Dashboard
    from agentq.widgets.export import check_export_path, dashboard_html, export_html
    from agentq.widgets.group import GroupMonitor, follow_group
    from agentq.widgets.html.tree import run_tree_html
    from agentq.widgets.models.bulk import (
        BulkOutcome,
        BulkReport,
        WaitFilter,
        answer_waits,
        pending_waits,
    )
    from agentq.widgets.models.conversation import (
        ChildRun,
        Conversation,
        ToolCard,
        Turn,
        is_agent_run,
    )
    from agentq.widgets.models.folding import parked_on
    from agentq.widgets.models.prices import Price
    from agentq.widgets.models.runs import load_conversation
    from agentq.widgets.monitor import EventTimeline, LaneMonitor, StepTable
    from agentq.widgets.runview import RunView

__all__ = [
    "ApprovalPanel",
    "BulkOutcome",
    "BulkReport",
    "ChildRun",
    "Conversation",
    "Dashboard",
    "EventTimeline",
    "GroupMonitor",
    "LaneMonitor",
    "Price",
    "RunView",
    "StepTable",
    "ToolCard",
    "Turn",
    "WaitFilter",
    "answer_waits",
    "check_export_path",
    "compare",
    "dashboard_html",
    "export_html",
    "follow_group",
    "is_agent_run",
    "load_conversation",
    "parked_on",
    "pending_waits",
    "run_tree_html",
]

_HOMES = {
    "ApprovalPanel": "agentq.widgets.approvals",
    "BulkOutcome": "agentq.widgets.models.bulk",
    "BulkReport": "agentq.widgets.models.bulk",
    "WaitFilter": "agentq.widgets.models.bulk",
    "answer_waits": "agentq.widgets.models.bulk",
    "pending_waits": "agentq.widgets.models.bulk",
    "Dashboard": "agentq.widgets.dashboard",
    "EventTimeline": "agentq.widgets.monitor",
    "GroupMonitor": "agentq.widgets.group",
    "follow_group": "agentq.widgets.group",
    "LaneMonitor": "agentq.widgets.monitor",
    "StepTable": "agentq.widgets.monitor",
    "Price": "agentq.widgets.models.prices",
    "RunView": "agentq.widgets.runview",
    "compare": "agentq.widgets.comparing",
    "check_export_path": "agentq.widgets.export",
    "dashboard_html": "agentq.widgets.export",
    "export_html": "agentq.widgets.export",
    "run_tree_html": "agentq.widgets.html.tree",
    "ChildRun": "agentq.widgets.models.conversation",
    "Conversation": "agentq.widgets.models.conversation",
    "ToolCard": "agentq.widgets.models.conversation",
    "Turn": "agentq.widgets.models.conversation",
    "is_agent_run": "agentq.widgets.models.conversation",
    "load_conversation": "agentq.widgets.models.runs",
    "parked_on": "agentq.widgets.models.folding",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentq.widgets' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
