"""`RunTree`: the live tree of the workflow a detail pane shows, collapsible, clickable.

The tree is `agentq.widgets.html.tree.tree_html` of `agentq.widgets.models.tree.build_tree`, drawn
from the snapshot the `DetailPane` already read (`load_detail`: the selected workflow's rows
only), so it costs no read of its own and its refresh cost is flat in the log's size. It is
redrawn when that snapshot changes (the pane re-reads the workflow when its events arrive).

Why browser code (``anywidget``, in the ``notebook`` extra): an ipywidgets ``HTML`` redraw
replaces the page's elements, which closes every ``<details>`` the person opened, and a click
on plain HTML cannot reach the kernel. The few lines of JavaScript in `ESM` (no network, no
CDN) send each toggle and each click on a label to the kernel, and re-apply the person's
toggles after a redraw until the kernel has heard them. The kernel keeps the same state
(`opened`, per workflow) and draws ``open`` into the HTML, with the number of the last toggle
it heard (``data-ack``); from then on its HTML decides, so `RunTree.toggle` from code shows in
the page as a click does, and `RunTree.open_nodes` is what the page shows. By default the
root and the steps that run, wait or failed are open;
a node drawn open stays open (a step that was waiting stays open once it completes) until the
person closes it.

Without anywidget (an environment that lacks the pin) the tree falls back to the static
export's pure HTML in an ipywidgets ``HTML``; the Dashboard keeps working (`RunTree`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from agentq.errors import MissingExtraError
from agentq.extras import require
from agentq.markup import MUTED, check_count
from agentq.widgets.html.tree import TREE_CHILDREN, tree_html
from agentq.widgets.live.refresher import set_value, widgets
from agentq.widgets.models.detail import DetailSnapshot
from agentq.widgets.models.tree import Item, TreeNode, build_tree, node_item

__all__ = ["ESM", "LIVE_NODES", "RunTree"]

ESM = """
export default {
  render({ model, el }) {
    // workflow + node -> [open, seq]: the person's toggles here, until the kernel's HTML
    // acknowledges them (its data-ack >= seq: the kernel heard the toggle); from then on the
    // kernel's HTML decides, so a toggle() from code shows in the page too.
    const local = new Map();
    let seq = 0;
    const keyOf = (d) =>
      (d.closest("[data-agentq=tree]")?.dataset.workflow ?? "") + "\\n" + d.dataset.node;
    const draw = () => {
      el.innerHTML = model.get("value");
      const ack = Number(el.querySelector("[data-ack]")?.dataset.ack ?? 0);
      for (const d of el.querySelectorAll("details[data-agentq=tree-node]")) {
        const k = keyOf(d);
        const mine = local.get(k);
        if (mine === undefined) continue;
        if (mine[1] <= ack) local.delete(k);  // the kernel's state includes this toggle
        else d.open = mine[0];  // a redraw drawn before the kernel heard it
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
      seq += 1;
      local.set(keyOf(d), [open, seq]);
      model.send({ event: "toggle", node: d.dataset.node, open, seq });
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

_STATIC = (
    f'<div data-agentq="tree-static" style="{MUTED};font-size:11px;padding:2px 4px">'
    "Plain HTML tree (anywidget is not installed): a click expands a node but cannot open its "
    "detail; use the <i>show</i> list. <code>pip install 'agentq[notebook]'</code></div>"
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

    Without anywidget the tree is still drawn, as the pure-HTML tree of the static export (an
    ipywidgets ``HTML``: ``<details>`` that a click expands, kept open by the kernel's state
    across redraws only for the nodes toggled from code), with a note that a click on a node
    cannot open its detail there; the rest of the `Dashboard` works as usual.

    Args:
        on_select: Called with the `Item` of a node whose label was clicked (the `DetailPane`
            shows its detail); errors it raises are the caller's.
        limit: Children listed per node (those that run, wait or failed, then the latest; see
            `tree_html`).
        nodes: Nodes drawn at most (`LIVE_NODES`; the same rule as the export's).

    Attributes:
        widget: The anywidget (its ``value`` is the HTML drawn), or an ipywidgets ``HTML``
            without anywidget.
        interactive: Whether clicks in the page reach the kernel (anywidget is installed).
        root: The tree drawn, or None before a workflow is shown.
        opened: Per workflow id, the nodes toggled (node id → open): by the person, or
            opened by default when first drawn.

    Raises:
        MissingExtraError: ipywidgets is not installed (``pip install 'agentq[notebook]'``).
        TypeError: `limit` or `nodes` is not an int (the message names it).
        ValueError: `limit` or `nodes` is < 1.

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
        self.limit = check_count(limit, "limit")
        self.nodes = check_count(nodes, "nodes")
        try:
            self.widget = _widget_class()()
            self.interactive = True
        except MissingExtraError:  # the tree alone needs anywidget: draw it as plain HTML
            self.widget = widgets().HTML("")
            self.interactive = False
        self.widget.add_class("agentq-tree")
        self.on_select = on_select
        self.root: TreeNode | None = None
        self.workflow_id: str | None = None
        self.opened: dict[str, dict[str, bool]] = {}
        self._ids: frozenset[str] = frozenset()
        self._ack = 0  # the last toggle heard from the page (its seq): drawn as data-ack
        if self.interactive:
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
        return {node for node, is_open in toggled.items() if is_open and node in self._ids}

    def show(self, snap: DetailSnapshot | None) -> bool:
        """Draw the tree of `snap`'s workflow (None: empty); return whether the HTML changed."""
        if snap is None:
            self.root = self.workflow_id = None
            self._ids = frozenset()
        else:
            self.workflow_id = snap.workflow.workflow_id
            self.root = build_tree(snap.workflow, snap.steps, snap.calls)
            self._ids = frozenset(n.node for n in self.root.walk())
        return self.render()

    def render(self) -> bool:
        """Redraw from the tree and the open nodes (no I/O); return whether it changed."""
        if self.root is None:
            return set_value(self.widget, _EMPTY if self.interactive else _STATIC + _EMPTY)
        html = tree_html(self.root, open_nodes=self.open_nodes(), limit=self.limit,
                         nodes=self.nodes)
        if not self.interactive:
            return set_value(self.widget, _STATIC + html)
        return set_value(self.widget, f'<div data-ack="{self._ack}">{html}</div>')

    def _node(self, node: object) -> Item:
        """The item of `node`, a node of the tree shown; the errors name `node`."""
        item = node_item(node)  # type: ignore[arg-type]  # TypeError / ValueError
        if self.workflow_id is None:
            raise KeyError(f"no workflow is shown: no node {node!r}")
        if node not in self._ids:
            raise KeyError(f"workflow {self.workflow_id!r} has no node {node!r}")
        return item

    def toggle(self, node: str, is_open: bool) -> bool:
        """Open (or close) `node`, as a click on its marker does, and redraw.

        The page follows: the kernel's open state wins over what the person toggled there
        before. Returns whether the HTML changed.

        Raises:
            TypeError: `node` is not a str, or `is_open` not a bool.
            ValueError: `node` is not a node id (``"w"``, ``"s:<index>"``, ``"c:<key>"``).
            KeyError: No workflow is shown, or its tree has no node `node`.
        """
        if not isinstance(is_open, bool):
            raise TypeError(f"is_open must be a bool, got {is_open!r}")
        self._node(node)
        assert self.workflow_id is not None
        self.opened.setdefault(self.workflow_id, {})[node] = is_open
        return self.render()

    def select(self, node: str) -> None:
        """Do what a click on `node`'s label does: call `on_select` with its item.

        Raises:
            TypeError: `node` is not a str.
            ValueError: `node` is not a node id.
            KeyError: No workflow is shown, or its tree has no node `node`.
        """
        item = self._node(node)
        if self.on_select is not None:
            self.on_select(item)

    def _message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        """A message from the browser: ``{"event": "toggle", "node", "open", "seq"}`` or
        ``{"event": "select", "node"}``; anything else (junk, a stale node) is ignored."""
        if not isinstance(content, dict) or not isinstance(content.get("node"), str):
            return
        seq = content.get("seq")
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > self._ack:
            self._ack = seq  # drawn by the next render: the page then follows the kernel
        try:
            if content.get("event") == "toggle" and isinstance(content.get("open"), bool):
                self.toggle(content["node"], content["open"])
            elif content.get("event") == "select":
                self.select(content["node"])
        except (ValueError, KeyError, TypeError):  # a stale or forged node id: nothing to do
            self.render()  # the page still hears the acknowledgement
