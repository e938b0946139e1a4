"""`RunTree`: the live tree of the workflow a detail pane shows, collapsible, clickable.

The tree is `agentq.widgets.html.tree.tree_html` of `agentq.widgets._tree.build_tree`, drawn
from the snapshot the `DetailPane` already read (`load_detail`: the selected workflow's rows
only), so it costs no read of its own and its refresh cost is flat in the log's size. It is
redrawn when that snapshot changes (the pane re-reads the workflow when its events arrive).

Why browser code (``anywidget``, in the ``notebook`` extra): an ipywidgets ``HTML`` redraw
replaces the page's elements, which closes every ``<details>`` the person opened, and a click
on plain HTML cannot reach the kernel. The few lines of JavaScript in `ESM` (no network, no
CDN) send each toggle and each click on a label to the kernel, and re-apply the person's
toggles after a redraw. The kernel keeps the same state (`opened`, per workflow) and draws
``open`` into the HTML, so a redraw from the kernel keeps open nodes open even before the
browser re-applies them. By default the root and the steps that run, wait or failed are open;
a node drawn open stays open (a step that was waiting stays open once it completes) until the
person closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from agentq.extras import require
from agentq.markup import MUTED
from agentq.widgets._detail import DetailSnapshot
from agentq.widgets._live import set_value
from agentq.widgets._tree import Item, TreeNode, build_tree, node_item
from agentq.widgets.html.tree import TREE_CHILDREN, tree_html

__all__ = ["ESM", "LIVE_NODES", "RunTree"]

ESM = """
export default {
  render({ model, el }) {
    const local = new Map();  // workflow + node -> open, as the person toggled it here
    const keyOf = (d) =>
      (d.closest("[data-agentq=tree]")?.dataset.workflow ?? "") + "\\n" + d.dataset.node;
    const draw = () => {
      el.innerHTML = model.get("value");
      for (const d of el.querySelectorAll("details[data-agentq=tree-node]")) {
        const k = keyOf(d);
        if (local.has(k)) d.open = local.get(k);
      }
    };
    const onClick = (e) => {
      const label = e.target.closest("[data-select]");
      if (label && el.contains(label)) {
        e.preventDefault();  // a label opens the detail; the marker expands
        model.send({ event: "select", node: label.dataset.select });
        return;
      }
      const summary = e.target.closest("summary");
      const d = summary ? summary.parentElement : null;
      if (!d || d.dataset.agentq !== "tree-node" || !el.contains(d)) return;
      const open = !d.open;  // the click toggles it after this handler
      local.set(keyOf(d), open);
      model.send({ event: "toggle", node: d.dataset.node, open });
    };
    el.addEventListener("click", onClick);
    model.on("change:value", draw);
    draw();
    return () => {
      el.removeEventListener("click", onClick);
      model.off("change:value", draw);
    };
  },
};
"""
"""The tree's browser code (an ES module, inline: works offline)."""

_OPEN_STATES = frozenset({"leased", "waiting", "failed"})

_EMPTY = (
    f'<div data-agentq="tree-empty" style="{MUTED};font-size:12px;padding:4px">'
    "Select a workflow to see its tree.</div>"
)

LIVE_NODES = 500
"""Nodes drawn at most in the live tree (a long agent run's; the rest on "more" lines)."""


@cache
def _widget_class() -> Any:
    anywidget = require("anywidget", "notebook")
    traitlets = require("traitlets", "notebook")

    class TreeWidget(anywidget.AnyWidget):  # type: ignore[misc,name-defined]
        _esm = ESM
        value = traitlets.Unicode("").tag(sync=True)

    return TreeWidget


class RunTree:
    """One workflow's tree, live: its nodes' open state survives redraws; a click selects.

    Args:
        on_select: Called with the `Item` of a node whose label was clicked (the `DetailPane`
            shows its detail); errors it raises are the caller's.
        limit: Children listed per node (the latest; see `tree_html`).
        nodes: Nodes drawn at most (`LIVE_NODES`).

    Attributes:
        widget: The anywidget (its ``value`` is the HTML drawn).
        root: The tree drawn, or None before a workflow is shown.
        opened: Per workflow id, the nodes toggled (node id → open): by the person, or
            opened by default when first drawn.

    Raises:
        MissingExtraError: anywidget is not installed (``pip install 'agentq[notebook]'``).

    Example:
        >>> tree = RunTree(lambda item: print(item))
        >>> tree.show(await load_detail(store, "order-3"))
    """

    def __init__(
        self,
        on_select: Callable[[Item], None] | None = None,
        *,
        limit: int = TREE_CHILDREN,
        nodes: int = LIVE_NODES,
    ) -> None:
        self.widget = _widget_class()()
        self.widget.add_class("agentq-tree")
        self.on_select = on_select
        self.limit = limit
        self.nodes = nodes
        self.root: TreeNode | None = None
        self.workflow_id: str | None = None
        self.opened: dict[str, dict[str, bool]] = {}
        self.widget.on_msg(self._message)
        self.render()

    def open_nodes(self) -> set[str]:
        """The node ids drawn open: the person's toggles, and the defaults they did not close."""
        root = self.root
        if root is None or self.workflow_id is None:
            return set()
        toggled = self.opened.setdefault(self.workflow_id, {})
        for node in ["w", *(n.node for n in root.children if n.state in _OPEN_STATES)]:
            toggled.setdefault(node, True)  # once drawn open, it stays open until closed
        return {node for node, is_open in toggled.items() if is_open}

    def show(self, snap: DetailSnapshot | None) -> bool:
        """Draw the tree of `snap`'s workflow (None: empty); return whether the HTML changed."""
        if snap is None:
            self.root = self.workflow_id = None
        else:
            self.workflow_id = snap.workflow.workflow_id
            self.root = build_tree(snap.workflow, snap.steps, snap.calls)
        return self.render()

    def render(self) -> bool:
        """Redraw from the tree and the open nodes (no I/O); return whether it changed."""
        if self.root is None:
            return set_value(self.widget, _EMPTY)
        html = tree_html(self.root, open_nodes=self.open_nodes(), limit=self.limit,
                         nodes=self.nodes)
        return set_value(self.widget, html)

    def toggle(self, node: str, is_open: bool) -> bool:
        """Record that the person opened (or closed) `node`, and redraw.

        Raises:
            ValueError: `node` is not a node id.
        """
        node_item(node)
        if self.workflow_id is None:
            return False
        self.opened.setdefault(self.workflow_id, {})[node] = is_open
        return self.render()

    def select(self, node: str) -> None:
        """Do what a click on `node`'s label does: call `on_select` with its item.

        Raises:
            ValueError: `node` is not a node id.
        """
        item = node_item(node)
        if self.on_select is not None:
            self.on_select(item)

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A message from the browser: ``{"event": "toggle" | "select", "node", "open"}``."""
        if not isinstance(content, dict) or not isinstance(content.get("node"), str):
            return
        try:
            if content.get("event") == "toggle":
                self.toggle(content["node"], bool(content.get("open")))
            elif content.get("event") == "select":
                self.select(content["node"])
        except (ValueError, KeyError):  # a stale or forged node id: nothing to do
            return
