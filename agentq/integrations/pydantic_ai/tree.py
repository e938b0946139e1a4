"""An agent run as a tree: workflow → model requests → tool calls, with tokens (pure HTML).

A use of the one run tree of the widgets (`agentq.widgets.run_tree_html`, the same tree the
dashboard shows for every workflow): each model request is a node with its tokens; the tool
calls and approvals that follow it (those its response asked for) are its children. This
module adds the run's total tokens above it. Every user string is HTML-escaped. Display it in
a notebook with ``IPython.display.HTML(await run_tree(store, run_id))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentq.errors import UnknownWorkflowError
from agentq.markup import MUTED, esc
from agentq.store import CallRow, DurableStore, WorkflowRow, child_of
from agentq.widgets import run_tree_html as tree_of_calls

__all__ = ["run_tree", "run_tree_html"]


def _tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    i, o = usage.get("input_tokens"), usage.get("output_tokens")
    return (i if isinstance(i, int) else 0), (o if isinstance(o, int) else 0)


def run_tree_html(run_id: str | WorkflowRow, rows: Sequence[CallRow], *, state: str = "") -> str:
    """Render an agent run's calls and waits as a tree, with the run's total tokens.

    Args:
        run_id: The run (its workflow id), the root of the tree; or its `WorkflowRow`
            (then its state is the root's, and a wait still ``waiting`` in a closed run,
            such as a sub-agent's ``child:<key>`` row, is shown with the run's state:
            `agentq.store.shown_call`).
        rows: Its rows as ``store.calls(run_id)`` returns them (first-recorded order).
        state: The run's status shown at the root when `run_id` is an id ('' for none).

    Returns:
        An HTML fragment (``<div data-agentq="agent-tree">``) with the total tokens, then the
        tree (`agentq.widgets.run_tree_html`): one ``data-kind="model"`` node per model
        request with its tool calls and approvals below it; rows recorded before the first
        model request sit at the root. Every node is expanded.
    """
    total_in = total_out = 0
    for row in rows:
        if (row.label or {}).get("kind") == "model":
            i, o = _tokens(row.usage)
            total_in, total_out = total_in + i, total_out + o
    tree = tree_of_calls(run_id, rows, state=state, expanded=True)
    run = run_id.workflow_id if isinstance(run_id, WorkflowRow) else run_id
    return (
        f'<div data-agentq="agent-tree" data-run="{esc(run)}" style="font-size:12px">'
        f"<span style='{MUTED}'>{total_in} in / {total_out} out tokens</span>{tree}</div>"
    )


async def run_tree(store: DurableStore, run_id: str) -> str:
    """Read `run_id`'s calls from `store` and return `run_tree_html` of them.

    The run's child runs (sub-agents run in its tool calls) are nodes under the tool calls
    that made them; their own trees follow, indented, each in a ``data-agentq="agent-child"``
    block (``data-run``: the child's id), down the tree.

    Raises:
        UnknownWorkflowError: No run (workflow) `run_id` is stored (as the engine raises for
            an unknown id; a typo is not drawn as an empty tree).
        StoreError: The store failed.
    """
    row = await store.get_workflow(run_id)
    if row is None:
        raise UnknownWorkflowError(f"run {run_id!r} is not in the store")
    rows = await store.calls(run_id)
    html = run_tree_html(row, rows)
    children = [c for c in map(child_of, rows) if c is not None]
    for child in children:
        inner = await run_tree(store, child)
        html += (f'<div data-agentq="agent-child" data-run="{esc(child)}" '
                 f'style="margin-left:24px">{inner}</div>')
    return html
