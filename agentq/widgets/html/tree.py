"""`tree_html`: a run's tree (`agentq.widgets._tree.TreeNode`) as nested ``<details>``.

No script: a node with children is a ``<details>`` whose ``<summary>`` is its label (title,
status badge, facts), so a browser expands and collapses it without JavaScript, in a notebook
as in the static export. The live view (`agentq.widgets.tree.RunTree`) adds a few lines of
browser code on top: it keeps the nodes the person opened open across redraws and turns a
click on a label into a selection. Which nodes are open is an argument (`open_nodes`), so a
redraw from the kernel keeps them open too.

Caps: a node lists at most `limit` children (the latest: a running agent's newest calls stay
visible), after a "… n more calls not shown" line; `nodes` caps the whole tree (the
export's size bound). Every title, fact, id and key is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from agentq.markup import FONT, MUTED, badge, esc, esc_text, more_html, short
from agentq.store import CallRow, StepRow, WorkflowRow
from agentq.widgets._tree import TreeNode, build_tree

__all__ = ["TREE_CHILDREN", "run_tree_html", "tree_html"]

TREE_CHILDREN = 50
"""Children listed per node (the latest ones); the earlier ones are counted on a "more" line."""

FACT_CHARS = 100
"""A fact longer than this (an error message) is shortened; the full text is its tooltip."""

_INDENT = "margin-left:16px"
_WHAT = {"workflow": "steps", "step": "calls", "model": "calls"}


def _label(node: TreeNode) -> str:
    facts = " · ".join(short(fact, FACT_CHARS) for fact in node.facts)
    colour = "color:#b91c1c" if node.failed else MUTED
    extra = f' <span style="{colour}">{facts}</span>' if facts else ""
    weight = "font-weight:600;" if node.kind == "workflow" else ""
    return (
        f'<span data-agentq="tree-label" data-select="{esc(node.node)}" '
        f'style="{weight}cursor:pointer;text-decoration:underline dotted" '
        f'title="open its detail">{esc_text(node.title)}</span> {badge(node.state)}{extra}'
    )


def tree_html(
    root: TreeNode,
    *,
    open_nodes: Collection[str] = ("w",),
    limit: int = TREE_CHILDREN,
    nodes: int | None = None,
    detail: Callable[[TreeNode], str] | None = None,
) -> str:
    """Render a run's tree.

    Args:
        root: The workflow's node (`agentq.widgets._tree.build_tree`).
        open_nodes: Node ids drawn expanded (``"w"``, ``"s:0"``, ``"c:<key>"``).
        limit: Children listed per node, the latest ones (>= 1).
        nodes: At most this many nodes in all (None: no cap); the rest are counted on the
            "more" lines.
        detail: Optional ``node -> HTML`` embedded in each node (the static export puts each
            node's detail view there, folded in a ``<details data-agentq="tree-detail">``).

    Returns:
        ``<div data-agentq="tree" data-workflow=…>`` holding ``data-agentq="tree-node"``
        elements (``data-node``, ``data-kind``, ``data-state``; ``<details>`` when they have
        children or a detail), each with a ``data-agentq="tree-label"`` (``data-select``: its
        node id) and ``data-agentq="more"`` lines where children are cut.

    Raises:
        ValueError: `limit` < 1 or `nodes` < 1.
    """
    if limit < 1 or (nodes is not None and nodes < 1):
        raise ValueError(f"limit and nodes must be >= 1, got {limit!r} and {nodes!r}")
    budget = [nodes if nodes is not None else -1]
    opened = frozenset(open_nodes)

    def draw(node: TreeNode) -> str:
        budget[0] -= 1
        attrs = (
            f'data-agentq="tree-node" data-node="{esc(node.node)}" data-kind="{node.kind}" '
            f'data-state="{esc(node.state)}"'
        )
        kids = node.children[-limit:]
        hidden = len(node.children) - len(kids)
        drawn: list[str] = []
        for child in kids:
            if budget[0] == 0:
                hidden += len(kids) - len(drawn)
                break
            drawn.append(draw(child))
        more = more_html(hidden, _WHAT.get(node.kind, "items"))
        inner = ""
        if detail is not None:
            body = detail(node)
            inner = body if not node.children else (
                '<details data-agentq="tree-detail"><summary style="cursor:pointer;'
                f'{MUTED}">detail</summary>{body}</details>'
            )
        if not (drawn or more or inner):
            return f'<div {attrs} style="padding:1px 0 1px 14px">{_label(node)}</div>'
        is_open = " open" if node.node in opened else ""
        return (
            f"<details {attrs}{is_open}><summary style=\"padding:1px 0\">{_label(node)}"
            f'</summary><div style="{_INDENT}">{inner}{more}{"".join(drawn)}</div></details>'
        )

    return (
        f'<div data-agentq="tree" data-workflow="{esc(root.title)}" '
        f'style="{FONT};font-size:12px;line-height:1.5">{draw(root)}</div>'
    )


def run_tree_html(
    workflow: WorkflowRow | str,
    calls: Sequence[CallRow] = (),
    steps: Sequence[StepRow] = (),
    *,
    state: str = "",
    expanded: bool = False,
    limit: int = TREE_CHILDREN,
) -> str:
    """Build a workflow's tree from its rows and render it (`build_tree`, then `tree_html`).

    Args:
        workflow: Its projection row, or its id (then `state` is the root's status).
        calls: Its call and wait rows (``store.calls(workflow_id)``).
        steps: Its step rows (``store.step_rows(workflow_id)``); empty: calls at the root.
        state: The root's status when `workflow` is an id.
        expanded: Draw every node open (default: the root only).
        limit: Children listed per node.

    Returns:
        The HTML of `tree_html`.
    """
    root = build_tree(workflow, steps, calls, state=state)
    opened = [n.node for n in root.walk()] if expanded else ["w"]
    return tree_html(root, open_nodes=opened, limit=limit)
