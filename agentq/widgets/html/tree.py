"""`tree_html`: a run's tree (`agentq.widgets.models.tree.TreeNode`) as nested ``<details>``.

No script: a node with children is a ``<details>`` whose ``<summary>`` is its label (title,
status badge, facts), so a browser expands and collapses it without JavaScript, in a notebook
as in the static export. The live view (`agentq.widgets.tree.RunTree`) adds a few lines of
browser code on top: it keeps the nodes the person opened open across redraws and turns a
click on a label into a selection. Which nodes are open is an argument (`open_nodes`), so a
redraw from the kernel keeps them open too.

Caps (`cap_tree`, one rule for the live tree and the export): what matters is kept. A node
lists at most `limit` children, chosen in this order: the ones that run, wait or failed (or hold
such a node below them), then the latest that ran (a running agent's newest calls), then the
next pending ones (the steps after the current one); the chosen are drawn in their order. The
`nodes` budget is then spent level by level, newest first, after the nodes that run, wait or
failed and their parents: the waiting step and the newest model request are drawn before old
history. Every child cut, by either cap, is counted on its parent's "… n more … not shown"
line. Every title, fact, id and key is escaped; titles and facts are isolated (``<bdi>``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence

from agentq.markup import FONT, MUTED, badge, check_count, esc, esc_text, more_html, short
from agentq.store import CallRow, StepRow, WorkflowRow
from agentq.widgets.models.tree import TreeNode, build_tree

__all__ = ["HOT_STATES", "TREE_CHILDREN", "cap_tree", "run_tree_html", "tree_html"]

TREE_CHILDREN = 50
"""Children listed per node (the latest ones); the earlier ones are counted on a "more" line."""

FACT_CHARS = 100
"""A fact longer than this (an error message) is shortened; the full text is its tooltip."""

HOT_STATES = frozenset({"leased", "waiting", "failed", "started"})
"""States of the nodes a cap never cuts first: running steps and calls, waits, failures."""

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


def _hot(node: TreeNode, memo: dict[int, bool]) -> bool:
    """Whether `node` runs, waits or failed, or holds such a node below it."""
    key = id(node)
    if key not in memo:
        memo[key] = node.state in HOT_STATES or any(_hot(c, memo) for c in node.children)
    return memo[key]


def cap_tree(root: TreeNode, *, limit: int, nodes: int | None) -> dict[int, list[TreeNode]]:
    """Choose the nodes drawn under the caps (see the module docstring).

    Args:
        root: The tree.
        limit: Children drawn per node at most.
        nodes: Nodes drawn in all at most (None: no cap).

    Returns:
        ``id(node) -> its children drawn, in their order`` for every node drawn (the root
        always is).
    """
    memo: dict[int, bool] = {}
    chosen: dict[int, list[TreeNode]] = {}

    def preferred(node: TreeNode) -> list[TreeNode]:
        if id(node) not in chosen:
            ranked = sorted(
                enumerate(node.children),
                key=lambda ic: (0, -ic[0]) if _hot(ic[1], memo) else (
                    (2, ic[0]) if ic[1].state == "pending" else (1, -ic[0])),
            )
            chosen[id(node)] = [child for _, child in ranked[:limit]]
        return chosen[id(node)]

    left = -1 if nodes is None else nodes - 1
    drawn: dict[int, list[TreeNode]] = {id(root): []}
    for hot_only in (True, False):  # the hot paths first, then the rest, level by level
        queue = deque([root])
        while queue and left != 0:
            node = queue.popleft()
            for child in preferred(node):
                if hot_only and not _hot(child, memo):
                    continue
                if id(child) not in drawn:
                    if left == 0:
                        break
                    left -= 1
                    drawn[id(child)] = []
                    drawn[id(node)].append(child)
                queue.append(child)
    position = {id(child): i for node in (root, *root.walk()) for i, child in
                enumerate(node.children)}
    for kids in drawn.values():
        kids.sort(key=lambda child: position[id(child)])
    return drawn


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
        root: The workflow's node (`agentq.widgets.models.tree.build_tree`).
        open_nodes: Node ids drawn expanded (``"w"``, ``"s:0"``, ``"c:<key>"``).
        limit: Children listed per node (>= 1): those that run, wait or failed first, then
            the latest (`cap_tree`).
        nodes: At most this many nodes in all (None: no cap), spent on what runs, waits or
            failed first, then newest first; the rest are counted on the "more" lines.
        detail: Optional ``node -> HTML`` embedded in each node (the static export puts each
            node's detail view there, folded in a ``<details data-agentq="tree-detail">``).

    Returns:
        ``<div data-agentq="tree" data-workflow=…>`` holding ``data-agentq="tree-node"``
        elements (``data-node``, ``data-kind``, ``data-state``; ``<details>`` when they have
        children or a detail), each with a ``data-agentq="tree-label"`` (``data-select``: its
        node id) and ``data-agentq="more"`` lines where children are cut.

    Raises:
        TypeError: `limit` or `nodes` is not an int (the message names it).
        ValueError: `limit` < 1 or `nodes` < 1 (the message names it).
    """
    check_count(limit, "limit")
    if nodes is not None:
        check_count(nodes, "nodes")
    drawn = cap_tree(root, limit=limit, nodes=nodes)
    opened = frozenset(open_nodes)

    def draw(node: TreeNode) -> str:
        attrs = (
            f'data-agentq="tree-node" data-node="{esc(node.node)}" data-kind="{node.kind}" '
            f'data-state="{esc(node.state)}"'
        )
        kids = drawn[id(node)]
        more = more_html(len(node.children) - len(kids), _WHAT.get(node.kind, "items"))
        inner = ""
        if detail is not None:
            body = f'<div style="white-space:normal">{detail(node)}</div>'
            inner = body if not node.children else (
                '<details data-agentq="tree-detail"><summary style="cursor:pointer;'
                f'{MUTED}">detail</summary>{body}</details>'
            )
        if not (kids or more or inner):
            return f'<div {attrs} style="padding:1px 0 1px 14px">{_label(node)}</div>'
        is_open = " open" if node.node in opened else ""
        return (
            f"<details {attrs}{is_open}><summary style=\"padding:1px 0\">{_label(node)}"
            f'</summary><div style="{_INDENT}">{inner}{more}'
            f'{"".join(draw(child) for child in kids)}</div></details>'
        )

    return (
        f'<div data-agentq="tree" data-workflow="{esc(root.title)}" '
        f'style="{FONT};font-size:12px;line-height:1.5;white-space:nowrap">{draw(root)}</div>'
        # labels on one line: a long one scrolls the tree sideways instead of wrapping
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
