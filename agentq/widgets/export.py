"""`export_html`: the dashboard's views of a store as one static HTML file.

The page is made of the same pure renderers the live widgets show (`agentq.widgets.html`):
the waiting steps (`approval_html`, without buttons: a static page cannot resume), the step
table with its durable call counts (`steps_html`), the call totals (`call_totals_html`), each
recent workflow's run tree (`tree_html`) and the timeline (`timeline_html`). There are no
lanes: a store has no queue. Needs no ipywidgets and no pandas, so the command line's
``agentq export --html`` works with the ``cli`` extra only.

Offline: the file loads nothing (no script, no stylesheet, no image, no font: inline styles
only) and needs no kernel. Each tree node is a ``<details>`` that a click expands; the detail
view of each node (the live dashboard's: input, output, error and traceback, attempts, usage)
is folded inside it. Size is bounded: the trees of the latest `workflows` workflows, at most
`TREE_CHILDREN` children per node (the latest) and `nodes` nodes in all; each cut is counted
on a "… n more" line, and the page says so at the top of the Runs section.
"""

from __future__ import annotations

import asyncio
import html
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from agentq.markup import FONT, MUTED, clock_text, more_html
from agentq.store import DurableStore, StepState
from agentq.widgets._calls import CallTally
from agentq.widgets._detail import DetailSnapshot, load_detail
from agentq.widgets._timeline import Timeline
from agentq.widgets._tree import TreeNode, build_tree
from agentq.widgets.html.calls import call_totals_html
from agentq.widgets.html.detail import call_detail_html, step_detail_html, workflow_detail_html
from agentq.widgets.html.results import approval_html
from agentq.widgets.html.tables import steps_html
from agentq.widgets.html.timeline import timeline_html
from agentq.widgets.html.tree import TREE_CHILDREN, tree_html

__all__ = ["TREE_NODES", "dashboard_html", "export_html"]

TREE_NODES = 1_000
"""Tree nodes (each with its detail view) in one exported file, over all its trees."""


def _section(title: str, body: str) -> str:
    return (
        f'<section style="margin:14px 0"><h2 style="{FONT};font-size:15px;margin:0 0 6px">'
        f"{title}</h2>{body}</section>"
    )


def _node_detail(snap: DetailSnapshot, now: float) -> Callable[[TreeNode], str]:
    def detail(node: TreeNode) -> str:
        kind, ref = node.item
        if kind == "step":
            return step_detail_html(snap, ref, now=now)
        if kind == "call":
            return call_detail_html(snap, ref, now=now)
        return workflow_detail_html(snap, now=now)

    return detail


async def _trees_html(store: DurableStore, *, now: float, workflows: int, nodes: int) -> str:
    """The run trees of the latest `workflows` workflows, `nodes` nodes in all, with details."""
    rows = sorted(await store.workflows(), key=lambda r: -r.last_seq)
    parts = [
        f'<div data-agentq="tree-caps" style="{MUTED};margin-bottom:4px">The latest '
        f"{min(workflows, len(rows))} of {len(rows)} workflow(s); at most {TREE_CHILDREN} "
        f"children per node (the latest) and {nodes:,} nodes in all. Click a node to expand "
        "it; <i>detail</i> opens its detail view.</div>"
    ]
    left, drawn = nodes, 0
    for row in rows[:workflows]:
        if left <= 0:
            break
        snap = await load_detail(store, row.workflow_id)
        if snap is None:  # deleted meanwhile
            continue
        root = build_tree(snap.workflow, snap.steps, snap.calls)
        tree = tree_html(root, open_nodes=("w",), nodes=left, detail=_node_detail(snap, now))
        left -= tree.count('data-agentq="tree-node"')
        drawn += 1
        parts.append(f'<div style="margin:4px 0">{tree}</div>')
    parts.append(more_html(len(rows) - drawn, "workflows"))
    return "".join(parts)


async def dashboard_html(
    store: DurableStore,
    *,
    now: float,
    limit: int = 500,
    workflows: int = 50,
    title: str = "",
    nodes: int = TREE_NODES,
) -> str:
    """Render a store's dashboard views as one self-contained HTML page.

    Reads the whole event log and the ``steps`` projection once, and each tree's workflow
    (`load_detail`: four reads) once.

    Args:
        store: Any `DurableStore`.
        now: Unix seconds: the right end of the timeline and of unfinished durations.
        limit: Maximum step rows in the table (the most recently active workflows first).
        workflows: Maximum workflows drawn in the timeline and as trees.
        title: Shown at the top of the page (escaped), e.g. the store's path.
        nodes: Maximum tree nodes (each with its detail view) over all the trees.

    Returns:
        The page (``<!DOCTYPE html>`` …), every stored string escaped, no script, nothing
        fetched from the network.

    Raises:
        StoreError: The store failed.
        ValueError: `limit`, `workflows` or `nodes` is less than 1.
    """
    if limit < 1 or workflows < 1 or nodes < 1:
        raise ValueError(
            f"limit, workflows and nodes must be >= 1, got {limit!r}, {workflows!r} "
            f"and {nodes!r}"
        )
    events = await store.event_rows()
    steps = await store.step_rows()
    tally = CallTally()
    tally.apply(events)
    timeline = Timeline()
    timeline.apply(events)
    # the most recently active workflows first, as in the live step table
    recency = {row[2]: row[0] for row in events}
    ordered = sorted(steps, key=lambda r: (-recency.get(r.workflow_id, 0), r.step_index))
    counts = Counter(row.state.value for row in steps)
    waiting = [row for row in steps if row.state is StepState.WAITING]
    approvals = "".join(approval_html(row) for row in waiting) or (
        f'<div style="{FONT};{MUTED}">no step waits for input</div>'
    )
    body = "".join(
        [
            _section(f"Waiting for input ({len(waiting)})", approvals),
            _section("Durable calls", call_totals_html(tally.totals)),
            _section("Runs", await _trees_html(store, now=now, workflows=workflows,
                                               nodes=nodes)),
            _section(
                "Steps",
                steps_html(ordered[:limit], now=now, limit=limit, total=len(ordered),
                           counts=counts, calls=tally.steps),
            ),
            _section(
                "Timeline",
                timeline_html(timeline.recent(workflows), now=now, limit=workflows,
                              total=len(timeline)),
            ),
        ]
    )
    heading = html.escape(title or "agentq")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{heading} · agentq</title></head>"
        f'<body style="{FONT};margin:16px">'
        f'<h1 style="font-size:18px;margin:0">{heading}</h1>'
        f'<div style="{MUTED}">{len(recency)} workflow(s), {len(events)} event(s); '
        f"exported {clock_text(now)}</div>{body}</body></html>\n"
    )


async def export_html(
    store: DurableStore,
    path: str | Path,
    *,
    now: float,
    limit: int = 500,
    workflows: int = 50,
    title: str = "",
    nodes: int = TREE_NODES,
) -> Path:
    """Write `dashboard_html` of `store` to `path` (UTF-8), replacing the file.

    Args:
        store: Any `DurableStore`.
        path: The HTML file to write; its directory must exist.
        now: Unix seconds (see `dashboard_html`).
        limit: Maximum step rows.
        workflows: Maximum workflows in the timeline and as trees.
        title: The page's heading.
        nodes: Maximum tree nodes over all the trees.

    Returns:
        The path written.

    Raises:
        StoreError: The store failed.
        OSError: The file cannot be written.
        ValueError: A bad `limit`, `workflows` or `nodes`.

    Example:
        >>> await export_html(store, "dashboard.html", now=time.time(), title="orders.db")
    """
    page = await dashboard_html(store, now=now, limit=limit, workflows=workflows, title=title,
                                nodes=nodes)
    out = Path(path)
    await asyncio.to_thread(out.write_text, page, encoding="utf-8")
    return out
